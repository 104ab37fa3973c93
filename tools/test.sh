#!/usr/bin/env bash
# Fresh machine to a passing test suite: installs packages, builds, runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
tools/build.sh
cd build
ctest --output-on-failure -j "${STAMPEDE_TEST_JOBS:-2}"
