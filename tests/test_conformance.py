"""Conformance suite: every registered environment, in-process and over HTTP on loopback.

Nothing here names an environment: adding a folder under environments/ adds its cases.
"""

from __future__ import annotations

import aiohttp
import pytest

from servers import registry
from servers.app import start_server
from servers.client import EnvClient
from servers.examples import check_http, check_inprocess, example_config, load_examples
from servers.scripted_judge import example_judges
from servers.service import EnvService
from tests.podman_access import skip_unless_root_podman

ENVIRONMENTS = sorted(registry.discover())


def _examples(name: str):
    entry = registry.get(name)
    assert entry.example_path.exists(), f"{name}: data/example.jsonl is missing"
    rows = load_examples(entry.example_path)
    assert rows, f"{name}: data/example.jsonl is empty"
    return rows


def _report(results) -> str:
    return "\n".join(f"line {r.line}: {'; '.join(r.problems)}" for r in results if not r.ok)


@pytest.mark.parametrize("name", ENVIRONMENTS)
def test_folder_layout(name):
    entry = registry.get(name)
    cls = entry.load_class()
    for required in ("config.yaml", "README.md", "data/example.jsonl"):
        assert (entry.folder / required).exists(), f"{name}: {required} missing"
    assert cls.domain and cls.summary, f"{name}: declare domain and summary"
    registry.load_config(entry, cls)  # config.yaml keys all valid
    rows = _examples(name)
    outcomes = {("status" if "status" in r.get("_expected", {}) else
                 "failure" if "failure_class" in r.get("_expected", {}) else
                 "full" if r.get("_expected", {}).get("reward", 0) > 0 else "zero") for _, r in rows}
    assert {"full", "zero", "status"} <= outcomes, f"{name}: examples need full-reward, zero-reward and malformed rows"


@pytest.fixture
async def judge_overrides(name):
    """Judged environments (needs "judge"): a scripted judge answering from the folder's
    data/scripted_judge.yaml, and the config overrides pointing the environment at it.
    Container environments' rows need root's Podman (tests/podman_access.py)."""
    entry = registry.get(name)
    if "container" in getattr(entry.load_class(), "needs", ()):
        skip_unless_root_podman(f"{name}'s example rows (in instance containers)")
    async with example_judges(name, entry.load_class(), entry.folder) as overrides:
        yield {**example_config(entry.folder), **overrides}  # + data/example_config.yaml, when present


@pytest.mark.parametrize("name", ENVIRONMENTS)
async def test_examples_inprocess(name, judge_overrides):
    env = registry.instantiate(name, overrides=judge_overrides)
    service = EnvService(env)
    await service.start()
    try:
        rows = _examples(name)
        first = await check_inprocess(service, rows)
        assert all(r.ok for r in first), _report(first)
        again = await check_inprocess(service, rows)  # determinism: same rows, same rewards
        assert [r.got.get("reward") for r in first] == [r.got.get("reward") for r in again]
    finally:
        await service.stop()


@pytest.mark.parametrize("name", ENVIRONMENTS)
async def test_examples_over_http(name, judge_overrides):
    env = registry.instantiate(name, overrides=judge_overrides)
    server = await start_server(env)
    try:
        async with EnvClient({name: server.url}, retries=1) as client:
            status, info = await client.get(name, "/info")
            assert status == 200 and info["name"] == name and "row_fields" in info and "config" in info
            status, health = await client.get(name, "/health")
            assert status == 200 and health["status"] == "ok", health
            status, root = await client.get(name, "/")
            assert (status, root) == (200, {"status": "ok"})
            stateful = info["stateful"]
            results = await check_http(client, name, _examples(name), stateful)
            assert all(r.ok for r in results), _report(results)
        async with aiohttp.ClientSession() as http:
            async with http.post(server.url + "/verify", data=b"{not json",
                                 headers={"Content-Type": "application/json"}) as r:
                assert r.status == 400 and "error" in await r.json()
            async with http.post(server.url + "/verify", data=b"{}", headers={"Content-Type": "text/plain"}) as r:
                assert r.status == 415
            async with http.get(server.url + "/verify") as r:
                assert r.status == 405 and r.headers["Allow"] == "POST"
            async with http.post(server.url + "/verify", json={"response": {"output": []}}) as r:
                body = await r.json()
                assert r.status == 422 and any("responses_create_params" in d["loc"] for d in body["detail"])
            async with http.post(server.url + "/verify", json=[1, 2]) as r:
                assert r.status == 422
            # the server still serves after bad input
            async with http.get(server.url + "/health") as r:
                assert r.status == 200
    finally:
        await server.stop()
