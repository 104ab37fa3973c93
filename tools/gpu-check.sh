#!/usr/bin/env bash
# The GPU check, for a machine with a CUDA device (the lent H200), in one go:
#   1. the CPU-vs-CUDA tests (every network: forward, gradient, a full learner step),
#   2. `stampede bench --gpu` (deep ResNet + LSTM, B=32, T=100, 84x84x4),
#   3. the same learner step in PyTorch eager on the same GPU, and the ratio,
#   4. Catch runs with the CUDA learner in relay, sync, async and allreduce mode (the one
#      train loop's CUDA backend: fused steps in relay, gradients pushed to the shards or
#      averaged in the learners' ring otherwise), and pixel Catch through a network of the
#      config's own (net.layers), and Catch with central inference on the learner's GPU,
#   5. a two-task suite with per-task action masks and PopArt on the CUDA learner.
#
# That machine has the CUDA driver, cuBLAS and cuDNN (PyTorch's wheels) but none of this
# machine's Debian libraries, so the build travels:
#   here:        tools/gpu-check.sh --prepare   # builds with CUDA, fills .gpu/ (bin + lib)
#   GPU machine: tools/gpu-check.sh             # with .gpu carried along
# Exit status: non-zero when a test fails or a binary cannot load.
set -uo pipefail
cd "$(dirname "$0")/.."
GPU_DIR=.gpu

if [[ "${1:-}" == "--prepare" ]]; then
  set -e
  # Its own build: the portable default (x86-64-v3: AVX2, FMA), never -march=native, so the
  # binaries run on the GPU machine's processor too. Without oneDNN: its 40 MB library
  # would not fit the carry limit beside the CUDA binaries, and the GPU check does not
  # measure CPU convolutions.
  if [[ ! -f build-gpu/build.ninja ]]; then
    cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTAMPEDE_CUDA=ON -DSTAMPEDE_NATIVE=OFF -DSTAMPEDE_ONEDNN=OFF
  fi
  cmake --build build-gpu -j "${STAMPEDE_JOBS:-$(nproc)}" --target stampede stampede_cuda_tests
  rm -rf "$GPU_DIR" && mkdir -p "$GPU_DIR/bin" "$GPU_DIR/lib"
  cp build-gpu/tools/stampede build-gpu/tests/stampede_cuda_tests "$GPU_DIR/bin/"
  # Debian libraries the binaries load, except the C runtime and CUDA's own (there).
  for bin in "$GPU_DIR"/bin/*; do
    ldd "$bin" | awk '$3 ~ /^\// {print $3}'
  done | sort -u | grep -Ev '/(libc|libm|libstdc\+\+|libgcc_s|libdl|libpthread|librt|ld-linux[^/]*)\.so|libcu|libnv' |
    while read -r lib; do cp -L "$lib" "$GPU_DIR/lib/"; done
  du -sh "$GPU_DIR"
  echo "gpu-check: prepared $GPU_DIR; on the GPU machine run tools/gpu-check.sh with $GPU_DIR carried"
  exit 0
fi

if [[ ! -x "$GPU_DIR/bin/stampede" ]]; then
  echo "gpu-check: $GPU_DIR/bin is missing: run 'tools/gpu-check.sh --prepare' on the build machine and carry $GPU_DIR" >&2
  exit 2
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
# cuBLAS 13, cuDNN 9 and NVRTC (which cuDNN loads) from the Python environment's NVIDIA wheels (PyTorch's).
libdirs=$(python3 - <<'PY'
import glob, os, site
roots = site.getsitepackages() + [site.getusersitepackages()]
found = set()
for root in roots:
    for name in ("libcublas.so.13", "libcublasLt.so.13", "libcudnn.so.9", "libnvrtc.so.13", "libnvJitLink.so.13"):
        for path in glob.glob(os.path.join(root, "nvidia", "**", name), recursive=True):
            found.add(os.path.dirname(path))
print(":".join(sorted(found)))
PY
)
export LD_LIBRARY_PATH="$PWD/$GPU_DIR/lib${libdirs:+:$libdirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
status=0
for bin in "$GPU_DIR"/bin/*; do
  if ldd "$bin" | grep -q "not found"; then
    echo "gpu-check: $bin cannot load:" >&2
    ldd "$bin" | grep "not found" >&2
    status=2
  fi
done
[[ $status -ne 0 ]] && exit $status

echo "== 1. CPU vs CUDA tests"
timeout 300 "$GPU_DIR/bin/stampede_cuda_tests" --durations yes || status=1

echo "== 2. Stampede's CUDA learner step"
ours=$(timeout 120 "$GPU_DIR/bin/stampede" bench --gpu --seconds "${GPU_BENCH_SECONDS:-10}") || status=1
echo "$ours"

echo "== 3. The same step in PyTorch eager"
theirs=$(PYTHONUNBUFFERED=1 timeout 120 python3 tools/torch_impala_bench.py --seconds "${GPU_BENCH_SECONDS:-10}") || status=1
echo "$theirs"

a=$(echo "$ours" | sed -n 's/^RESULT agent_steps_per_s=\([0-9.]*\).*/\1/p')
b=$(echo "$theirs" | sed -n 's/^RESULT agent_steps_per_s=\([0-9.]*\).*/\1/p')
if [[ -n "$a" && -n "$b" ]]; then
  python3 -c "print(f'== Stampede / PyTorch eager learner throughput: {float($a) / float($b):.2f}x (target >= 1.5x)')"
fi

echo "== 4. The CUDA learner in every update mode (Catch to 0.9: relay; two learners sync, async, allreduce; pixel Catch through net.layers; central inference on the GPU)"
# learner.device "cuda": learner i on GPU i mod the GPUs there (both on one, on a one-GPU machine).
# The last: central inference (SEED RL's setting), the actors' forward passes on the learner's GPU.
for run in "catch relay cuda:0" "catch_2learners sync cuda:0" "catch_2learners async cuda:0" \
    "catch_2learners allreduce cuda" "catch_pixels_custom relay cuda:0" "catch relay cuda:0 actors.inference=central"; do
  set -- $run
  extra=()
  for s in "${@:4}"; do extra+=(--set "$s"); done
  dir=$(mktemp -d)/run
  # Each run is bounded (a hang is a failure, not a stuck check).
  if timeout "${GPU_RUN_SECONDS:-150}" "$GPU_DIR/bin/stampede" run "configs/$1.textproto" --run-dir "$dir" \
      --set "learner.device=$3" --set "learner.update_mode=$2" --set stop.stop_at_target=true "${extra[@]}" >"$dir.out" 2>&1 &&
      grep -q '"stop_reason": *"target return reached"' "$dir/summary.json" &&
      { [[ $# -lt 4 ]] || grep -q "inference server on cuda" "$dir/logs/learner-0.log"; }; then
    echo "$1 $2 ${*:4}: target reached; $(python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print(f\"{s['frames_to_target']} frames, {s['seconds_to_target']:.1f} s to target, {s['frames_per_second']:.0f} frames/s\")" "$dir/summary.json")"
  else
    echo "$1 $2 ${*:4}: FAILED (exit or no target); last lines:"
    tail -15 "$dir.out"
    [[ -n "${OUT:-}" ]] && cp "$dir.out" "$OUT/$1_$2.log"
    status=1
  fi
done
echo "== 5. A suite with per-task action masks and PopArt on the CUDA learner (catch_cartpole: each task to its own target)"
dir=$(mktemp -d)/run
if timeout "${GPU_RUN_SECONDS:-150}" "$GPU_DIR/bin/stampede" run configs/catch_cartpole.textproto --run-dir "$dir" \
    --set learner.device=cuda:0 >"$dir.out" 2>&1 && grep -q '"stop_reason": *"target return reached"' "$dir/summary.json"; then
  echo "catch_cartpole (masks, PopArt) on cuda:0: every task reached its target; $(python3 -c "
import json, sys
s = json.load(open(sys.argv[1]))
tasks = '; '.join(f\"{n}: {t['frames_to_target']} frames to target, PopArt scale {t.get('popart_scale', 1):.3g}\" for n, t in s['tasks'].items())
print(f\"{tasks}; {s['learner_steps']} learner steps, {s['frames_per_second']:.0f} frames/s\")" "$dir/summary.json")"
else
  echo "catch_cartpole (masks, PopArt) on cuda:0: FAILED; last lines:"
  tail -15 "$dir.out"
  [[ -n "${OUT:-}" ]] && cp "$dir.out" "$OUT/catch_cartpole_popart.log"
  status=1
fi
exit $status
