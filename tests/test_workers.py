"""``envs serve NAME --workers N``: N processes on one port, sessions routed to their worker,
whole-server /health and /metrics, a killed worker restarted, a clean stop.

Every request here goes over a NEW connection (``force_close``): the kernel picks a worker
per connection (SO_REUSEPORT), so a session's calls land on both workers and only the
routing by session id can keep them on its state.
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from servers import registry
from servers.cli_serve import spawn_servers, stop_servers
from servers.examples import EXPECTED_KEY, SCRIPT_KEY, compare, load_examples
from servers.http_server import HttpServer, Reply, Request
from servers.prefork import pool_share
from servers.wire import response_from_text
from servers.worker_group import label_samples, merge_families, owner_of

ENV_DIR = Path(__file__).parent / "server_envs"
JSON = {"Content-Type": "application/json"}

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(autouse=True)
def _probe_on_path(monkeypatch):
    monkeypatch.setenv("VERIGYM_ENV_PATH", str(ENV_DIR))


def _fresh_connections() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True), cookie_jar=aiohttp.DummyCookieJar())


def _worker_pids(master: int) -> list[int]:
    children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
    return [int(pid) for pid in children if "servers.cli_serve" in Path(f"/proc/{pid}/cmdline").read_text()]


async def _post(http: aiohttp.ClientSession, url: str, body: Any, session_id: str | None = None) -> tuple[int, Any]:
    headers = {**JSON, "Cookie": f"verigym_session={session_id}"} if session_id else JSON
    async with http.post(url, json=body, headers=headers) as r:
        return r.status, await r.json()


async def _one_session_per_worker(http: aiohttp.ClientSession, url: str, workers: int) -> dict[int, str]:
    """Seed sessions until every worker owns one: {worker index: session id}."""
    ids: dict[int, str] = {}
    while len(ids) < workers:
        _, reply = await _post(http, url + "/seed_session", {"responses_create_params": {"input": "q"}})
        ids.setdefault(owner_of(reply["session_id"]), reply["session_id"])
    return ids


def test_pool_share_splits_the_cpu_pool_over_the_workers():
    assert pool_share(None, 2, 2) == 1 and pool_share(None, 1, 8) == 8 and pool_share(None, 8, 8) == 1
    assert pool_share(6, 4, 8) == 2 and pool_share(1, 4, 8) == 1  # at least one each, never N x cores


def test_metrics_of_several_workers_merge_into_one_exposition():
    one = "# HELP a_total A.\n# TYPE a_total counter\na_total{env=\"e\"} 1\n# TYPE b gauge\nb 2\n"
    merged = merge_families([label_samples(one, 0), label_samples(one, 1)])
    assert merged.splitlines() == ["# HELP a_total A.", "# TYPE a_total counter", 'a_total{worker="0",env="e"} 1',
                                   'a_total{worker="1",env="e"} 1', "# TYPE b gauge", 'b{worker="0"} 2',
                                   'b{worker="1"} 2']
    assert owner_of("w1-abc") == 1 and owner_of("abc") is None and owner_of(None) is None


async def test_interleaved_sessions_reach_their_state_on_either_worker():
    (child,) = await spawn_servers(["probe"], workers=2, echo_output=False)
    url = child.url
    try:
        async with _fresh_connections() as http:
            seeded = [await _post(http, url + "/seed_session", {"responses_create_params": {"input": "q"},
                                                                "tag": i}) for i in range(16)]
            ids = [reply["session_id"] for status, reply in seeded if status == 200]
            assert len(ids) == 16 and {owner_of(i) for i in ids} == {0, 1}, ids
            # Session i is bumped i % 4 + 1 times, the calls of all sessions interleaved.
            for round_ in range(4):
                for i, session_id in enumerate(ids):
                    if round_ <= i % 4:
                        status, out = await _post(http, url + "/bump", {"by": 1}, session_id)
                        assert status == 200 and out == {"count": round_ + 1, "tag": i}, out
            replies = await asyncio.gather(*(
                _post(http, url + "/verify", {"responses_create_params": {"input": "q"}, "mode": "session",
                                              "target": i % 4 + 1, "response": response_from_text("x")}, session_id)
                for i, session_id in enumerate(ids)))
            assert [(status, reply["reward"]) for status, reply in replies] == [(200, 1.0)] * 16
            async with http.get(url + "/metrics") as r:
                metrics = await r.text()
            async with http.get(url + "/health") as r:
                health = await r.json()
        forwarded = [line for line in metrics.splitlines() if line.startswith("verigym_forwarded_total")]
        assert len(forwarded) == 2 and sum(float(line.split()[-1]) for line in forwarded) > 0
        assert 'verigym_sessions{worker="0",env="probe"}' in metrics and "verigym_workers{env=\"probe\"} 2" in metrics
        verified = sum(float(line.split()[-1]) for line in metrics.splitlines()
                       if line.startswith("verigym_verify_seconds_count"))
        assert verified == 16  # each verification counted once, by the worker that ran it
        assert health["status"] == "ok" and [w["status"] for w in health["workers"]] == [200, 200]
    finally:
        codes = await stop_servers([child])
    assert codes == {"probe": 0}


async def test_workplace_sessions_interleaved_across_workers_score_like_in_process():
    """Real multi-turn rollouts (per-session SQLite): every example's tool calls interleaved with
    the others', each call on a new connection, then all verified at once."""
    rows = [row for _, row in load_examples(registry.get("workplace_assistant").example_path)
            if row.get(SCRIPT_KEY) and row.get(EXPECTED_KEY, {}).get("status", 200) == 200]
    (child,) = await spawn_servers(["workplace_assistant"], workers=2, echo_output=False)
    url = child.url
    try:
        async with _fresh_connections() as http:
            sessions = []
            for row in rows:
                status, reply = await _post(http, url + "/seed_session", row)
                assert status == 200, reply
                sessions.append(reply["session_id"])
            assert {owner_of(s) for s in sessions} == {0, 1}
            problems: list[str] = []
            for step in range(max(len(row[SCRIPT_KEY]) for row in rows)):
                for row, session_id in zip(rows, sessions):
                    if step < len(row[SCRIPT_KEY]):
                        call = row[SCRIPT_KEY][step]
                        status, out = await _post(http, f"{url}/{call['name']}", call.get("arguments", {}), session_id)
                        assert status == 200, out
                        for key, value in call.get("expect", {}).items():
                            if out.get(key) != value:
                                problems.append(f"{call['name']}: {key}={out.get(key)!r}, expected {value!r}")
            clean = [{k: v for k, v in row.items() if k not in (EXPECTED_KEY, SCRIPT_KEY)} for row in rows]
            replies = await asyncio.gather(*(_post(http, url + "/verify", body, s) for body, s in zip(clean, sessions)))
        for row, (status, reply) in zip(rows, replies):
            problems += compare(row[EXPECTED_KEY], status, reply)
        assert not problems, problems
    finally:
        await stop_servers([child])


async def test_a_handler_awaiting_a_stream_survives_garbage_collection(tmp_path):
    """The root cause of the forwarded call that hung ~1 run in 3: a request's task, awaiting a
    stream read whose reader only that task references, was an unreachable cycle the collector
    destroyed mid-await (the event loop holds tasks weakly). The server holds them now."""
    called, answer = asyncio.Event(), asyncio.Event()

    async def slow_peer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()
        called.set()
        await answer.wait()
        writer.write(b"from the peer\n")
        await writer.drain()
        writer.close()

    async def forwarding_handler(_request: Request) -> Reply:  # what WorkerGroup._exchange does
        reader, writer = await asyncio.open_unix_connection(str(tmp_path / "peer.sock"))
        try:
            writer.write(b"call\n")
            return Reply(200, await reader.readline(), "text/plain")
        finally:
            writer.close()

    peer = await asyncio.start_unix_server(slow_peer, str(tmp_path / "peer.sock"))
    http = HttpServer(forwarding_handler, max_body=1024)
    await http.start(unix_path=str(tmp_path / "front.sock"))
    try:
        reader, writer = await asyncio.open_unix_connection(str(tmp_path / "front.sock"))
        writer.write(b"GET /x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        await asyncio.wait_for(called.wait(), 30)
        await asyncio.sleep(0)  # the handler is parked in reader.readline()
        gc.collect()
        answer.set()
        reply = await asyncio.wait_for(reader.read(), 30)
        writer.close()
        assert reply.startswith(b"HTTP/1.1 200 ") and reply.endswith(b"from the peer\n"), reply
    finally:
        await http.close()
        peer.close()


def _unix_socket_of(pid: int) -> str:
    """The private Unix socket worker ``pid`` listens on (its peers forward session calls there)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except FileNotFoundError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) > 7 and fields[6] in inodes and fields[7].endswith(".sock"):
            return fields[7]
    raise AssertionError(f"worker {pid} listens on no Unix socket")


async def test_a_forward_to_a_stopped_owner_answers_503_with_a_failure_class_not_a_hang():
    # verify_timeout_s=0.5: the forwarding deadline is 2 x 0.5 + 5 s (servers/worker_group.py).
    (child,) = await spawn_servers(["probe"], workers=2, echo_output=False, log_level="ERROR",
                                   overrides=["verify_timeout_s=0.5"])
    url = child.url
    stopped = None
    try:
        async with _fresh_connections() as http:
            ids = await _one_session_per_worker(http, url, 2)
            async with http.get(url + "/health") as r:
                pids = {w["worker"]: w["pid"] for w in (await r.json())["workers"]}
        # Worker 1 stopped: its Unix socket still accepts (the kernel's backlog) but nothing answers.
        # The call goes to worker 0 directly (its Unix socket: a TCP connection could land on worker 1).
        stopped = pids[1]
        os.kill(stopped, signal.SIGSTOP)
        to_worker_0 = aiohttp.UnixConnector(path=_unix_socket_of(pids[0]))
        async with aiohttp.ClientSession(connector=to_worker_0, cookie_jar=aiohttp.DummyCookieJar()) as http0:
            async with http0.post("http://worker/bump", json={"by": 1},
                                  headers={**JSON, "Cookie": f"verigym_session={ids[1]}"}) as r:
                status, retry_after, body = r.status, r.headers.get("Retry-After"), await r.json()
            assert status == 503 and retry_after == "1", (status, body)
            assert body["_ng_failure_class"] == "timeout" and "(w1)" in body["error"], body
            status, out = await _post(http0, "http://worker/bump", {"by": 3}, ids[0])
            assert status == 200 and out["count"] == 3  # worker 0 kept serving its own sessions meanwhile
            os.kill(stopped, signal.SIGCONT)
            stopped = None
            status, out = await _post(http0, "http://worker/bump", {"by": 2}, ids[1])
            # The owner back, its session intact. The timed-out call was in its socket when it stopped, so it
            # may have run on waking (count 3) or not (2): a 503 after the deadline says "outcome unknown".
            assert status == 200 and out["count"] in (2, 3), out
            async with http0.get("http://worker/metrics") as r:
                metrics = await r.text()
        assert 'verigym_forward_errors_total{worker="0",env="probe"} 1' in metrics, metrics
    finally:
        if stopped is not None:
            os.kill(stopped, signal.SIGCONT)
        codes = await stop_servers([child])
    assert codes == {"probe": 0}


async def test_a_killed_worker_is_restarted_and_the_other_keeps_its_sessions():
    (child,) = await spawn_servers(["probe"], workers=2, echo_output=False, log_level="ERROR")
    url = child.url
    try:
        async with _fresh_connections() as http:
            ids = await _one_session_per_worker(http, url, 2)
            async with http.get(url + "/health") as r:
                workers = (await r.json())["workers"]
            assert {w["pid"] for w in workers} <= set(_worker_pids(child.process.pid))  # the master's children
            victim = workers[0]["pid"]
            os.kill(victim, signal.SIGKILL)
            for _ in range(300):  # restarted: the whole server healthy again, with a new worker 0
                async with http.get(url + "/health") as r:
                    health = await r.json()
                    if r.status == 200 and victim not in {w["pid"] for w in health["workers"]}:
                        break
                await asyncio.sleep(0.1)
            assert r.status == 200 and {w["pid"] for w in health["workers"]} <= set(_worker_pids(child.process.pid))
            status, out = await _post(http, url + "/bump", {"by": 2}, ids[1])
            assert status == 200 and out["count"] == 2  # worker 1's session lived on
            status, out = await _post(http, url + "/bump", {"by": 1}, ids[0])
            assert status == 410, out  # worker 0's state died with it: the rollout must re-seed
    finally:
        codes = await stop_servers([child])
    assert codes == {"probe": 0}


async def test_gym_07_seeds_and_closes_reach_the_worker_their_id_names():
    """Gym >= 0.7 names its sessions: a seed, its retry and its close (the close of an id never
    seeded too) must all meet on one worker, whichever worker each connection lands on."""
    from servers.worker_group import external_owner

    (child,) = await spawn_servers(["probe"], workers=2, echo_output=False)
    episode = {"rollout_id": "1-0", "attempt": 0}

    def seed(rsid: str) -> dict[str, Any]:
        return {"resources_session_id": rsid, "episode_id": episode, "task_id": {"taskset": "p", "task_id": "1"},
                "task_data": {"responses_create_params": {"input": "q"}, "tag": rsid}}

    try:
        async with _fresh_connections() as http:
            rsids = [f"rs-{i}" for i in range(8)]
            assert {external_owner(f'{{"resources_session_id": "{r}"}}'.encode(), 2) for r in rsids} == {0, 1}
            for rsid in rsids:
                async with http.post(child.url + "/seed_session", json=seed(rsid), headers=JSON) as r:
                    assert r.status == 200 and await r.json() == {"resources_session_id": rsid}
                    cookie = r.cookies["verigym_session"].value
                assert owner_of(cookie) == external_owner(f'{{"resources_session_id": "{rsid}"}}'.encode(), 2)
                for _ in range(3):  # repeated seeds, each on a new connection: the same session every time
                    async with http.post(child.url + "/seed_session", json=seed(rsid), headers=JSON) as r:
                        assert r.status == 200 and r.cookies["verigym_session"].value == cookie
                status, out = await _post(http, child.url + "/bump", {"by": 2}, cookie)
                assert (status, out) == (200, {"count": 2, "tag": rsid})
                for _ in range(2):
                    status, out = await _post(http, child.url + "/close_session",
                                              {"resources_session_id": rsid, "episode_id": episode})
                    assert status == 200, out
                status, _ = await _post(http, child.url + "/seed_session", seed(rsid))
                assert status == 409
            for rsid in ("never-a", "never-b", "never-c", "never-d"):
                status, _ = await _post(http, child.url + "/close_session",
                                        {"resources_session_id": rsid, "episode_id": episode})
                assert status == 200
                status, _ = await _post(http, child.url + "/seed_session", seed(rsid))
                assert status == 409
    finally:
        await stop_servers([child])
