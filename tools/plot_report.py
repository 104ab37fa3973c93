"""Learning curves of a Stampede run: RUN_DIR/report.png from RUN_DIR/metrics.jsonl.

One panel per task (its 100-episode mean return against its own env frames) and, for a
suite with random/reference scores, a last panel with the mean and median normalised
score against the run's frames. Called by `stampede report` and `stampede suite`.
"""
import json
import math
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(run_dir):
    curves, aggregate = {}, []
    with open(f"{run_dir}/metrics.jsonl") as f:
        for line in f:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn last line of an interrupted run
            if "event" in row or "env_frames" not in row:
                continue
            for name, t in (row.get("tasks") or {}).items():
                if t.get("returns_counted", 0) > 0:
                    curves.setdefault(name, []).append((t["env_frames"], t["mean_return_100"]))
                else:
                    curves.setdefault(name, [])
            if "mean_normalised_score" in row:
                aggregate.append((row["env_frames"], row["mean_normalised_score"], row["median_normalised_score"]))
    # The config's task order (report.csv lists it), not the JSON's sorted keys.
    try:
        with open(f"{run_dir}/report.csv") as f:
            order = [line.split(",")[0] for line in f.readlines()[1:] if not line.startswith("(")]
        curves = {name: curves[name] for name in order if name in curves} | curves
    except OSError:
        pass
    panels = len(curves) + (1 if aggregate else 0)
    if panels == 0:
        sys.exit(f"{run_dir}/metrics.jsonl has no per-task rows")
    cols = min(3, panels)
    rows = math.ceil(panels / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.5 * cols, 3.2 * rows), squeeze=False)
    flat = [ax for r in axes for ax in r]
    for ax, (name, pts) in zip(flat, curves.items()):
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], color="tab:blue")
        ax.set_title(name)
        ax.set_xlabel("task env frames")
        ax.set_ylabel("return (100 episodes)")
        ax.grid(alpha=0.3)
    if aggregate:
        ax = flat[len(curves)]
        ax.plot([a[0] for a in aggregate], [a[1] for a in aggregate], label="mean", color="tab:red")
        ax.plot([a[0] for a in aggregate], [a[2] for a in aggregate], label="median", color="tab:green")
        ax.set_title("normalised score")
        ax.set_xlabel("env frames (all tasks)")
        ax.legend()
        ax.grid(alpha=0.3)
    for ax in flat[panels:]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(f"{run_dir}/report.png", dpi=100)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: plot_report.py RUN_DIR")
    main(sys.argv[1])
