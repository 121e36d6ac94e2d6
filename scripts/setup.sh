#!/usr/bin/env bash
# Installs verigym and what it needs on a fresh Debian machine (idempotent).
#   bash scripts/setup.sh            # environments + trainer + test deps
# System packages (needs root or sudo): bubblewrap for the process sandbox, podman + runc for the
# container sandbox. Python packages go into the current interpreter (use a venv if you prefer).
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
need_apt=()
command -v bwrap >/dev/null || need_apt+=(bubblewrap)
command -v podman >/dev/null || need_apt+=(podman)
command -v runc >/dev/null || need_apt+=(runc)
command -v mmdebstrap >/dev/null || need_apt+=(mmdebstrap)
if [ ${#need_apt[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null; then
    echo "setup: installing system packages: ${need_apt[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "setup: please install ${need_apt[*]} with your package manager" >&2
  fi
fi

PY=${PYTHON:-python3}
# torch first, pinned: on CPU machines this takes the CPU wheel instead of gigabytes of CUDA packages.
$PY -m pip install -q "torch==2.13.0"
$PY -m pip install -q -e ".[train,dev]"
echo "setup: done ($($PY -c 'import sys; print(sys.executable)'))"
