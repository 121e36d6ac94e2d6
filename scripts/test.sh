#!/usr/bin/env bash
# The README's test command: set up, then run the whole test suite.
#   bash scripts/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# NeMo-Gym from the package index, for tests/gym/ (verigym driven by the real Gym). CI tests one
# version; `bash scripts/gym_venvs.sh 0.4.0` adds the opt-in one (tests/gym/conftest.py).
bash scripts/gym_venvs.sh 0.7.0
# The container sandbox needs Podman's Docker-API socket (configured and started by this script).
# Root only (CI and fresh machines); elsewhere the container tests skip with the reason.
if [ "$(id -u)" = 0 ]; then
  eval "$(bash scripts/ci_podman.sh)"
  # A one-machine Slurm cluster for the launch tests (`driver run --run local-slurm`).
  eval "$(bash scripts/ci_slurm.sh)"
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
