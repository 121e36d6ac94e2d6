"""The framework against real servers on loopback, driven by the test-only ``probe`` environment."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from servers import registry
from servers.app import start_server
from servers.wire import SESSION_COOKIE, response_from_text

ENV_DIR = Path(__file__).parent / "server_envs"


@pytest.fixture
def probe_env(monkeypatch):
    monkeypatch.setenv("VERIGYM_ENV_PATH", str(ENV_DIR))

    def make(**overrides: Any):
        overrides.setdefault("cpu_workers", 1)
        return registry.instantiate("probe", overrides=overrides)

    return make


@pytest.fixture
async def serve(probe_env):
    started = []

    async def start(**overrides: Any):
        server = await start_server(probe_env(**overrides))
        started.append(server)
        return server

    yield start
    for server in started:
        await server.stop(drain_timeout=5)


@pytest.fixture
async def http():
    async with aiohttp.ClientSession() as session:
        yield session


def row(mode: str = "answer", text: str = "right", **fields: Any) -> dict[str, Any]:
    return {"responses_create_params": {"input": [{"role": "user", "content": "q"}]}, "mode": mode,
            "response": response_from_text(text), **fields}


async def post(http, url: str, body: Any, **kw: Any) -> tuple[int, Any, Any]:
    async with http.post(url, json=body, **kw) as r:
        return r.status, await r.json(), r.headers


async def test_verify_echoes_row_and_scores(serve, http):
    server = await serve()
    status, reply, _ = await post(http, server.url + "/verify", row(extra_field={"kept": [1, 2]}))
    assert status == 200 and reply["reward"] == 1.0 and reply["extra_field"] == {"kept": [1, 2]}
    status, reply, _ = await post(http, server.url + "/verify", row(text="wrong"))
    assert (status, reply["reward"], reply["extracted_answer"]) == (200, 0.0, "wrong")
    assert "_ng_failure_class" not in reply


async def test_rollout_prefix_is_stripped(serve, http):
    server = await serve()
    status, reply, _ = await post(http, server.url + "/ng-rollout/run-7.a_b/verify", row())
    assert status == 200 and reply["reward"] == 1.0
    async with http.get(server.url + "/ng-rollout/abc/health") as r:
        assert r.status == 200


async def test_bad_input_statuses_and_server_keeps_serving(serve, http):
    server = await serve()
    async with http.post(server.url + "/verify", data=b'{"broken": ', headers={"Content-Type": "application/json"}) as r:
        body = await r.json()
        assert r.status == 400 and body["error"] and "detail" in body
    status, body, _ = await post(http, server.url + "/verify", row(sleep_s=-1))
    assert status == 422 and [d["loc"] for d in body["detail"]] == ["sleep_s"]
    bad_response = {**row(), "response": {"output": [{"role": "assistant"}]}}
    status, body, _ = await post(http, server.url + "/verify", bad_response)
    assert status == 422 and body["detail"][0]["loc"] == "response.output.0.type"
    async with http.get(server.url + "/no/such/route") as r:
        assert r.status == 404 and "error" in await r.json()
    status, body, _ = await post(http, server.url + "/no_such_tool", {})
    assert status == 404 and "bump" in body["detail"]["tools"]
    status, reply, _ = await post(http, server.url + "/verify", row())
    assert status == 200 and reply["reward"] == 1.0


async def test_post_needs_a_json_content_type(serve, http):
    """A web page can POST text/plain (or a typeless Blob) to localhost with no CORS preflight:
    such a request is refused (415) before it is read, so it is never scored or reaches a tool."""
    server = await serve()
    body = orjson.dumps(row())
    for content_type in ("text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
                         "multipart/form-data; boundary=x", None):
        headers = {"Content-Type": content_type} if content_type else {}
        # skip_auto_headers: without it aiohttp adds application/octet-stream to a bytes body
        async with http.post(server.url + "/verify", data=body, headers=headers,
                             skip_auto_headers=["Content-Type"]) as r:
            reply = await r.json()
            assert r.status == 415, (content_type, reply)
            assert "application/json" in reply["error"] and reply["detail"]["received"] == content_type
            assert "reward" not in reply
    async with http.post(server.url + "/bump", data=b'{"by": 1}', headers={"Content-Type": "text/plain"},
                         skip_auto_headers=["Content-Type"]) as r:
        assert r.status == 415  # tools too
    for content_type in ("application/json", "application/json; charset=utf-8", "Application/JSON",
                         "application/vnd.nemo-gym+json"):
        async with http.post(server.url + "/verify", data=body, headers={"Content-Type": content_type}) as r:
            assert r.status == 200 and (await r.json())["reward"] == 1.0, content_type
    async with http.get(server.url + "/metrics") as r:
        assert 'route="/verify",status="415"} 5' in await r.text()


async def test_wrong_method_is_405_with_allow_and_unknown_path_404(serve, http):
    server = await serve()
    async with http.get(server.url + "/verify") as r:
        assert (r.status, r.headers["Allow"]) == (405, "POST") and "use POST" in (await r.json())["error"]
    async with http.get(server.url + "/ng-rollout/r1/seed_session") as r:
        assert (r.status, r.headers["Allow"]) == (405, "POST")
    async with http.get(server.url + "/bump") as r:  # a tool route
        assert (r.status, r.headers["Allow"]) == (405, "POST")
    status, body, headers = await post(http, server.url + "/health", {})
    assert (status, headers["Allow"]) == (405, "GET") and body["error"]
    async with http.put(server.url + "/verify", json=row()) as r:
        assert (r.status, r.headers["Allow"]) == (405, "POST")
    async with http.delete(server.url + "/info") as r:
        assert (r.status, r.headers["Allow"]) == (405, "GET")
    async with http.options(server.url + "/verify") as r:  # a CORS preflight gets no CORS headers
        assert r.status == 405 and "Access-Control-Allow-Origin" not in r.headers
    for method in ("GET", "PUT"):
        async with http.request(method, server.url + "/no_such_route") as r:
            assert r.status == 404 and "Allow" not in r.headers and "bump" in (await r.json())["detail"]["tools"]


async def test_response_without_output_is_422_naming_the_field(serve, http):
    server = await serve()
    for response in ({}, {"id": "resp_1", "model": "m"}):
        status, body, _ = await post(http, server.url + "/verify", {**row(), "response": response})
        assert status == 422 and [d["loc"] for d in body["detail"]] == ["response.output"], body
        assert "reward" not in body
    status, body, _ = await post(http, server.url + "/verify", {**row(), "response": {"output": []}})
    assert status == 200 and body["reward"] == 0.0 and "_ng_failure_class" not in body  # empty answer: scored


async def test_body_over_limit_is_413_and_server_keeps_serving(serve, http):
    server = await serve(max_body_mb=0.01)  # ~10 KiB
    big = row(padding="x" * 50_000)
    status, body, _ = await post(http, server.url + "/verify", big)
    assert status == 413 and "max_body_mb" in body["error"]

    async def chunks():  # no Content-Length: the limit must hold while streaming too
        for _ in range(20):
            yield b"x" * 4096

    async with http.post(server.url + "/verify", data=chunks(), headers={"Content-Type": "application/json"}) as r:
        assert r.status == 413
    status, reply, _ = await post(http, server.url + "/verify", row())
    assert status == 200 and reply["reward"] == 1.0


async def test_backpressure_answers_503_with_retry_after(serve, http):
    server = await serve(max_concurrent=1, max_queued=1)
    metrics = server.server.service.metrics
    first = asyncio.create_task(post(http, server.url + "/verify", row("sleep", sleep_s=1.0)))
    while metrics.in_flight < 1:
        await asyncio.sleep(0.01)
    second = asyncio.create_task(post(http, server.url + "/verify", row("sleep", sleep_s=0.1)))
    while metrics.queued < 1:
        await asyncio.sleep(0.01)
    status, body, headers = await post(http, server.url + "/verify", row())
    assert status == 503 and headers["Retry-After"] == "1" and "overloaded" in body["error"]
    assert [(await first)[0], (await second)[0]] == [200, 200]
    assert metrics.rejected_overload == 1
    status, _, _ = await post(http, server.url + "/verify", row())
    assert status == 200


async def test_verifier_exception_is_a_failure_class_not_a_zero(serve, http):
    server = await serve()
    status, reply, _ = await post(http, server.url + "/verify", row("raise", instance_config={"keep": 1}))
    assert status == 200 and reply["reward"] == 0.0
    assert reply["_ng_failure_class"] == "verifier_error"
    assert "exploded on purpose" in reply["_ng_failure_detail"]
    assert reply["instance_config"] == {"keep": 1, "mask_sample": True}


async def test_verify_deadline_gives_timeout(serve, http):
    server = await serve(verify_timeout_s=0.3)
    status, reply, _ = await post(http, server.url + "/verify", row("sleep", sleep_s=5))
    assert status == 200 and reply["_ng_failure_class"] == "timeout" and reply["reward"] == 0.0


async def test_cpu_task_past_deadline_replaces_worker(serve, http):
    server = await serve(cpu_call_timeout_s=0.5)
    pool = server.server.service.pool
    old_pid = pool._workers[0].process.pid
    status, reply, _ = await post(http, server.url + "/verify", row("cpu_sleep", sleep_s=30))
    assert status == 200 and reply["_ng_failure_class"] == "timeout"
    assert pool.timeouts == 1 and pool._workers[0].process.pid != old_pid
    status, reply, _ = await post(http, server.url + "/verify", row("cpu_add"))
    assert status == 200 and reply["reward"] == 1.0 and reply["total"] == 5
    async with http.get(server.url + "/health") as r:
        health = await r.json()
        assert r.status == 200 and health["checks"]["cpu_pool"]["ok"] and health["checks"]["cpu_pool"]["timeouts"] == 1


async def _seed(http, url: str, tag: str) -> str:
    async with http.post(url + "/seed_session", json={**row("session"), "tag": tag}) as r:
        assert r.status == 200
        cookie = r.cookies[SESSION_COOKIE].value
        assert cookie == (await r.json())["session_id"]
        return cookie


async def test_sessions_are_isolated_and_freed_on_verify(serve, http):
    server = await serve()
    a, b = await _seed(http, server.url, "A"), await _seed(http, server.url, "B")
    assert a != b
    status, out, _ = await post(http, server.url + "/bump", {"by": 2}, headers={"Cookie": f"{SESSION_COOKIE}={a}"})
    assert (status, out) == (200, {"count": 2, "tag": "A"})
    status, out, _ = await post(http, server.url + "/bump", {"by": 5}, headers={"Cookie": f"{SESSION_COOKIE}={b}"})
    assert (status, out) == (200, {"count": 5, "tag": "B"})
    status, out, _ = await post(http, server.url + "/bump", {"by": 0}, headers={"Cookie": f"{SESSION_COOKIE}={a}"})
    assert status == 422 and out["detail"][0]["loc"] == "by"
    status, out, _ = await post(http, server.url + "/bump", {"by": 1})
    assert status == 400  # stateful tool without a session
    status, reply, _ = await post(http, server.url + "/verify", row("session", target=2),
                                  headers={"Cookie": f"{SESSION_COOKIE}={a}"})
    assert status == 200 and reply["reward"] == 1.0 and reply["count"] == 2
    status, _, _ = await post(http, server.url + "/bump", {"by": 1}, headers={"Cookie": f"{SESSION_COOKIE}={a}"})
    assert status == 410  # verify ended session A
    status, out, _ = await post(http, server.url + "/bump", {"by": 1}, headers={"X-Verigym-Session": b})
    assert out == {"count": 6, "tag": "B"}  # B untouched by A's verify


async def test_idle_sessions_expire_and_close_session_runs(serve, http):
    from verigym_external_probe.verifier import CLOSED  # imported by the registry under this name

    server = await serve(session_ttl_s=0.2)
    cookie = await _seed(http, server.url, "expiring")
    for _ in range(100):
        if any(state.get("tag") == "expiring" for state in CLOSED):
            break
        await asyncio.sleep(0.05)
    assert any(state.get("tag") == "expiring" for state in CLOSED)
    assert server.server.service.sessions.expired >= 1
    status, _, _ = await post(http, server.url + "/bump", {"by": 1}, headers={"Cookie": f"{SESSION_COOKIE}={cookie}"})
    assert status == 410


async def test_metrics_are_prometheus_text_with_counters(serve, http):
    server = await serve()
    await post(http, server.url + "/verify", row())
    await post(http, server.url + "/verify", row("raise"))
    await post(http, server.url + "/verify", row(sleep_s=-1))
    async with http.get(server.url + "/metrics") as r:
        assert r.status == 200 and r.content_type == "text/plain"
        text = await r.text()
    assert 'verigym_requests_total{env="probe",route="/verify",status="200"} 2' in text
    assert 'verigym_requests_total{env="probe",route="/verify",status="422"} 1' in text
    assert 'verigym_failures_total{env="probe",class="verifier_error"} 1' in text
    assert 'verigym_verify_seconds_count{env="probe"} 2' in text
    assert 'verigym_reward_sum{env="probe"} 1.000000' in text
    assert "# TYPE verigym_verify_seconds histogram" in text


async def test_aggregate_metrics(serve, http):
    server = await serve()
    replies = [{"_ng_task_index": 0, "reward": 1.0}, {"_ng_task_index": 0, "reward": 0.0},
               {"_ng_task_index": 1, "reward": 0.0}, {"_ng_task_index": 1, "reward": 0.0, "_ng_failure_class": "timeout"}]
    status, out, _ = await post(http, server.url + "/aggregate_metrics", {"verify_responses": replies})
    assert status == 200
    agent = out["agent_metrics"]
    assert agent["num_tasks"] == 2 and agent["num_rollouts"] == 3 and agent["failures_by_class"] == {"timeout": 1}
    # NeMo-Gym's names and scales: means over rollouts, pass@k in percent with k spelled out
    assert agent["mean/reward"] == pytest.approx(1 / 3) and agent["std/reward"] == pytest.approx(0.57735, rel=1e-4)
    assert agent["pass@1/accuracy"] == pytest.approx(25.0) and agent["pass@2/accuracy"] == pytest.approx(100.0)
    assert agent["coverage/masked_rollouts"] == 1 and agent["failures_by_kind"] == {}
    assert out["key_metrics"]["pass@2/accuracy"] == pytest.approx(100.0)
    assert [g["mean/reward"] for g in out["group_level_metrics"]] == [0.5, 0.0]
    status, _, _ = await post(http, server.url + "/aggregate_metrics", {"nope": 1})
    assert status == 422


async def test_info_and_root(serve, http):
    server = await serve()
    async with http.get(server.url + "/info") as r:
        info = await r.json()
    assert info["name"] == "probe" and info["stateful"] and info["tools"][0]["name"] == "bump"
    assert info["config"]["cpu_workers"] == 1 and "mode" in info["row_fields"]["properties"]
    async with http.get(server.url + "/") as r:
        assert await r.json() == {"status": "ok"}


def test_cpu_pool_default_size_follows_the_affinity_mask():
    """A Slurm step or a cpuset container sees every core in os.cpu_count(); the pool must size
    itself to the CPUs it may actually use (one here), not spawn a worker per host core."""
    import subprocess
    import sys

    code = ("import os; from servers.cpu_pool import CpuPool, usable_cpus; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
            "print(usable_cpus(), CpuPool(None).size, CpuPool(3).size)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.stdout.split() == ["1", "1", "3"]
