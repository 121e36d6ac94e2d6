"""Framework session tests, driven over real HTTP with cookies against workplace_assistant.

Multi-turn rollouts (seed -> tool calls -> verify), isolation of concurrent sessions,
expiry after the TTL (410), and no leak: 1,000 sessions opened and verified leave no
session behind and memory back at its warmed-up baseline.
"""

from __future__ import annotations

import asyncio
import gc
import json
from pathlib import Path

import psutil
import pytest

from servers import registry
from servers.app import start_server
from servers.client import EnvClient
from servers.wire import response_from_text

ENV = "workplace_assistant"
ROWS = [json.loads(line) for line in
        (Path(__file__).parents[1] / "environments" / ENV / "data" / "example.jsonl").read_text().splitlines()]
REASSIGN_ROW = {k: v for k, v in ROWS[2].items() if not k.startswith("_") and k != "response"}  # Akira -> Raj
AKIRA_LEADS = {"assigned_to_email": "akira.tanaka@atlas.com", "status": "Lead", "product_interest": "Software",
               "page_size": 10}


async def _server(**overrides):
    return await start_server(registry.instantiate(ENV, overrides=overrides))


async def test_multi_turn_session_over_http():
    server = await _server()
    try:
        async with EnvClient({ENV: server.url}, retries=0) as client:
            session = await client.seed_session(ENV, REASSIGN_ROW)
            assert session.session_id and session.seed_reply == {"session_id": session.session_id}
            status, found = await client.call_tool(session, "customer_relationship_manager_search_customers",
                                                   AKIRA_LEADS)
            assert status == 200
            ids = [c["customer_id"] for c in found["output"]]
            assert sorted(ids) == ["00000035", "00000080", "00000095"]
            for customer_id in ids:
                status, out = await client.call_tool(session, "customer_relationship_manager_update_customer", {
                    "customer_id": customer_id, "field": "assigned_to_email", "new_value": "raj.patel@atlas.com"})
                assert (status, out) == (200, {"output": "Customer updated successfully."})
            # the session's state really changed: the search now finds nothing
            _, again = await client.call_tool(session, "customer_relationship_manager_search_customers", AKIRA_LEADS)
            assert again == {"output": []}
            reply = await client.verify(ENV, REASSIGN_ROW, response_from_text("Done."), session=session)
            assert reply["reward"] == 1.0 and reply["state_source"] == "session" and reply["model_tool_calls"] == 5
            assert len(server.server.service.sessions) == 0  # freed on verify
            # the cookie is dead now: a tool call with it is refused, not served on a stale state
            status, body = await client.call_tool(session, "customer_relationship_manager_search_customers",
                                                  AKIRA_LEADS)
            assert status == 410 and "error" in body
    finally:
        await server.stop()


async def test_concurrent_sessions_are_isolated():
    server = await _server()
    try:
        async with EnvClient({ENV: server.url}, retries=0) as client:
            a, b = await asyncio.gather(client.seed_session(ENV, REASSIGN_ROW), client.seed_session(ENV, REASSIGN_ROW))
            assert a.session_id != b.session_id
            delete = {"customer_id": "00000035"}
            assert (await client.call_tool(a, "customer_relationship_manager_delete_customer", delete))[1] == \
                {"output": "Customer deleted successfully."}
            lookup = {"customer_email": "", "assigned_to_email": "akira.tanaka@atlas.com", "page_size": 50}
            (_, in_a), (_, in_b) = await asyncio.gather(
                client.call_tool(a, "customer_relationship_manager_search_customers", lookup),
                client.call_tool(b, "customer_relationship_manager_search_customers", lookup))
            ids_a = {c["customer_id"] for c in in_a["output"]}
            ids_b = {c["customer_id"] for c in in_b["output"]}
            assert "00000035" not in ids_a and "00000035" in ids_b and ids_b - ids_a == {"00000035"}
            # b updates all three leads and scores 1; a deleted one instead and scores 0
            for cid in ("00000035", "00000080", "00000095"):
                await client.call_tool(b, "customer_relationship_manager_update_customer",
                                       {"customer_id": cid, "field": "assigned_to_email",
                                        "new_value": "raj.patel@atlas.com"})
            reply_a, reply_b = await asyncio.gather(
                client.verify(ENV, REASSIGN_ROW, response_from_text("Done."), session=a),
                client.verify(ENV, REASSIGN_ROW, response_from_text("Done."), session=b))
            assert (reply_a["reward"], reply_b["reward"]) == (0.0, 1.0)
            assert "customers 00000035: deleted, but the expected state keeps it" in reply_a["state_diff"]
    finally:
        await server.stop()


async def test_expired_session_answers_410():
    server = await _server(session_ttl_s=0.2)
    try:
        async with EnvClient({ENV: server.url}, retries=0) as client:
            session = await client.seed_session(ENV, REASSIGN_ROW)
            status, _ = await client.call_tool(session, "company_directory_find_email_address", {"name": "raj"})
            assert status == 200
            for _ in range(50):  # the sweeper runs every ttl/4; give it up to 2.5 s on a loaded machine
                if len(server.server.service.sessions) == 0:
                    break
                await asyncio.sleep(0.05)
            assert len(server.server.service.sessions) == 0 and server.server.service.sessions.expired == 1
            status, body = await client.call_tool(session, "company_directory_find_email_address", {"name": "raj"})
            assert status == 410 and "expired" in body["error"]
    finally:
        await server.stop()


async def _open_and_verify(client: EnvClient, count: int, concurrency: int = 32) -> list[float]:
    limit = asyncio.Semaphore(concurrency)
    call = {"customer_id": "00000080", "field": "assigned_to_email", "new_value": "raj.patel@atlas.com"}

    async def one() -> float:
        async with limit:
            session = await client.seed_session(ENV, REASSIGN_ROW)
            await client.call_tool(session, "customer_relationship_manager_update_customer", call)
            reply = await client.verify(ENV, REASSIGN_ROW, response_from_text("Done."), session=session)
            return reply["reward"]

    return await asyncio.gather(*(one() for _ in range(count)))


def _rss_mb() -> float:
    gc.collect()
    return psutil.Process().memory_info().rss / 2**20


async def test_thousand_sessions_do_not_leak():
    server = await _server()
    try:
        async with EnvClient({ENV: server.url}, retries=0) as client:
            await _open_and_verify(client, 200)  # warm-up: allocator pools, connections, caches
            baseline = _rss_mb()
            rewards = await _open_and_verify(client, 1000)
            after = _rss_mb()
        assert rewards == [0.0] * 1000  # one of three leads reassigned: scored, and scored zero
        assert len(server.server.service.sessions) == 0
        # A leaked session keeps its whole SQLite copy (~250 KB): 1,000 leaks would add ~250 MB.
        assert after - baseline < 32, f"RSS grew {after - baseline:.1f} MB over 1,000 verified sessions"
    finally:
        await server.stop()


@pytest.mark.parametrize("ttl", [0.3])
async def test_unverified_sessions_are_freed_by_expiry(ttl):
    server = await _server(session_ttl_s=ttl)
    try:
        async with EnvClient({ENV: server.url}, retries=0) as client:
            await asyncio.gather(*(client.seed_session(ENV, REASSIGN_ROW) for _ in range(100)))
            assert len(server.server.service.sessions) == 100
            for _ in range(60):
                if len(server.server.service.sessions) == 0:
                    break
                await asyncio.sleep(0.05)
            assert len(server.server.service.sessions) == 0 and server.server.service.sessions.expired == 100
    finally:
        await server.stop()


@pytest.mark.parametrize("raised, failure", [(RuntimeError("database handle closed"), "verifier_error"),
                                             (type("LostOutputError", (type("SandboxError", (RuntimeError,), {}),), {})(
                                                 "output lost"), "sandbox_error")])
async def test_a_tool_that_breaks_on_our_side_masks_its_rollout(raised, failure):
    """A tool that raises something other than ToolError failed on the environment's side: the model
    gets the error as data, and the session's verify answers a masked sample with the class, never a
    reward for a rollout whose environment broke."""
    server = await _server()
    try:
        service = server.server.service
        tool = "customer_relationship_manager_search_customers"

        async def broken(state, args):
            raise raised

        setattr(service.env, service.env.tools()[tool].method_name, broken)
        async with EnvClient({ENV: server.url}, retries=0) as client:
            session = await client.seed_session(ENV, REASSIGN_ROW)
            status, body = await client.call_tool(session, tool, AKIRA_LEADS)
            assert status == 200 and body["_ng_failure_class"] == failure and type(raised).__name__ in body["error"]
            reply = await client.verify(ENV, REASSIGN_ROW, response_from_text("Done."), session=session)
        assert reply["reward"] == 0.0 and reply["_ng_failure_class"] == failure and reply.get("mask_sample") is True
    finally:
        await server.stop()
