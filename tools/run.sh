#!/usr/bin/env bash
# Fresh machine to a running fleet: installs packages, builds, and runs
# `stampede run CONFIG` (default: the CartPole fleet). Extra arguments go to `stampede run`.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
tools/build.sh
config="${1:-configs/cartpole.textproto}"
[ $# -gt 0 ] && shift
exec build/tools/stampede run "$config" "$@"
