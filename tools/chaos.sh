#!/usr/bin/env bash
# Random kills: kill -9 of a random actor, learner or PS shard (chief and every shard
# included) every 2-3 s while a Catch fleet runs, in relay (1 learner, 2 shards), sync
# and async (2 learners, 3 shards) mode. Kills stop once the run starts stopping (its
# budget is spent). Every run must end with exit 0, its budget reached, and a complete
# newest checkpoint (`stampede checkpoints RUN_DIR`).
#
#   tools/chaos.sh [SECONDS_OF_KILLS] [RUNS_PER_MODE] [MODES...]   (default: 40 1 relay sync async)
#
# Prints one line per run and a summary; exits 1 if any run broke the rule.
set -u
cd "$(dirname "$0")/.."
BIN=${STAMPEDE_BIN:-build/tools/stampede}
KILL_S=${1:-40}
RUNS=${2:-1}
shift 2 2>/dev/null || shift $#
MODES=("$@")
[[ ${#MODES[@]} -eq 0 ]] && MODES=(relay sync async)
[[ -x "$BIN" ]] || { echo "chaos: $BIN not built (run tools/build.sh)" >&2; exit 2; }
WORK=$(mktemp -d /tmp/stampede-chaos.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
json() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1" 2>/dev/null; }

# Enough frames that the budget comes after the kill window (Catch fleets run at 60-110k
# frames/s here, less while processes restart).
FRAMES=${CHAOS_FRAMES:-$((KILL_S * 130000 + 1000000))}
COMMON=(--set stop.stop_at_target=false --set stop.target_return=0 --set "stop.total_env_frames=$FRAMES"
        --set coordinator.max_restarts=1000 --set coordinator.max_actor_restarts=1000
        --set learner.checkpoint_interval_s=1)
failed=0
total=0
for mode in "${MODES[@]}"; do
  case "$mode" in
    relay) args=(configs/catch.textproto --set ps.num_shards=2) ;;
    sync) args=(configs/catch_2learners.textproto) ;;
    async) args=(configs/catch_2learners.textproto --set learner.update_mode=async) ;;
    *) echo "chaos: unknown mode $mode (relay, sync, async)" >&2; exit 2 ;;
  esac
  for run in $(seq 1 "$RUNS"); do
    D="$WORK/$mode-$run"
    "$BIN" run "${args[@]}" "${COMMON[@]}" --set "seed=$run" --run-dir "$D" > "$D.out" 2>&1 &
    pid=$!
    start=$SECONDS
    kills=0
    killed=""
    while kill -0 "$pid" 2>/dev/null && (( SECONDS - start < KILL_S )); do
      sleep "$(python3 -c 'import random; print(2 + random.random())')"
      grep -q "stampede: stopping" "$D.out" && break
      line=$(shuf -n 1 "$D/processes.txt" 2>/dev/null) || continue
      [[ -z "$line" ]] && continue
      read -r role index victim <<< "$line"
      if kill -9 "$victim" 2>/dev/null; then
        kills=$((kills + 1))
        killed+=" $role$index"
      fi
    done
    wait "$pid"
    rc=$?
    S="$D/summary.json"
    frames=$(json "$S" "d['env_frames']")
    code=$(json "$S" "d['exit_code']")
    ckpt=$("$BIN" checkpoints "$D" 2>&1)
    ckpt_rc=$?
    verdict=PASS
    if [[ $rc != 0 || "$code" != 0 || -z "$frames" || "$frames" -lt "$FRAMES" || $ckpt_rc != 0 ]]; then
      verdict=FAIL
      failed=$((failed + 1))
    fi
    total=$((total + 1))
    abandoned=$(cat "$D"/logs/learner-*.log 2>/dev/null | grep -c "abandoned")
    echo "chaos: $verdict $mode run $run: $kills kills ($killed ), exit $rc, summary exit_code $code, frames $frames of $FRAMES, restarts $(json "$S" "d['restarts']") + actors $(json "$S" "d['actor_restarts']"), checkpoint rounds abandoned $abandoned, failed $(json "$S" "d.get('checkpoint_failures', 0)"), newest checkpoint: $(echo "$ckpt" | tail -1 | sed "s|$WORK/||")"
    if [[ $verdict == FAIL ]]; then
      # Everything needed to tell why, since the run directory goes with WORK.
      echo "chaos: the run's stop reason: $(json "$S" "d.get('stop_reason', '')")"
      echo "chaos: the run's stderr ends:" && grep -v "^\[\|\] gemm: " "$D.out" | tail -15 | sed 's/^/    /'
      for log in "$D"/logs/*.log; do
        [[ -f $log ]] || continue
        echo "chaos: ${log#"$D"/} ends:" && grep -v "\] gemm: " "$log" | tail -5 | sed 's/^/    /'
      done
      echo "chaos: $(echo "$ckpt" | tail -3 | sed "s|$WORK/||" | paste -sd';' -)"
    fi
  done
done
echo "chaos: $total runs, $failed failed"
[[ $failed == 0 ]]
