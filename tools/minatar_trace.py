"""Records the `minatar` package playing one game, for tests/minatar_test.cc.

  minatar_trace.py trace GAME STEPS SEED OUT
      Random actions (all six; in Freeway "up" half the time, or the chicken would
      hardly ever cross) for STEPS steps with sticky actions 0.1, resetting at episode ends. Every draw the package makes from its RandomState is recorded, so
      the C++ game can be fed the same draws: one line per reset ("R") and per step
      ("A action reward terminal"), each followed by its draws and the state after it
      (the [10, 10, C] booleans channels first, bit-packed, hex).
  minatar_trace.py returns GAME EPISODES SEED
      Returns of a uniformly random policy over the minimal action set (MinAtar/<Game>-v1),
      one per line.
  minatar_trace.py speed GAME STEPS
      Steps per second of the package with random actions (one core).
"""
import sys
import time

import numpy as np
from minatar import Environment


class RecordingRandom:
    """numpy's RandomState, recording what rand() and randint() return."""

    def __init__(self, seed):
        self.rs = np.random.RandomState(seed)
        self.draws = []

    def rand(self, *size):
        v = self.rs.rand(*size)
        for x in np.ravel(v):
            self.draws.append("f:" + float(x).hex())
        return v

    def randint(self, low, high=None, size=None):
        v = self.rs.randint(low, high, size)
        lo, hi = (0, low) if high is None else (low, high)
        for x in np.ravel(v):
            self.draws.append(f"i:{lo}:{hi}:{int(x)}")
        return v

    def take(self):
        d, self.draws = self.draws, []
        return d


def packed(env):
    s = np.moveaxis(env.state(), -1, 0).astype(np.uint8).ravel()
    return np.packbits(s).tobytes().hex()


def trace(game, steps, seed, out):
    env = Environment(game, sticky_action_prob=0.1)
    rec = RecordingRandom(seed)
    env.random = rec
    env.env.random = rec
    actions = np.random.RandomState(seed + 1)
    with open(out, "w") as f:
        f.write(f"minatar {game} {steps} {seed}\n")
        env.reset()
        f.write("R " + " ".join(rec.take()) + "\n" + packed(env) + "\n")
        for _ in range(steps):
            a = int(actions.randint(6))
            if game == "freeway" and actions.rand() < 0.5:
                a = 2
            r, terminal = env.act(a)
            f.write(f"A {a} {float(r)!r} {int(bool(terminal))} " + " ".join(rec.take()) + "\n")
            f.write(packed(env) + "\n")
            if terminal:
                env.reset()
                f.write("R " + " ".join(rec.take()) + "\n" + packed(env) + "\n")


def returns(game, episodes, seed):
    env = Environment(game, sticky_action_prob=0.1)
    env.seed(seed)
    rng = np.random.RandomState(seed + 1)
    actions = env.minimal_action_set()
    for _ in range(episodes):
        env.reset()
        total, terminal = 0.0, False
        while not terminal:
            r, terminal = env.act(actions[rng.randint(len(actions))])
            total += r
        print(total)


def speed(game, steps):
    env = Environment(game, sticky_action_prob=0.1)
    env.seed(0)
    rng = np.random.RandomState(1)
    acts = rng.randint(6, size=steps)
    env.reset()
    start = time.perf_counter()
    for a in acts:
        _, terminal = env.act(int(a))
        env.state()
        if terminal:
            env.reset()
    print(steps / (time.perf_counter() - start))


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "trace":
        trace(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    elif cmd == "returns":
        returns(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif cmd == "speed":
        speed(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit(__doc__)
