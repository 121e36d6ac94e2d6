"""Fixtures shared by the environment tests."""

from __future__ import annotations

from typing import Any, AsyncIterator, Awaitable, Callable

import pytest

from servers import registry
from servers.app import start_server
from servers.client import EnvClient
from servers.environment import Environment

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
