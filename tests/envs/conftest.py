"""Fixtures shared by the environment tests."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable

import pytest

from servers import registry
from servers.app import start_server
from servers.client import EnvClient
from servers.environment import Environment
from tests.podman_access import skip_unless_root_podman

ServeEnv = Callable[..., Awaitable[tuple[EnvClient, Environment]]]


@pytest.fixture
async def serve_env() -> AsyncIterator[ServeEnv]:
    """``await serve_env(name, **overrides)`` -> ``(client, env)``: the environment served over
    HTTP in this process, with a client that does not retry (a failure shows at once).
    Everything it started is stopped when the test ends."""
    started: list[tuple[EnvClient, Any]] = []

    async def serve(name: str, **overrides: Any) -> tuple[EnvClient, Environment]:
        env = registry.instantiate(name, overrides=overrides)
        server = await start_server(env)
        client = EnvClient({name: server.url}, retries=0)
        started.append((client, server))
        return client, env

    yield serve
    for client, server in reversed(started):
        await client.close()
        await server.stop()


@pytest.fixture(scope="session")
def swe_tiny_image() -> str:
    """The offline tiny SWE instance image, built with Podman's Docker API up (scripts/ci_podman.sh,
    idempotent; the build script builds the sandbox layer's base test image first when missing).
    Skips when podman is not installed, or not as root (tests/podman_access.py)."""
    skip_unless_root_podman("the SWE container tests")
    root = Path(__file__).resolve().parents[2]
    subprocess.run([str(root / "scripts/ci_podman.sh")], check=True, capture_output=True, timeout=60)
    subprocess.run(["bash", str(root / "environments/swe/images/tiny/build.sh")], check=True, timeout=600)
    return "verigym-swe-tiny:latest"
