#!/usr/bin/env python3
"""A fleet run's frames/s from its log's frame counters, after a warm-up.

usage: fleet_rate.py sf|stampede LOG WARMUP_SECONDS
       fleet_rate.py median VALUE...   (the pair benches' median ratio)
Prints "RATE MEDIAN": (last - first frames) / elapsed over the readings at or after
WARMUP seconds from the first, and the median of the run's own rate readings in that
window; "nan nan" when there are fewer than two such readings.
  Sample Factory: "[2026-12-03 12:01:36,023][06004] Fps is (10 sec: 2048.0, ...). Total num
  frames: 151552." (its 10-second rates come in steps of 409.6, so the counters say more);
  Stampede: "[   40.2s] frames 277.8k (8.3k/s) | ...".
"""
import datetime
import re
import statistics
import sys


def readings(kind, path):
    rows = []  # (seconds, frames, rate reading)
    unit = {"k": 1e3, "M": 1e6, "": 1}
    for line in open(path, errors="replace"):
        if kind == "sf":
            m = re.search(r"\[(\d+-\d+-\d+ \d+:\d+:\d+),(\d+)\].*Fps is \(10 sec: ([0-9.]+|nan).*Total num frames: (\d+)", line)
            if m:
                t = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").timestamp() + int(m.group(2)) / 1000
                rows.append((t, int(m.group(4)), float(m.group(3))))
        else:
            m = re.match(r"\[\s*([0-9.]+)s\] frames ([0-9.]+)([kM]?) \(([0-9.]+)([kM]?)/s\)", line)
            if m:
                rows.append((float(m.group(1)), float(m.group(2)) * unit[m.group(3)], float(m.group(4)) * unit[m.group(5)]))
    return rows


def main():
    if sys.argv[1:2] == ["median"]:
        print(statistics.median(float(v) for v in sys.argv[2:]))
        return
    kind, path, warmup = sys.argv[1], sys.argv[2], float(sys.argv[3])
    if kind not in ("sf", "stampede"):
        sys.exit(f"fleet_rate: kind must be sf or stampede, not {kind!r}")
    rows = readings(kind, path)
    w = [r for r in rows if rows and r[0] - rows[0][0] >= warmup and r[2] == r[2]]
    if len(w) < 2:
        print("nan nan")
        return
    print(f"{(w[-1][1] - w[0][1]) / (w[-1][0] - w[0][0]):.0f} {statistics.median(r[2] for r in w):.0f}")


if __name__ == "__main__":
    main()
