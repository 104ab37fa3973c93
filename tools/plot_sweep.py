"""Draws SWEEP_DIR/sweep.png: every run's 100-episode mean return against env frames,
one colour per grid point (`stampede sweep` calls it)."""
import csv
import json
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

sweep = sys.argv[1]
with open(f"{sweep}/sweep.csv") as f:
    rows = list(csv.DictReader(f))
fields = [k for k in rows[0].keys() if k not in (
    "point", "seed", "final_return_100", "best_return_100", "frames_to_target", "env_frames",
    "frames_per_s", "exit_code", "run_dir")] if rows else []
fig, ax = plt.subplots(figsize=(8, 5))
colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
labelled = set()
for r in rows:
    xs, ys = [], []
    try:
        with open(f"{r['run_dir']}/metrics.jsonl") as m:
            for line in m:
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if row.get("returns_counted", 0) >= 100:
                    xs.append(row["env_frames"])
                    ys.append(row["mean_return_100"])
    except OSError:
        continue
    p = int(r["point"])
    label = ", ".join(f"{k}={r[k]}" for k in fields) or "config"
    ax.plot(xs, ys, color=colours[p % len(colours)], alpha=0.8,
            label=None if p in labelled else label)
    labelled.add(p)
ax.set_xlabel("env frames")
ax.set_ylabel("mean return (100 episodes)")
ax.set_title(f"sweep {sweep}")
ax.legend(fontsize=7)
fig.tight_layout()
fig.savefig(f"{sweep}/sweep.png", dpi=100)
