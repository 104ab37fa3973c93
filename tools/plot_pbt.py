"""Draws RUN_DIR/pbt.png for a population (`stampede report RUN_DIR`): the top panel is
each member's 100-episode mean return against its own env frames (from its
metrics.jsonl), with a marker where it exploited another member; one panel below per
evolved hyperparameter, each member's value over its frames (from pbt.jsonl)."""
import json
import os
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

run = sys.argv[1]
rows = []
with open(f"{run}/pbt.jsonl") as f:
    for line in f:
        try:
            rows.append(json.loads(line))
        except ValueError:
            pass
members = sorted({r["member"] for r in rows if "member" in r})
fields = []
for r in rows:
    for k in r.get("hyper", {}):
        if k not in fields:
            fields.append(k)
fig, axes = plt.subplots(1 + len(fields), 1, figsize=(9, 3 + 2.2 * len(fields)), sharex=True, squeeze=False)
axes = axes[:, 0]
colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
for m in members:
    c = colours[m % len(colours)]
    xs, ys = [], []
    try:
        with open(f"{run}/member-{m}/metrics.jsonl") as f:
            for line in f:
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if "event" not in row and row.get("returns_counted", 0) >= 20:
                    xs.append(row["env_frames"])
                    ys.append(row["mean_return_100"])
    except OSError:
        pass
    axes[0].plot(xs, ys, color=c, label=f"member {m}", linewidth=1)
    for r in rows:
        if r.get("member") == m and r.get("event") in ("exploit", "replace"):
            axes[0].axvline(r["frames"], color=c, alpha=0.25, linewidth=0.8)
    # Each value holds from a row's frames until the next row that changes it; an
    # exploit's new values hold from its copy (a member that finished while it stopped
    # never took them).
    for i, field in enumerate(fields):
        fx, fy = [], []
        pending = None
        for r in rows:
            if r.get("member") != m:
                continue
            ev = r.get("event")
            h = r.get("hyper", {})
            if field in h:
                fx.append(r["frames"]); fy.append(h[field])
            if ev == "exploit":
                pending = r.get("new_hyper")
            elif ev == "copied" and r.get("ok") and pending and field in pending:
                fx.append(r["frames"]); fy.append(pending[field])
            elif ev == "replace" and r.get("copied") and field in r.get("new_hyper", {}):
                fx.append(r["frames"]); fy.append(r["new_hyper"][field])
        axes[1 + i].step(fx, fy, where="post", color=c, linewidth=1)
        axes[1 + i].set_ylabel(field.split(".")[-1])
        if fy and min(fy) > 0 and max(fy) / min(fy) > 20:
            axes[1 + i].set_yscale("log")
axes[0].set_ylabel("return (100 episodes)")
axes[0].legend(fontsize=8)
axes[0].set_title(os.path.basename(os.path.normpath(run)) + ": vertical lines are exploits")
axes[-1].set_xlabel("the member's env frames")
fig.tight_layout()
fig.savefig(f"{run}/pbt.png", dpi=110)
