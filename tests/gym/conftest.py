"""Fixtures of the tests that run verigym against the real NeMo-Gym from the package index.

The Gym venvs come from ``scripts/gym_venvs.sh`` (``$VERIGYM_GYM_VENVS``, default ``.gym-venvs/``):
CI builds 0.7.0 (``scripts/test.sh``); 0.4.0, the Gym NeMo-RL v0.7.0's container pins, is
opt-in (``bash scripts/gym_venvs.sh 0.4.0``). A version whose venv is absent skips with the
command that builds it. Gym's code runs in its own interpreter (``gym_driver.py``), never in ours.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("gym_driver.py")
RESULT_MARK = "GYM_DRIVER_RESULT "
CI_VERSION = "0.7.0"
OPT_IN_VERSIONS = ("0.4.0",)
# VERIGYM_GYM_VERSIONS=0.3.0rc0,... runs the tests against other Gym venvs put in the same folder
# (gym-<version>), e.g. a Gym installed from the commit a NeMo-RL release pins.
GYM_VERSIONS = tuple(v for v in os.environ.get("VERIGYM_GYM_VERSIONS", "").split(",") if v) or \
    (CI_VERSION, *OPT_IN_VERSIONS)


def venv_root() -> Path:
    return Path(os.environ.get("VERIGYM_GYM_VENVS") or REPO / ".gym-venvs")


def gym_python(version: str) -> Path:
    python = venv_root() / f"gym-{version}" / "bin" / "python"
    if not python.exists():
        why = "CI builds it in scripts/test.sh" if version == CI_VERSION else "opt-in"
        pytest.skip(f"no NeMo-Gym {version} venv at {python.parent.parent} ({why}): bash scripts/gym_venvs.sh {version}")
    return python


def version_tuple(version: str) -> tuple[int, int, int]:
    """``"0.3.0rc0"`` -> ``(0, 3, 0)``."""
    major, minor, patch = (int(re.match(r"\d+", x).group()) for x in version.split(".")[:3])
    return major, minor, patch


def site_packages(python: Path) -> Path:
    """The folder holding the venv's nemo_gym package: Gym's install root (its PARENT_DIR)."""
    out = subprocess.run([str(python), "-c", "import nemo_gym, os; print(os.path.dirname(os.path.dirname("
                          "nemo_gym.__file__)))"], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def run_driver(python: Path, *args: str, cwd: Path, env: dict[str, str] | None = None,
               timeout: float = 600) -> dict[str, Any]:
    done = subprocess.run([str(python), str(DRIVER), *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, **(env or {})}, timeout=timeout)
    # Gym's servers print into the driver's output: kept beside the test's files for a failure's story
    (cwd / f"gym_driver_{args[0]}.log").write_text(done.stdout + "\n--- stderr ---\n" + done.stderr)
    assert done.returncode == 0, f"gym_driver {args[0]} failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    marked = [line for line in done.stdout.splitlines() if line.startswith(RESULT_MARK)]
    assert marked, f"gym_driver {args[0]} printed no result:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return json.loads(marked[-1][len(RESULT_MARK):])


@pytest.fixture(params=GYM_VERSIONS)
def gym(request) -> tuple[str, Path]:
    """(version, interpreter) of an installed NeMo-Gym."""
    return request.param, gym_python(request.param)


def verigym_cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "servers.cli", *args]
