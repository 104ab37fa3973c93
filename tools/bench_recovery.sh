#!/usr/bin/env bash
# Recovery of a PS shard (issue 9): a sync two-learner Catch run; every few seconds one
# shard is killed with SIGKILL; prints the seconds from the kill to the restart (the
# coordinator's backoff, coordinator.restart_backoff_s, doubling per restart of the same
# shard) and to the first new version the restarted shard serves (restored from the
# newest complete checkpoint, then one sync step). Asserts nothing.
#
#   tools/bench_recovery.sh [KILLS]     # default 3 (shards 0, 1, 2 in turn)
set -euo pipefail
cd "$(dirname "$0")/.."
KILLS=${1:-3}
BIN=build/tools/stampede
WORK=$(mktemp -d /tmp/stampede-bench-recovery.XXXXXX)
D="$WORK/run"
trap 'kill -INT $RUN 2>/dev/null; wait $RUN 2>/dev/null; rm -rf "$WORK"' EXIT
"$BIN" run configs/catch_2learners.textproto --run-dir "$D" --set stop.stop_at_target=false \
  --set stop.total_env_frames=1000000000 --set learner.checkpoint_interval_s=1 >"$WORK/out" 2>&1 &
RUN=$!
until grep -q '"learner_step": *[1-9][0-9][0-9]' "$D/metrics.jsonl" 2>/dev/null; do sleep 0.2; done
sleep 2
printf "%-6s %12s %16s\n" shard restart_s first_version_s
for k in $(seq 0 $((KILLS - 1))); do
  shard=$((k % 3))
  pid=$(awk -v s=$shard '$1=="ps" && $2==s {print $3}' "$D/processes.txt")
  log="$D/logs/ps-$shard.log"
  before=$(grep -c "the first new one since the restore" "$log" || true)
  t0=$(date +%s.%N)
  kill -9 "$pid"
  until [[ $(grep -c "the first new one since the restore" "$log" || true) -gt $before ]]; do sleep 0.01; done
  python3 - "$D" "$shard" "$t0" <<'PY'
import json, re, sys, os
d, shard, t0 = sys.argv[1], sys.argv[2], float(sys.argv[3])
rows = [json.loads(l) for l in open(d + "/metrics.jsonl")]
restart = [r["wall_time"] for r in rows if r.get("event") == "restart" and r.get("process") == f"ps {shard}"][-1]
log = open(f"{d}/logs/ps-{shard}.log").read()
first = float(re.findall(r"the first new one since the restore, at unix time ([0-9.]+)", log)[-1])
print(f"{shard:<6} {restart - t0:>12.2f} {first - t0:>16.2f}")
PY
  sleep 3
done
