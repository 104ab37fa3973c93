#!/usr/bin/env bash
# Soak: a fleet at full load for MINUTES (Atari Pong by default), every process's RSS,
# threads and open files sampled each minute, each actor's policy version and lag
# tracked from metrics.jsonl. At the end tools/soak_report.py prints the curves and the
# verdict and exits non-zero on a failure:
#   - memory flat: after the warm-up (the first fifth of the run, at least 2 samples)
#     every process's RSS grows by at most max(2 MB, 2% of its size) per hour (the
#     least-squares slope), and its threads and open files do not grow;
#   - no actor's lag (its trajectories' lag on arrival at the learner) beyond
#     SOAK_MAX_LAG (default: actors.max_policy_lag of the config, 50), no fetcher reset,
#     no actor_params_stale or actor_lag_far_behind event;
#   - nothing dropped as stale (learner.max_policy_lag).
#
#   tools/soak.sh MINUTES [CONFIG] [--set k=v ...]
# Environment: SOAK_RUN_DIR (default /tmp/stampede-soak-<time>), SOAK_INTERVAL_S (60),
# SOAK_SIDE_MINUTES (0): for the first that many minutes (from minute 1), short Catch
# fleets of 300k frames run one after another beside the soaked fleet, as a user
# running a small sweep on the same host would (the load that froze an actor's
# parameters in Pong runs before the fetcher fix).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $# -lt 1 || ! "$1" =~ ^[0-9]+$ ]]; then
  echo "usage: tools/soak.sh MINUTES [CONFIG] [--set k=v ...]" >&2
  exit 2
fi
MINUTES=$1
shift
CONFIG=configs/atari_pong.textproto
if [[ $# -gt 0 && "$1" != --* ]]; then
  CONFIG=$1
  shift
fi
BIN=build/tools/stampede
[[ -x $BIN ]] || tools/build.sh
INTERVAL=${SOAK_INTERVAL_S:-60}
SIDE_MINUTES=${SOAK_SIDE_MINUTES:-0}
D=${SOAK_RUN_DIR:-/tmp/stampede-soak-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$(dirname "$D")"
SIDE_DIR=$(mktemp -d /tmp/stampede-soak-side.XXXXXX)

# The budget is never the end: the soak stops the run (SIGINT, a clean stop) at MINUTES.
"$BIN" run "$CONFIG" --run-dir "$D" --set stop.total_env_frames=1000000000000000 --set stop.stop_at_target=false \
  "$@" >"$SIDE_DIR/run.out" 2>&1 &
RUN=$!
SIDE=""
cleanup() {
  [[ -n $SIDE ]] && kill "$SIDE" 2>/dev/null || true
  kill -INT "$RUN" 2>/dev/null || true
  wait "$RUN" 2>/dev/null || true
}
trap cleanup EXIT
until [[ -s "$D/processes.txt" ]]; do
  kill -0 "$RUN" 2>/dev/null || { cat "$SIDE_DIR/run.out" >&2; echo "soak: the run ended before it started" >&2; exit 1; }
  sleep 0.5
done
echo "soak: $CONFIG for $MINUTES min in $D (sampling every $INTERVAL s; side fleets for $SIDE_MINUTES min)"

if [[ $SIDE_MINUTES -gt 0 ]]; then
  (
    sleep "$INTERVAL"
    end=$((SECONDS + SIDE_MINUTES * 60))
    n=0
    while [[ $SECONDS -lt $end ]]; do
      n=$((n + 1))
      "$BIN" run configs/catch.textproto --run-dir "$SIDE_DIR/catch-$n" --set stop.total_env_frames=300000 \
        --set stop.stop_at_target=false >/dev/null 2>&1 || true
      rm -rf "$SIDE_DIR/catch-$n"
      echo "$n" >"$SIDE_DIR/side_fleets"
    done
  ) &
  SIDE=$!
fi

sample() {  # elapsed_s: one row per process to soak.csv
  local t=$1 role index pid
  {
    echo "coordinator 0 $RUN"
    cat "$D/processes.txt"
  } | while read -r role index pid; do
    [[ -r /proc/$pid/status ]] || continue
    local rss threads fds
    rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status")
    threads=$(awk '/^Threads:/ {print $2}' "/proc/$pid/status")
    fds=$(ls "/proc/$pid/fd" 2>/dev/null | wc -l)
    echo "$t,$role,$index,$pid,$rss,$threads,$fds" >>"$D/soak.csv"
  done
}
echo "elapsed_s,role,index,pid,rss_kb,threads,fds" >"$D/soak.csv"
start=$SECONDS
sample 0
for ((k = 1; k * INTERVAL <= MINUTES * 60; k++)); do
  while [[ $((SECONDS - start)) -lt $((k * INTERVAL)) ]]; do
    kill -0 "$RUN" 2>/dev/null || break 2
    sleep 1
  done
  sample $((SECONDS - start))
  tail -n 1 "$SIDE_DIR/run.out" | sed 's/^/soak: /'
done
if [[ -n $SIDE ]]; then
  kill "$SIDE" 2>/dev/null || true
  wait "$SIDE" 2>/dev/null || true
  SIDE=""
  echo "soak: $(cat "$SIDE_DIR/side_fleets" 2>/dev/null || echo 0) side fleets ran beside it"
fi
alive=1
kill -0 "$RUN" 2>/dev/null || alive=0
kill -INT "$RUN" 2>/dev/null || true
code=0
wait "$RUN" || code=$?
trap - EXIT
cp "$SIDE_DIR/run.out" "$D/soak-run.out"
rm -rf "$SIDE_DIR"
if [[ $alive -eq 0 ]]; then
  echo "soak: FAIL: the run ended on its own before $MINUTES min (exit $code); see $D/soak-run.out" >&2
  exit 1
fi
exec python3 tools/soak_report.py "$D" "$CONFIG" "$code" "${SOAK_MAX_LAG:-}"
