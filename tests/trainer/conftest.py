"""Fixtures shared by the trainer tests that need a judge model: the tiny GenRM, trained once."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_genrm(tmp_path_factory) -> Path:
    """The tiny preset taught the GenRM's verdict format (environments/genrm/tiny_genrm.py, ~20 s on a
    CPU); VERIGYM_TINY_GENRM=PATH/tiny_genrm reuses one. The folder name is the served model name."""
    if os.environ.get("VERIGYM_TINY_GENRM"):
        return Path(os.environ["VERIGYM_TINY_GENRM"])
    out = tmp_path_factory.mktemp("genrm") / "tiny_genrm"
    done = subprocess.run([sys.executable, "-m", "environments.genrm.tiny_genrm", "--out", str(out)],
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["parseable_at_t0.6"] >= 0.75, report  # it answers in the GenRM's format
    return out
