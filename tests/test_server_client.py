"""The async client: retries only on 503 / connection errors, replica load balancing."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest
from aiohttp import web

from servers import registry
from servers.app import start_server
from servers.client import EnvClient, EnvClientError
from servers.wire import response_from_text

ENV_DIR = Path(__file__).parent / "server_envs"
ROW = {"responses_create_params": {"input": []}, "response": response_from_text("right")}


async def scripted_server(statuses: list[int]):
    """A bare aiohttp server answering /verify with the given statuses in turn (then 200)."""
    seen: list[int] = []

    async def verify(request: web.Request) -> web.Response:
        body = await request.json()
        status = statuses[len(seen)] if len(seen) < len(statuses) else 200
        seen.append(status)
        headers = {"Retry-After": "0"} if status == 503 else None
        return web.json_response({**body, "reward": 1.0} if status == 200 else {"error": f"scripted {status}"},
                                 status=status, headers=headers)

    app = web.Application()
    app.router.add_post("/verify", verify)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    return f"http://127.0.0.1:{port}", seen, runner


async def test_client_retries_503_then_succeeds():
    url, seen, runner = await scripted_server([503, 503])
    try:
        async with EnvClient({"e": url}, retries=3, backoff_s=0.01) as client:
            reply = await client.verify("e", ROW)
        assert reply["reward"] == 1.0 and seen == [503, 503, 200] and client.retried == 2
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("status", [400, 404, 413, 422])
async def test_client_does_not_retry_4xx(status):
    url, seen, runner = await scripted_server([status])
    try:
        async with EnvClient({"e": url}, retries=3, backoff_s=0.01) as client:
            with pytest.raises(EnvClientError) as info:
                await client.verify("e", ROW)
        assert info.value.status == status and seen == [status] and client.retried == 0
    finally:
        await runner.cleanup()


async def test_client_gives_overloaded_failure_when_503_persists():
    url, seen, runner = await scripted_server([503] * 10)
    try:
        async with EnvClient({"e": url}, retries=2, backoff_s=0.01) as client:
            reply = await client.verify("e", ROW)
        assert len(seen) == 3 and reply["_ng_failure_class"] == "overloaded" and reply["reward"] == 0.0
    finally:
        await runner.cleanup()


async def test_client_retries_connection_errors():
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with EnvClient({"e": f"http://127.0.0.1:{port}"}, retries=2, backoff_s=0.01) as client:
        reply = await client.verify("e", ROW)
        assert reply["_ng_failure_class"] == "connection_error" and client.retried == 2
        with pytest.raises(EnvClientError):
            await client.verify("e", ROW, raise_on_failure=True)


async def test_client_retry_reaches_a_server_that_comes_up_late():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async def verify(_: web.Request) -> web.Response:
        return web.json_response({"reward": 1.0})

    app = web.Application()
    app.router.add_post("/verify", verify)
    runner = web.AppRunner(app, access_log=None)

    async def start_late():
        await asyncio.sleep(0.3)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()

    starter = asyncio.create_task(start_late())
    try:
        async with EnvClient({"e": f"http://127.0.0.1:{port}"}, retries=6, backoff_s=0.1) as client:
            reply = await client.verify("e", ROW)
        assert reply == {"reward": 1.0} and client.retried >= 1
    finally:
        await starter
        await runner.cleanup()


async def test_client_balances_across_replicas(monkeypatch):
    monkeypatch.setenv("VERIGYM_ENV_PATH", str(ENV_DIR))
    servers = [await start_server(registry.instantiate("probe", overrides={"cpu_workers": 1})) for _ in range(2)]
    try:
        async with EnvClient({"probe": [s.url for s in servers]}, max_concurrency_per_server=8) as client:
            slow = {**ROW, "mode": "sleep", "sleep_s": 0.05}
            replies = await asyncio.gather(*(client.verify("probe", slow) for _ in range(32)))
        assert all(r["reward"] == 1.0 for r in replies)
        counts = [s.server.service.metrics.requests[("/verify", 200)] for s in servers]
        assert sum(counts) == 32 and min(counts) >= 12, counts  # least-in-flight: near-even split
        # a session sticks to the replica that seeded it
        async with EnvClient({"probe": [s.url for s in servers]}) as client:
            handle = await client.seed_session("probe", {**ROW, "tag": "t"})
            for _ in range(4):
                status, out = await client.call_tool(handle, "bump", {"by": 1})
                assert status == 200
            assert out["count"] == 4
    finally:
        for server in servers:
            await server.stop()
