#!/usr/bin/env bash
# What an actor costs: the same fleet with 1, 2, 4, ... actors (envs per actor fixed, one
# learner, the config's PS shards), each point a normal `stampede run` to a frame
# budget. Per point: frames/s, frames/s per actor, the learner's mean queue depth, the
# mean policy lag on arrival, and the learner's share of its time spent training (near
# 1: the learner is the bottleneck). Writes DIR/scaling.md and DIR/scaling.csv, and
# DIR/scaling.png where the venv has matplotlib.
#
#   tools/bench_scaling.sh [DIR] [ACTOR_COUNTS]     (default runs/scaling-TIME, "1 2 4 8 16 32 64")
#   SCALING_CONFIGS="configs/cartpole.textproto configs/catch_pixels.textproto"
#   SCALING_FRAMES_cartpole=2000000 SCALING_FRAMES_catch_pixels=400000
set -u
cd "$(dirname "$0")/.."
BIN=${STAMPEDE_BIN:-build/tools/stampede}
DIR=${1:-runs/scaling-$(date +%Y%m%d-%H%M%S)}
COUNTS=${2:-1 2 4 8 16 32 64}
CONFIGS=${SCALING_CONFIGS:-configs/cartpole.textproto configs/catch_pixels.textproto}
mkdir -p "$DIR"
CSV=$DIR/scaling.csv
echo "config,actors,envs_per_actor,frames,frames_per_s,frames_per_s_per_actor,queue_depth_mean,queue_capacity,lag_mean,lag_max,train_share,exit_code" > "$CSV"
for cfg in $CONFIGS; do
  name=$(basename "$cfg" .textproto)
  var="SCALING_FRAMES_$name"
  default=2000000
  [[ "$name" == *pixels* ]] && default=400000
  frames=${!var:-$default}
  for n in $COUNTS; do
    run=$DIR/$name-a$n
    rm -rf "$run"
    "$BIN" run "$cfg" --run-dir "$run" --set actors.num_actors="$n" --set stop.total_env_frames="$frames" \
      --set stop.stop_at_target=false --set coordinator.max_actor_restarts=0 > "$run.out" 2>&1
    rc=$?
    python3 - "$run" "$cfg" "$n" "$rc" >> "$CSV" << 'PY'
import json, re, sys
run, cfg, n, rc = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
try:
    s = json.load(open(run + "/summary.json"))
except Exception:
    print(f"{cfg},{n},,,,,,,,,,{rc}")
    sys.exit(0)
rows = []
for line in open(run + "/metrics.jsonl"):
    try: r = json.loads(line)
    except ValueError: continue
    if "event" not in r and r.get("env_frames", 0) > 0 and "queue_depth" in r: rows.append(r)
# The middle of the run: neither the start (processes joining) nor the stop.
mid = rows[len(rows) // 4: max(len(rows) // 4 + 1, 3 * len(rows) // 4)] or rows
q = sum(r["queue_depth"] for r in mid) / max(1, len(mid))
lag = sum(r.get("policy_lag_mean", 0) for r in mid) / max(1, len(mid))
lag_max = max([r.get("policy_lag_max", 0) for r in mid] or [0])
train = rows[-1].get("train_seconds", 0) / max(1e-9, rows[-1].get("elapsed_s", 1)) if rows else 0
text = open(run + "/config.textproto").read()
def field(name, default):
    m = re.search(r"\b" + name + r":\s*(\d+)", text)
    return int(m.group(1)) if m else default
proto = open("config/config.proto").read()
cap_default = re.search(r"queue_capacity = \d+ \[default = (\d+)\]", proto)
envs, cap = field("num_envs", 0), field("queue_capacity", int(cap_default.group(1)) if cap_default else 0)
fps = s["frames_per_second"]
print(f"{cfg},{n},{envs},{s['env_frames']},{fps:.0f},{fps / n:.0f},{q:.1f},{cap},{lag:.1f},{lag_max},{train:.2f},{rc}")
PY
    tail -1 "$CSV" | awk -F, '{printf "  %-32s actors %3s: %9s frames/s (%8s per actor), queue %5s/%s, lag %6s (max %s), learner training %s of its time, exit %s\n", $1, $2, $5, $6, $7, $8, $9, $10, $11, $12}'
  done
done
python3 - "$DIR" << 'PY'
import csv, sys
d = sys.argv[1]
rows = list(csv.DictReader(open(d + "/scaling.csv")))
out = ["| config | actors | frames/s | per actor | queue (mean/capacity) | lag mean | lag max | learner training share |",
       "|---|---:|---:|---:|---:|---:|---:|---:|"]
notes = []
for cfg in dict.fromkeys(r["config"] for r in rows):
    pts = [r for r in rows if r["config"] == cfg and r["frames_per_s"]]
    best = 0
    sat = None
    for r in pts:
        fps = float(r["frames_per_s"])
        if sat is None and best > 0 and fps < 1.1 * best:
            sat = r["actors"]
        best = max(best, fps)
        out.append(f"| {cfg} | {r['actors']} | {fps:.0f} | {float(r['frames_per_s_per_actor']):.0f} | "
                   f"{r['queue_depth_mean']}/{r['queue_capacity']} | {r['lag_mean']} | {r['lag_max']} | {r['train_share']} |")
    if sat:
        notes.append(f"{cfg}: frames/s stop rising (less than +10% from the best so far) at {sat} actors; peak {best:.0f} frames/s.")
open(d + "/scaling.md", "w").write("\n".join(out + [""] + notes) + "\n")
print("\n".join(out + [""] + notes))
PY
VENV=${STAMPEDE_VENV:-.venv}
if [[ -x "$VENV/bin/python" ]] && "$VENV/bin/python" -c "import matplotlib" 2> /dev/null; then
  "$VENV/bin/python" - "$DIR" << 'PY'
import csv, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
d = sys.argv[1]
rows = list(csv.DictReader(open(d + "/scaling.csv")))
fig, axes = plt.subplots(1, 2, figsize=(11, 4))
for cfg in dict.fromkeys(r["config"] for r in rows):
    pts = [r for r in rows if r["config"] == cfg and r["frames_per_s"]]
    x = [int(r["actors"]) for r in pts]
    axes[0].plot(x, [float(r["frames_per_s"]) for r in pts], marker="o", label=cfg)
    axes[1].plot(x, [float(r["lag_mean"]) for r in pts], marker="o", label=cfg)
for ax, what in zip(axes, ["frames/s", "mean policy lag (versions)"]):
    ax.set_xscale("log", base=2)
    ax.set_xlabel("actors")
    ax.set_ylabel(what)
    ax.grid(True, alpha=0.3)
    ax.legend()
fig.suptitle("Stampede: frames/s and policy lag against the number of actors")
fig.tight_layout()
fig.savefig(d + "/scaling.png", dpi=100)
print("wrote " + d + "/scaling.png")
PY
fi
