"""numpy's float32 512^3 matrix product on one thread, GFLOP/s (the best of `repeats`
loops of `seconds` each): the yardstick `stampede bench` prints beside the learner step.
Its BLAS's threads are set to one before numpy loads."""
import os
import sys

for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS"):
    os.environ[var] = "1"

import time  # noqa: E402

import numpy as np  # noqa: E402


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    n = 512
    rng = np.random.default_rng(1)
    a = rng.random((n, n), dtype=np.float32)
    b = rng.random((n, n), dtype=np.float32)
    for _ in range(3):
        a @ b
    best = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        calls = 0
        while True:
            a @ b
            calls += 1
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                break
        best = max(best, calls * 2.0 * n ** 3 / elapsed / 1e9)
    print(f"{best:.1f}")


if __name__ == "__main__":
    main()
