"""Fixtures for the sandbox tests: a real process backend (bubblewrap) per test module."""

from __future__ import annotations

import shutil

import pytest

from sandboxes import open_backend


@pytest.fixture
async def process_backend():
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap not installed (apt-get install bubblewrap)")
    backend = open_backend("process")
    yield backend
    await backend.close()


@pytest.fixture
async def sandbox(process_backend):
    from sandboxes import SandboxSpec
    sb = await process_backend.create(SandboxSpec())
    yield sb
    await sb.destroy()
