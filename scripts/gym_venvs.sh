#!/usr/bin/env bash
# Builds NeMo-Gym venvs from the package index for the tests that run verigym against the real
# NeMo-Gym (tests/gym/). Idempotent: a venv that already holds the version is kept.
#   bash scripts/gym_venvs.sh              # 0.7.0 (what CI tests)
#   bash scripts/gym_venvs.sh 0.4.0        # the Gym NeMo-RL v0.7.0's container pins (opt-in test)
#   bash scripts/gym_venvs.sh 0.7.0 0.4.0  # both
# Where: $VERIGYM_GYM_VENVS (default .gym-venvs/ in the repo), one folder per version (gym-<version>).
# Pythons: 0.4.0 on 3.12; 0.7.0 declares Python >= 3.13.14 but installs and runs on 3.13.0 with
# --ignore-requires-python. Interpreters come from $VERIGYM_PY312 / $VERIGYM_PY313, else pyenv, else PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=${VERIGYM_GYM_VENVS:-$PWD/.gym-venvs}
versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(0.7.0)

find_python() {  # $1 = 3.12 | 3.13
  local var="VERIGYM_PY${1/./}" candidate
  if [ -n "${!var:-}" ]; then echo "${!var}"; return; fi
  for candidate in "$HOME"/.pyenv/versions/"$1".*/bin/python "$(command -v "python$1" || true)"; do
    if [ -x "$candidate" ]; then echo "$candidate"; return; fi
  done
  echo "gym_venvs: no Python $1 found: set VERIGYM_PY${1/./}=/path/to/python$1" >&2
  return 1
}

mkdir -p "$ROOT"
for version in "${versions[@]}"; do
  case "$version" in
    0.4.*) py=$(find_python 3.12); extra=() ;;
    0.5.*|0.6.*|0.7.*) py=$(find_python 3.13); extra=(--ignore-requires-python) ;;
    *) echo "gym_venvs: no recipe for NeMo-Gym $version (known: 0.4.x on 3.12, 0.5-0.7 on 3.13)" >&2; exit 2 ;;
  esac
  dir="$ROOT/gym-$version"
  if "$dir/bin/python" -c "import nemo_gym, sys; sys.exit(nemo_gym.__version__ != '$version')" 2>/dev/null; then
    echo "gym_venvs: $dir holds nemo-gym $version"
    continue
  fi
  echo "gym_venvs: building $dir (nemo-gym==$version with $py; a few minutes)"
  rm -rf "$dir"
  "$py" -m venv "$dir"
  "$dir/bin/python" -m pip install -q --disable-pip-version-check "${extra[@]}" "nemo-gym==$version" 2>&1 \
    | grep -v "is ignored: it is neither a file nor a directory" || true
  "$dir/bin/python" -c "import nemo_gym; assert nemo_gym.__version__ == '$version', nemo_gym.__version__"
  echo "gym_venvs: $dir ready"
done
