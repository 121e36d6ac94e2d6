"""The tiny offline SWE instance's repository (``images/tiny/repo``, image ``verigym-swe-tiny:latest``)
and real ``git diff`` patches over it: what the example builders of ``swe`` and ``swe_gen`` write
their rows and responses from."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent / "images" / "tiny" / "repo"
IMAGE = "verigym-swe-tiny:latest"
GIT_ENV = {"GIT_AUTHOR_NAME": "verigym", "GIT_AUTHOR_EMAIL": "verigym@example.invalid",
           "GIT_COMMITTER_NAME": "verigym", "GIT_COMMITTER_EMAIL": "verigym@example.invalid",
           "GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2024-01-01T00:00:00Z"}
STATS = "tinycalc/stats.py"
TESTS = "tests/test_stats.py"
BUGGY = "    return total(values) / (len(values) + 1)\n"
TEST_MEAN = ("    def test_mean(self):\n        self.assertEqual(mean([1, 2, 3]), 2)\n"
             "        self.assertEqual(mean([5]), 5)\n\n")
ANCHOR = "    def test_mean_empty(self):\n"


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}).stdout


def make_diff(edits: dict[str, tuple[str, str]]) -> tuple[str, str]:
    """(base commit, diff) after replacing old -> new in each file of a copy of the repo."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "testbed"
        shutil.copytree(REPO, work)
        _git(work, "init", "-q", "-b", "main")
        _git(work, "add", "-A")
        _git(work, "commit", "-q", "-m", "tinycalc base")
        base = _git(work, "rev-parse", "HEAD").strip()
        for rel, (old, new) in edits.items():
            path = work / rel
            text = path.read_text()
            assert old in text, (rel, old)
            path.write_text(text.replace(old, new, 1))
        return base, _git(work, "diff")
