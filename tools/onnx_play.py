"""Plays a policy exported with `stampede export CHECKPOINT POLICY.onnx` in a gymnasium env,
acting greedily (the largest logit), with onnxruntime alone: no Stampede code.

  .venv/bin/python tools/onnx_play.py POLICY.onnx [--env CartPole-v1] [--episodes 10] [--seed 0]

Prints each episode's return and the mean. Discrete action spaces; a policy with an LSTM
core carries its state ("state" in, "state_out" out) and starts each episode from zeros.
"""
import argparse

import gymnasium as gym
import numpy as np
import onnxruntime as ort


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--env", default="CartPole-v1")
    ap.add_argument("--episodes", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    sess = ort.InferenceSession(a.model, providers=["CPUExecutionProvider"])
    inputs = {i.name: i for i in sess.get_inputs()}
    obs_type = np.uint8 if inputs["observation"].type == "tensor(uint8)" else np.float32
    state_size = inputs["state"].shape[1] if "state" in inputs else 0
    env = gym.make(a.env)
    returns = []
    for ep in range(a.episodes):
        obs, _ = env.reset(seed=a.seed + ep)
        state = np.zeros((1, state_size), np.float32)
        total, done = 0.0, False
        while not done:
            feeds = {"observation": np.asarray(obs, dtype=obs_type)[None]}
            names = ["policy"] + (["state_out"] if state_size else [])
            if state_size:
                feeds["state"] = state
            out = sess.run(names, feeds)
            if state_size:
                state = out[1]
            obs, reward, terminated, truncated, _ = env.step(int(np.argmax(out[0][0])))
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
        print(f"episode {ep}: return {total:.1f}")
    print(f"RESULT env={a.env} episodes={a.episodes} mean_return={np.mean(returns):.1f} min={np.min(returns):.1f}")


if __name__ == "__main__":
    main()
