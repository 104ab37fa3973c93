#!/usr/bin/env bash
# One learner (relay) vs several (sync and allreduce with 2 and 4 learners, async with 2)
# on the same machine: frames/s and frames and seconds to the target, on Catch (0.9) and
# CartPole (475), each run stopping at its target; for allreduce also the bytes each
# learner sent per step and its seconds in the reduction. Prints a table; asserts nothing.
#
#   tools/bench_learners.sh [SEEDS]     # default 2 seeds per cell
set -euo pipefail
cd "$(dirname "$0")/.."
SEEDS=${1:-2}
BIN=build/tools/stampede
WORK=$(mktemp -d /tmp/stampede-bench-learners.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
printf '%-9s %-10s %2s %5s %12s %16s %12s %10s %14s %12s\n' env mode L seed frames/s frames_to_target s_to_target \
  lag_mean bytes/step/L reduce_s/L
for env in catch cartpole; do
  for cell in "relay 1" "sync 2" "async 2" "allreduce 2" "sync 4" "allreduce 4"; do
    read -r mode L <<<"$cell"
    for seed in $(seq 1 "$SEEDS"); do
      SETS=(--set seed=$seed --set stop.stop_at_target=true)
      if [[ $env == catch ]]; then
        CONFIG=configs/catch.textproto
        SETS+=(--set actors.num_actors=4 --set ps.num_shards=3 --set stop.total_env_frames=2000000)
      else
        CONFIG=configs/cartpole.textproto
        SETS+=(--set actors.num_actors=4 --set ps.num_shards=3)
      fi
      if [[ $mode != relay ]]; then
        SETS+=(--set learner.num_learners=$L --set learner.update_mode=$mode --set learner.max_gradient_staleness=16)
      fi
      D="$WORK/$env-$mode-$L-$seed"
      "$BIN" run "$CONFIG" --run-dir "$D" "${SETS[@]}" >/dev/null 2>&1 || true
      python3 - "$D" "$env" "$mode" "$L" "$seed" <<'PY'
import json, sys
d, env, mode, L, seed = sys.argv[1:]
try:
    s = json.load(open(d + "/summary.json"))
except Exception as e:
    print(f"{env:<9} {mode:<10} {L:>2} {seed:>5} run failed ({e})")
    sys.exit(0)
rows = [json.loads(l) for l in open(d + "/metrics.jsonl") if '"event"' not in l]
lag = sum(r["policy_lag_mean"] for r in rows) / max(1, len(rows))
ftt = s["frames_to_target"] if s["frames_to_target"] >= 0 else "not reached"
stt = f'{s["seconds_to_target"]:.1f}' if s["seconds_to_target"] >= 0 else "-"
bytes_per_step = reduce_s = "-"
learners = s.get("learners", {})
if mode == "allreduce" and learners:
    rounds = [l.get("allreduce_rounds", 0) for l in learners.values()]
    sent = [l.get("allreduce_bytes_sent", 0) for l in learners.values()]
    secs = [l.get("allreduce_seconds", 0) for l in learners.values()]
    if min(rounds) > 0:
        bytes_per_step = f"{sum(b / r for b, r in zip(sent, rounds)) / len(rounds):.0f}"
        reduce_s = f"{sum(secs) / len(secs):.1f}"
print(f'{env:<9} {mode:<10} {L:>2} {seed:>5} {s["frames_per_second"]:>12.0f} {str(ftt):>16} {stt:>12} {lag:>10.1f} '
      f'{bytes_per_step:>14} {reduce_s:>12}')
PY
    done
  done
done
