#!/usr/bin/env bash
# Pong fleet frames/s against Sample Factory 2.1.1 on the same cores, in pairs run back
# to back (this machine's speed drifts by tens of percent within an hour, so only a
# pair's ratio means something):
#   Sample Factory: APPO, async, 2 workers x 8 envs, double-buffered sampling
#     (worker_num_splits 2), its IMPALA shallow CNN + FC 256 (convnet_impala), no RNN,
#     batch 256, rollout 32, on the CPU, PyPI's PyTorch.
#   Stampede: `stampede run configs/atari_pong.textproto` with replay off and batch 16
#     (each frame trained on once, as Sample Factory's single epoch; the shipped config
#     replays half of every batch, which halves its learner-bound frames/s), plus any
#     --set given (later ones win). --shipped runs the config as it ships instead (replay
#     on), the parts' limit then counting replay's share of each batch.
# Each run lasts SECONDS; its figure is its frames/s after the first WARMUP seconds, from
# its own frame counters (Sample Factory's "Total num frames", Stampede's progress lines),
# with the median of its rate readings beside it. Both count ALE frames (frame skip 4).
# Right before and right after each Stampede run, `stampede bench` measures its parts (actor,
# learner) with the same overrides and prints the fleet they allow on these cores (the
# parts' limit), twice: with every core busy (`--copies $(nproc)`: as many bench processes,
# timed together, as the fleet has cores to share) and alone on an idle machine. The pair's
# lines give the mean of the before and after readings and the fleet's share of each, so the
# machine's drift between runs does not enter the share.
#
# usage: tools/bench_sample_factory.sh [--pairs N] [--seconds S] [--warmup W] [--shipped] [--set path=value ...]
# Sample Factory lives in its own venv (SF_VENV, default runs/sf-venv), made on first
# use from PyPI with the ROMs of the project venv's ale-py.
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=3 seconds=150 warmup=30
sets=() recipe=(--set learner.replay.fraction=0 --set learner.batch_size=16)
while [[ $# -gt 0 ]]; do
  case "$1" in
    --pairs) pairs=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --set) sets+=(--set "$2"); shift 2 ;;
    --shipped) recipe=(); shift ;;
    *) echo "bench_sample_factory: unknown argument $1" >&2; exit 2 ;;
  esac
done
sf_venv=${SF_VENV:-runs/sf-venv}
stampede=${STAMPEDE:-build/tools/stampede}
[[ -x $stampede ]] || { echo "bench_sample_factory: $stampede is missing: tools/build.sh first" >&2; exit 2; }
if [[ ! -x $sf_venv/bin/python ]] || ! "$sf_venv/bin/python" -c "import sample_factory" 2> /dev/null; then
  echo "bench_sample_factory: making $sf_venv (sample-factory 2.1.1, gymnasium 0.29.1, ale-py 0.8.1, PyPI torch)"
  python3 -m venv "$sf_venv"
  "$sf_venv/bin/pip" install -q --disable-pip-version-check "sample-factory==2.1.1" "gymnasium[atari]==0.29.1" \
    "ale-py==0.8.1" "numpy<2" torch
  roms=$(ls -d .venv/lib/python3*/site-packages/ale_py/roms 2> /dev/null | head -1)
  [[ -n $roms ]] || { echo "bench_sample_factory: no ROMs in the project venv (.venv): tools/setup.sh first" >&2; exit 2; }
  "$sf_venv/bin/ale-import-roms" "$roms" > /dev/null
fi
out=runs/bench-sample-factory
mkdir -p "$out"
sf_version=$("$sf_venv/bin/python" -c "import importlib.metadata as m; print(m.version('sample-factory'), 'with torch', m.version('torch'))" 2> /dev/null || echo "?")
echo "bench_sample_factory: $pairs pairs of $seconds s runs (frames/s after the first $warmup s), Sample Factory $sf_version, $(nproc) cores"
echo "  Stampede: configs/atari_pong.textproto ${recipe[*]:-as it ships (replay on)} ${sets[*]:-}"

# A run's frames/s after the warm-up and the median of its rate readings (tools/fleet_rate.py).
rate() { python3 tools/fleet_rate.py "$1" "$2" "$warmup"; }

# The parts' limit (`stampede bench`'s RESULT line) measured by COPIES processes at once,
# its output appended to LOG.
limit() {
  "$stampede" bench --config configs/atari_pong.textproto --seconds 5 --fleet-frames 0 --copies "$2" \
    "${recipe[@]}" "${sets[@]}" 2>&1 | tee -a "$1" |
    sed -n 's/^RESULT parts_limit_frames_per_s=\([0-9.]*\).*/\1/p'
}
mean2() { awk -v a="${1:-0}" -v b="${2:-0}" 'BEGIN {print (a > 0 && b > 0 ? (a + b) / 2 : "nan")}'; }
share() { awk -v a="$1" -v b="$2" 'BEGIN {print (b > 0 ? a / b : "nan")}'; }
pct() { python3 tools/fleet_rate.py median "$@" | awk '{print 100 * $1}'; }

ratios=() shares=() alone_shares=()
for ((p = 1; p <= pairs; p++)); do
  sf_log=$out/sf-$p.log st_log=$out/stampede-$p.log
  rm -rf "$out/sf-train-$p"
  timeout -s INT "$seconds" "$sf_venv/bin/python" -m sf_examples.atari.train_atari --env=atari_pong --algo=APPO \
    --async_rl=True --num_workers=2 --num_envs_per_worker=8 --worker_num_splits=2 --device=cpu \
    --encoder_conv_architecture=convnet_impala --encoder_conv_mlp_layers 256 --use_rnn=False --batch_size=256 \
    --rollout=32 --train_dir="$out/sf-train-$p" --experiment=pong > "$sf_log" 2>&1 || true
  sleep 5  # its processes gone
  read -r sf sf_median < <(rate sf "$sf_log")
  rm -rf "$out/stampede-$p"
  : > "$out/limit-$p.log"
  busy_before=$(limit "$out/limit-$p.log" "$(nproc)")
  alone_before=$(limit "$out/limit-$p.log" 1)
  timeout -s INT "$seconds" "$stampede" run configs/atari_pong.textproto --run-dir "$out/stampede-$p" \
    --set stop.total_env_frames=1000000000 "${recipe[@]}" "${sets[@]}" > "$st_log" 2>&1 || true
  sleep 5
  busy_after=$(limit "$out/limit-$p.log" "$(nproc)")
  alone_after=$(limit "$out/limit-$p.log" 1)
  read -r st st_median < <(rate stampede "$st_log")
  ratio=$(share "$st" "$sf")
  busy=$(mean2 "$busy_before" "$busy_after") alone=$(mean2 "$alone_before" "$alone_after")
  ratios+=("$ratio") shares+=("$(share "$st" "$busy")") alone_shares+=("$(share "$st" "$alone")")
  printf "  pair %d: Sample Factory %6.0f frames/s (median reading %s)   Stampede %6.0f frames/s (median reading %s)   ratio %.2fx\n" \
    "$p" "$sf" "$sf_median" "$st" "$st_median" "$ratio"
  printf "          parts' limit, every core busy %6.0f frames/s (before %s, after %s): Stampede's share %.1f%%\n" \
    "$busy" "${busy_before:-?}" "${busy_after:-?}" "$(pct "${shares[-1]}")"
  printf "          parts' limit, each part alone %6.0f frames/s (before %s, after %s): Stampede's share %.1f%%\n" \
    "$alone" "${alone_before:-?}" "${alone_after:-?}" "$(pct "${alone_shares[-1]}")"
done
printf "bench_sample_factory: median ratio %.2fx; median share of the parts' limit %.1f%% (every core busy), %.1f%% (parts alone); %d pairs (logs in %s)\n" \
  "$(python3 tools/fleet_rate.py median "${ratios[@]}")" "$(pct "${shares[@]}")" "$(pct "${alone_shares[@]}")" "$pairs" "$out"
