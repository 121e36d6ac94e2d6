#!/usr/bin/env bash
# The README's test command: set up, then run the whole test suite.
#   bash scripts/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# NeMo-Gym from the package index, for tests/gym/ (verigym driven by the real Gym). CI tests one
# version; `bash scripts/gym_venvs.sh 0.4.0` adds the opt-in one (tests/gym/conftest.py).
if [ "$(id -u)" = 0 ]; then
  bash scripts/gym_venvs.sh 0.7.0  # CI: the real-Gym tests must run
elif ! bash scripts/gym_venvs.sh 0.7.0; then
  echo "test.sh: no NeMo-Gym 0.7.0 venv (see the line above): tests/gym skip, each saying why" >&2
fi
# As root (CI, fresh machines): Podman's Docker-API socket for the container sandbox, and a
# one-machine Slurm cluster for the launch tests (`driver run --run local-slurm`).
# As a user with sudo: the same Slurm, started as root, takes this user's jobs; root's Podman API
# stays root's, so the container tests skip and say why (tests/podman_access.py). Without sudo
# both kinds of tests skip with their reasons.
if [ "$(id -u)" = 0 ]; then
  eval "$(bash scripts/ci_podman.sh)"
  eval "$(bash scripts/ci_slurm.sh)"
elif sudo -n true 2>/dev/null; then
  eval "$(sudo -n bash scripts/ci_slurm.sh)"
else
  echo "test.sh: not root and no passwordless sudo: the Slurm and container tests skip (each says why)" >&2
fi
set +e
python3 -m pytest -q -p no:cacheprovider "$@"
rc=$?
set -e
if [ $rc -eq 5 ]; then
  echo "no tests were collected" >&2
  exit 1
fi
exit $rc
