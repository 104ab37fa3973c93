#!/usr/bin/env bash
# Fuzzing (issue 7): libFuzzer targets with ASan+UBSan, built with clang-14 into
# build-fuzz/, each run from its seed corpus (tests/fuzz/corpus/<target>, in the repo; the
# config target also from configs/ itself)
# for N seconds. Prints executions per second and in total per target; exits non-zero
# on any crash, leak or sanitizer report (the reproducer is left in build-fuzz/crashes/).
#
#   tools/fuzz.sh [SECONDS]     # default 60 per target; CI runs 20
#   tools/fuzz.sh --seeds       # rewrite the seed corpora (then commit them)
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=60
MAKE_SEEDS=0
if [[ "${1:-}" == "--seeds" ]]; then
  MAKE_SEEDS=1
elif [[ "${1:-}" =~ ^[0-9]+$ ]]; then
  SECONDS_PER_TARGET=$1
elif [[ -n "${1:-}" ]]; then
  sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
for tool in clang-14 clang++-14; do
  command -v $tool >/dev/null || { echo "fuzz: $tool not found (apt-get install clang-14 libclang-rt-14-dev)" >&2; exit 2; }
done
# STAMPEDE_FUZZ_TARGETS="a b" runs only those (e.g. two fuzz.sh at once on two cores).
read -r -a TARGETS <<< "${STAMPEDE_FUZZ_TARGETS:-trajectory ps_request config checkpoint}"
if [[ ! -f build-fuzz/build.ninja ]]; then
  CC=clang-14 CXX=clang++-14 cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DSTAMPEDE_FUZZ=ON -DSTAMPEDE_TESTS=OFF -DSTAMPEDE_CUDA=OFF -DSTAMPEDE_NATIVE=OFF >/dev/null
fi
cmake --build build-fuzz -j "${STAMPEDE_JOBS:-2}" --target fuzz_make_seeds "${TARGETS[@]/#/fuzz_}"
if [[ $MAKE_SEEDS == 1 ]]; then
  rm -rf tests/fuzz/corpus
  build-fuzz/tests/fuzz/fuzz_make_seeds tests/fuzz/corpus
  exit 0
fi
mkdir -p build-fuzz/crashes
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# Seeds that live elsewhere in the repo, read as they are (libFuzzer reads directories
# recursively): the config target starts from every shipped config.
declare -A SEEDS_FROM=([config]=configs)
status=0
printf '%-12s %10s %14s %12s %s\n' target seconds executions exec/s result
for t in "${TARGETS[@]}"; do
  # A scratch corpus grows from the seeds; the seeds in the repo stay as they are.
  work=build-fuzz/corpus/$t
  mkdir -p "$work"
  log=build-fuzz/fuzz_$t.log
  set +e
  build-fuzz/tests/fuzz/fuzz_$t -max_total_time="$SECONDS_PER_TARGET" -max_len=65536 -rss_limit_mb=2048 \
    -timeout=10 -artifact_prefix=build-fuzz/crashes/$t- -print_final_stats=1 \
    "$work" "tests/fuzz/corpus/$t" ${SEEDS_FROM[$t]:-} > "$log" 2>&1
  rc=$?
  set -e
  execs=$(awk -F: '/stat::number_of_executed_units/ {gsub(/ /,"",$NF); print $NF}' "$log" | tail -1)
  rate=$(awk -F: '/stat::average_exec_per_sec/ {gsub(/ /,"",$NF); print $NF}' "$log" | tail -1)
  result=ok
  if [[ $rc != 0 ]]; then
    result="FAILED (exit $rc, log $log)"
    status=1
    grep -m5 -E "ERROR|SUMMARY|runtime error" "$log" >&2 || true
  fi
  printf '%-12s %10s %14s %12s %s\n' "$t" "$SECONDS_PER_TARGET" "${execs:-?}" "${rate:-?}" "$result"
done
exit $status
