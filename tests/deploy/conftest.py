"""Deployment tests need bubblewrap (the process sandbox); helpers are in deployments.py."""

from __future__ import annotations

import shutil

import pytest


@pytest.fixture(autouse=True)
def _needs_bwrap() -> None:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap not installed (apt-get install bubblewrap)")
