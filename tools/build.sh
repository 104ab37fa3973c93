#!/usr/bin/env bash
# Configures (once) and builds Stampede into build/ with ninja; extra arguments go to
# cmake at configure time (e.g. -DSTAMPEDE_NATIVE=ON for this machine alone).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f build/build.ninja ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
fi
cmake --build build -j "${STAMPEDE_JOBS:-$(nproc)}"
