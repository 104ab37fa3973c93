#!/usr/bin/env bash
# Installs every Debian package the Stampede build needs. Idempotent: when all are
# present it changes nothing and does not touch the network.
set -euo pipefail
packages=(
  build-essential cmake ninja-build ccache pkg-config
  libcaf-dev libzmq3-dev cppzmq-dev libprotobuf-dev protobuf-compiler libeigen3-dev
  catch2 libcli11-dev nlohmann-json3-dev
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "setup: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
