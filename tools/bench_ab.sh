#!/usr/bin/env bash
# Two stampede binaries (or one binary with two sets of overrides) on the same fleet, in
# pairs run back to back (this machine's speed drifts by tens of percent within an hour, so
# only a pair's ratio means something): a portable build against a -march=native one, a
# commit against the one before it.
#   tools/bench_ab.sh --a build/tools/stampede --b build-native/tools/stampede
#   tools/bench_ab.sh --a-set net.gemm_backend=eigen            # same binary, A with an override
# Each run: `stampede run CONFIG` (configs/atari_pong.textproto by default) for SECONDS, its
# frames/s from its progress lines' frame counters after the first WARMUP seconds
# (tools/fleet_rate.py), with the median of its rate readings beside it. --set applies to
# both; --a-set and --b-set to one. Prints each pair and the median ratio B / A.
#
# usage: tools/bench_ab.sh [--a BIN] [--b BIN] [--config C] [--pairs N] [--seconds S]
#                          [--warmup W] [--set p=v ...] [--a-set p=v ...] [--b-set p=v ...]
set -euo pipefail
cd "$(dirname "$0")/.."
a=build/tools/stampede b=build/tools/stampede config=configs/atari_pong.textproto
pairs=3 seconds=100 warmup=30
sets=() a_sets=() b_sets=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --a) a=$2; shift 2 ;;
    --b) b=$2; shift 2 ;;
    --config) config=$2; shift 2 ;;
    --pairs) pairs=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --set) sets+=(--set "$2"); shift 2 ;;
    --a-set) a_sets+=(--set "$2"); shift 2 ;;
    --b-set) b_sets+=(--set "$2"); shift 2 ;;
    *) echo "bench_ab: unknown argument $1" >&2; exit 2 ;;
  esac
done
for bin in "$a" "$b"; do
  [[ -x $bin ]] || { echo "bench_ab: $bin is missing or not executable" >&2; exit 2; }
done
[[ -f $config ]] || { echo "bench_ab: no config $config" >&2; exit 2; }
out=runs/bench-ab
mkdir -p "$out"
echo "bench_ab: $pairs pairs of $seconds s runs of $config (frames/s after the first $warmup s), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
echo "  A: $a ${a_sets[*]:-}"
echo "  B: $b ${b_sets[*]:-}"

# One run of binary $1 with overrides from the rest; prints "RATE MEDIAN".
one() {
  local bin=$1 name=$2
  shift 2
  rm -rf "$out/$name"
  timeout -s INT "$seconds" "$bin" run "$config" --run-dir "$out/$name" --set stop.total_env_frames=1000000000 \
    --set stop.stop_at_target=false "${sets[@]}" "$@" > "$out/$name.log" 2>&1 || true
  sleep 5  # its processes gone
  python3 tools/fleet_rate.py stampede "$out/$name.log" "$warmup"
}

ratios=()
for ((p = 1; p <= pairs; p++)); do
  read -r ra ma < <(one "$a" "a-$p" "${a_sets[@]}")
  read -r rb mb < <(one "$b" "b-$p" "${b_sets[@]}")
  ratio=$(awk -v x="$rb" -v y="$ra" 'BEGIN {print (y > 0 ? x / y : "nan")}')
  ratios+=("$ratio")
  printf "  pair %d: A %6.0f frames/s (median reading %s)   B %6.0f frames/s (median reading %s)   B/A %.3f\n" \
    "$p" "$ra" "$ma" "$rb" "$mb" "$ratio"
done
printf "bench_ab: median B/A %.3f over %d pairs (logs in %s)\n" \
  "$(python3 tools/fleet_rate.py median "${ratios[@]}")" "$pairs" "$out"
