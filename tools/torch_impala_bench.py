"""The same learner step as `stampede bench --gpu`, in PyTorch eager, for comparison.

IMPALA's deep ResNet (3 stacks of 16, 32, 32 channels: 3x3 conv, 3x3/2 max-pool, two
residual blocks; FC 256) with an LSTM core of 256 reset at episode starts, on
[T+1, B] = [101, 32] uint8 frames of 4x84x84, 6 actions; V-trace targets, the policy
gradient, baseline and entropy terms, global-norm clipping at 40 and RMSProp. The batch
is copied from pinned host memory every step, as a learner receives new data. PyTorch's
defaults stand: cuDNN convolutions may use TF32, matrix products are FP32.

Prints one line `RESULT agent_steps_per_s=... frames_per_s=...` for tools/gpu-check.sh.
"""
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class ResidualBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv0 = nn.Conv2d(c, c, 3, padding=1)
        self.conv1 = nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        return x + self.conv1(F.relu(self.conv0(F.relu(x))))


class DeepNet(nn.Module):
    def __init__(self, in_channels=4, actions=6, lstm=256):
        super().__init__()
        layers, c = [], in_channels
        for out in (16, 32, 32):
            layers += [nn.Conv2d(c, out, 3, padding=1), nn.MaxPool2d(3, 2, padding=1),
                       ResidualBlock(out), ResidualBlock(out)]
            c = out
        self.torso = nn.Sequential(*layers)
        self.fc = nn.Linear(32 * 11 * 11, 256)
        self.core = nn.LSTMCell(256, lstm)
        self.policy = nn.Linear(lstm, actions)
        self.baseline = nn.Linear(lstm, 1)

    def forward(self, obs, first, state):
        T1, B = obs.shape[:2]
        x = obs.reshape(T1 * B, *obs.shape[2:]).float() / 255.0
        x = F.relu(self.torso(x)).flatten(1)
        x = F.relu(self.fc(x)).view(T1, B, -1)
        h, c = state
        outs = []
        for t in range(T1):
            keep = (1.0 - first[t].float()).unsqueeze(1)
            h, c = self.core(x[t], (h * keep, c * keep))
            outs.append(h)
        core = torch.stack(outs).view(T1 * B, -1)
        return self.policy(core).view(T1, B, -1), self.baseline(core).view(T1, B)


@torch.no_grad()
def vtrace(log_rhos, discounts, rewards, values, bootstrap):
    rhos = log_rhos.exp()
    clipped = rhos.clamp(max=1.0)
    cs = rhos.clamp(max=1.0)
    next_values = torch.cat([values[1:], bootstrap.unsqueeze(0)])
    deltas = clipped * (rewards + discounts * next_values - values)
    acc = torch.zeros_like(bootstrap)
    out = []
    for t in reversed(range(values.shape[0])):
        acc = deltas[t] + discounts[t] * cs[t] * acc
        out.append(acc)
    vs = torch.stack(out[::-1]) + values
    next_vs = torch.cat([vs[1:], bootstrap.unsqueeze(0)])
    return vs, clipped * (rewards + discounts * next_vs - values)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--T", type=int, default=100)
    ap.add_argument("--B", type=int, default=32)
    args = ap.parse_args()
    T, B, A = args.T, args.B, 6
    dev = torch.device("cuda:0")
    net = DeepNet().to(dev)
    opt = torch.optim.RMSprop(net.parameters(), lr=1e-4, alpha=0.99, eps=0.01)
    g = torch.Generator().manual_seed(5)
    host = {
        "obs": torch.randint(0, 256, (T + 1, B, 4, 84, 84), dtype=torch.uint8, generator=g).pin_memory(),
        "actions": torch.randint(0, A, (T, B), generator=g).pin_memory(),
        "rewards": (torch.randint(0, 3, (T, B), generator=g).float() - 1).pin_memory(),
        "done": (torch.rand(T, B, generator=g) < 0.005).pin_memory(),
        "behaviour": torch.randn(T, B, A, generator=g).pin_memory(),
        "h0": torch.zeros(B, 256).pin_memory(),
        "c0": torch.zeros(B, 256).pin_memory(),
    }

    def step():
        d = {k: v.to(dev, non_blocking=True) for k, v in host.items()}
        first = torch.cat([torch.zeros(1, B, dtype=torch.bool, device=dev), d["done"]])
        logits, values = net(d["obs"], first, (d["h0"], d["c0"]))
        logp = F.log_softmax(logits[:T], -1)
        lp_a = logp.gather(2, d["actions"].unsqueeze(2)).squeeze(2)
        lb_a = F.log_softmax(d["behaviour"], -1).gather(2, d["actions"].unsqueeze(2)).squeeze(2)
        discounts = (~d["done"]).float() * 0.99
        vs, adv = vtrace(lp_a.detach() - lb_a, discounts, d["rewards"], values[:T].detach(), values[T].detach())
        pg = -(adv * lp_a).sum()
        baseline = 0.5 * 0.5 * ((vs - values[:T]) ** 2).sum()
        entropy = -(logp.exp() * logp).sum()
        loss = pg + baseline - 0.01 * entropy
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(net.parameters(), 40.0)
        opt.step()

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < args.seconds:
        step()
        torch.cuda.synchronize()
        steps += 1
    elapsed = time.perf_counter() - start
    sps = steps / elapsed
    agent = sps * T * B
    print(f"PyTorch {torch.__version__} eager, {torch.cuda.get_device_name(0)}: deep ResNet + LSTM 256, "
          f"B={B}, T={T}: {sps:.2f} steps/s ({1e3 / sps:.1f} ms/step) = {agent:.0f} agent steps/s = "
          f"{4 * agent:.0f} Atari frames/s")
    print(f"RESULT agent_steps_per_s={agent:.1f} frames_per_s={4 * agent:.1f}")


if __name__ == "__main__":
    main()
