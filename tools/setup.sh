#!/usr/bin/env bash
# Installs every Debian package the Stampede build needs and makes the project's Python
# venv (.venv: gymnasium, ale-py with its ROMs, minatar, numpy, matplotlib, tensorboard,
# kubernetes-validate for the Kubernetes manifests' tests, onnxruntime for the ONNX export's test,
# mkdocs and mkdocs-material for the docs site under docs/) for gymnasium and Atari
# envs. OpenBLAS and BLIS are only measured against Eigen (stampede bench --gemm), not
# linked. Idempotent: when everything is present it changes nothing and does not touch
# the network. STAMPEDE_NO_VENV=1 skips the venv (the C++ envs do not need it).
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(
  build-essential cmake ninja-build ccache pkg-config
  libcaf-dev libzmq3-dev cppzmq-dev libprotobuf-dev protobuf-compiler libeigen3-dev
  catch2 libcli11-dev nlohmann-json3-dev
  pybind11-dev python3-dev python3-venv
  clang-14 libclang-rt-14-dev
  slurm-wlm munge iproute2 iptables
  libopenblas0 libblis4 libdnnl-dev
  qemu-user
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
else
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
fi

[ "${STAMPEDE_NO_VENV:-0}" = 1 ] && exit 0
# The venv must be made by the Python that the actors embed (Debian's libpython3), not
# by another python3 earlier on PATH.
# matplotlib draws the suite reports' curves; tensorboard's reader checks the event files
# the coordinator writes (tests/report_test.cc).
python_packages=(gymnasium==1.4.0 ale-py==0.12.1 minatar==1.0.15 numpy matplotlib tensorboard kubernetes-validate==1.37.0 onnxruntime==1.32.0
  mkdocs==1.6.1 mkdocs-material==9.8.2)
venv=.venv
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import gymnasium, ale_py, minatar, numpy, matplotlib, tensorboard, kubernetes_validate, onnxruntime, mkdocs, material" 2>/dev/null; then
  echo "setup: venv $venv ready"
  exit 0
fi
echo "setup: making the Python venv $venv (${python_packages[*]})"
/usr/bin/python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check "${python_packages[@]}"
