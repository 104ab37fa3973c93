#!/usr/bin/env bash
# Clang's thread-safety analysis over every C++ translation unit of the build
# (build/compile_commands.json), with the build's own flags: -fsyntax-only, every other
# warning off, -Wthread-safety -Werror. Exits non-zero on the first file that fails;
# prints each finding with file:line. CI runs it (base/thread_annotations.h says how
# fields and functions are annotated).
#
#   tools/thread_safety.sh [BUILD_DIR]     (default: build; needs clang++ and a configured build)
set -u
cd "$(dirname "$0")/.."
BUILD=${1:-build}
CLANG=${CLANG:-$(command -v clang++ || command -v clang++-14)}
[[ -n "$CLANG" ]] || { echo "thread_safety: clang++ not found (apt-get install clang)" >&2; exit 2; }
[[ -f "$BUILD/compile_commands.json" ]] || { echo "thread_safety: $BUILD/compile_commands.json missing (configure the build first)" >&2; exit 2; }
LIST=$(mktemp)
trap 'rm -f "$LIST"' EXIT
python3 - "$BUILD/compile_commands.json" "$CLANG" > "$LIST" <<'PY'
import json, shlex, sys
entries = json.load(open(sys.argv[1]))
for e in entries:
    if not e["file"].endswith(".cc"):
        continue
    args = shlex.split(e["command"])
    out, skip = [sys.argv[2]], False
    for a in args[1:]:
        if skip:
            skip = False
            continue
        if a == "-o":
            skip = True
            continue
        if a == "-c":
            continue
        out.append(a)
    out += ["-fsyntax-only", "-Wno-everything", "-Wthread-safety", "-Werror"]
    print(e["directory"] + "\t" + shlex.join(out))
PY
# First, that the analysis is on at all: a read of a guarded field without its lock must fail.
PROBE=$(mktemp --suffix=.cc)
printf '%s\n' '#include "base/mutex.h"' \
  'struct Probe { stampede::base::Mutex mu; int n GUARDED_BY(mu) = 0; int Read() { return n; } };' \
  'int main() { Probe p; return p.Read(); }' > "$PROBE"
if "$CLANG" -std=c++20 -I. -fsyntax-only -Wno-everything -Wthread-safety -Werror "$PROBE" 2>/dev/null; then
  rm -f "$PROBE"
  echo "thread_safety: the analysis did not catch an unguarded read (base/thread_annotations.h off?)" >&2
  exit 1
fi
rm -f "$PROBE"
n=$(wc -l < "$LIST")
echo "thread_safety: $n translation units with $("$CLANG" --version | head -1)"
# Two at a time; each line is "DIR<TAB>COMMAND".
tr '\n' '\0' < "$LIST" | xargs -0 -P "${JOBS:-2}" -I{} bash -c 'IFS=$(printf "\t") read -r dir cmd <<< "$1"; cd "$dir" && eval "$cmd"' _ {}
rc=$?
if [[ $rc == 0 ]]; then echo "thread_safety: clean"; else echo "thread_safety: FAILED" >&2; fi
exit $rc
