#!/usr/bin/env python3
"""The verdict of a soak (tools/soak.sh): memory, threads and open files per process,
each actor's policy lag, stale drops. Prints the curves and the figures; exits 1 on a
failure. Standard library only.

  python3 tools/soak_report.py RUN_DIR CONFIG RUN_EXIT_CODE [MAX_LAG]
"""
import csv
import json
import re
import sys
from collections import defaultdict


def slope_per_hour(points):
    """Least-squares slope of (seconds, value) points, per hour."""
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(t for t, _ in points) / n
    my = sum(v for _, v in points) / n
    sxx = sum((t - mx) ** 2 for t, _ in points)
    if sxx == 0:
        return 0.0
    return sum((t - mx) * (v - my) for t, v in points) / sxx * 3600.0


def actors_bound(run_dir):
    """actors.max_policy_lag from the run's resolved config (50 when not set there)."""
    try:
        text = open(run_dir + "/config.textproto").read()
    except OSError:
        return 50
    m = re.search(r"actors\s*\{[^}]*max_policy_lag:\s*(\d+)", text)
    return int(m.group(1)) if m else 50


def main():
    run_dir, config, run_code = sys.argv[1], sys.argv[2], int(sys.argv[3])
    max_lag = int(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[4] else actors_bound(run_dir)
    failures = []

    samples = defaultdict(list)  # "role index" -> [(t, rss_kb, threads, fds)]
    with open(run_dir + "/soak.csv") as f:
        for row in csv.DictReader(f):
            key = f"{row['role']} {row['index']}"
            samples[key].append((int(row["elapsed_s"]), int(row["rss_kb"]), int(row["threads"]), int(row["fds"])))
    if not samples:
        failures.append("no samples")
    end = max((s[-1][0] for s in samples.values()), default=0)
    warmup = end / 5

    print(f"soak of {config}: {end / 60:.1f} min, run dir {run_dir}")
    print("\nRSS (MB) per sample, per process:")
    times = sorted({t for s in samples.values() for t, *_ in s})
    header = "  min  " + " ".join(f"{k:>12}" for k in sorted(samples))
    print(header)
    for t in times:
        cells = []
        for k in sorted(samples):
            v = [rss for tt, rss, _, _ in samples[k] if tt == t]
            cells.append(f"{v[0] / 1024:>12.1f}" if v else f"{'':>12}")
        print(f"{t / 60:>5.1f}  " + " ".join(cells))

    print("\nafter the warm-up (t >= %.0f s):" % warmup)
    print(f"  {'process':<14} {'RSS MB':>8} {'slope MB/h':>11} {'limit':>7} {'threads':>9} {'fds':>9}")
    for k in sorted(samples):
        pts = [(t, rss / 1024) for t, rss, _, _ in samples[k] if t >= warmup]
        if len(pts) < 2:
            pts = [(t, rss / 1024) for t, rss, _, _ in samples[k]][-2:]
        later = [s for s in samples[k] if s[0] >= warmup] or samples[k]
        mean = sum(v for _, v in pts) / len(pts)
        slope = slope_per_hour(pts)
        limit = max(2.0, 0.02 * mean)
        th = (later[0][2], later[-1][2])
        fd = (later[0][3], later[-1][3])
        print(f"  {k:<14} {mean:>8.1f} {slope:>+11.2f} {limit:>7.1f} {th[0]:>4}->{th[1]:<4} {fd[0]:>4}->{fd[1]:<4}")
        if slope > limit:
            failures.append(f"{k}: RSS grows {slope:.2f} MB/h (limit {limit:.1f})")
        if th[1] > th[0]:
            failures.append(f"{k}: threads grew {th[0]} -> {th[1]}")
        if fd[1] > fd[0] + 2:
            failures.append(f"{k}: open files grew {fd[0]} -> {fd[1]}")

    rows, events = [], []
    with open(run_dir + "/metrics.jsonl") as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                (events if "event" in r else rows).append(r)
    worst = defaultdict(int)
    resets = defaultdict(int)
    per_minute = defaultdict(dict)  # minute -> actor -> largest lag
    for r in rows:
        for a, v in r.get("actors", {}).items():
            lag = max(v.get("lag", -1), v.get("lag_max", 0))
            worst[a] = max(worst[a], lag)
            resets[a] = max(resets[a], v.get("fetcher_resets", 0))
            m = int(r["elapsed_s"] // 60)
            per_minute[m][a] = max(per_minute[m].get(a, 0), lag)
    actors = sorted(worst, key=int)
    print("\nper actor, the largest lag of its trajectories on arrival, per minute:")
    print("  min " + " ".join(f"{'actor ' + a:>9}" for a in actors))
    for m in sorted(per_minute):
        print(f"{m:>5} " + " ".join(f"{per_minute[m].get(a, ''):>9}" for a in actors))
    for a in actors:
        print(f"  actor {a}: largest lag {worst[a]} (bound {max_lag}), fetcher resets {resets[a]}")
        if worst[a] > max_lag:
            failures.append(f"actor {a}: lag {worst[a]} beyond the bound {max_lag}")
        if resets[a] > 0:
            failures.append(f"actor {a}: its fetcher was reset {resets[a]} times")
    if not actors:
        failures.append("no per-actor figures in metrics.jsonl")
    for e in events:
        if e["event"] in ("actor_params_stale", "actor_lag_far_behind"):
            failures.append(f"event {e['event']} at {e['elapsed_s']:.0f} s: {e.get('message', '')}")
    last = rows[-1] if rows else {}
    stale = last.get("dropped_by_reason", {}).get("stale", 0)
    print(f"\nlearner: {last.get('env_frames', 0):,} frames, {last.get('learner_step', 0):,} steps, "
          f"return(100) {last.get('mean_return_100', 0):.2f}, dropped as stale {stale}, "
          f"dropped in all {last.get('dropped_trajectories', 0)}")
    if stale:
        failures.append(f"{stale} trajectories dropped as stale")
    if run_code not in (0, 130):
        failures.append(f"the run exited with {run_code} when stopped")
    if failures:
        print("\nsoak: FAIL")
        for f in failures:
            print("  - " + f)
        return 1
    print("\nsoak: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
