"""swe, for real against Podman: grading the tiny instance image, agent sessions, leaks, prepare.

The module fixture runs ``scripts/ci_podman.sh`` (idempotent) and the tiny image's build
script (which builds the sandbox layer's base test image first when missing; seconds once
it exists). Skips only when podman is not installed, like tests/sandboxes/test_container.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest

from environments.swe.data.build_examples import patches
from environments.swe.models import SweConfig, SweRow
from environments.swe.verifier import SweEnvironment
from servers.app import start_server
from servers.client import EnvClient
from servers.service import EnvService
from servers.wire import ResponseObject, response_from_text

pytestmark = pytest.mark.podman
ROOT = Path(__file__).resolve().parents[2]
IMAGE = "verigym-swe-tiny:latest"
ROWS = [json.loads(line) for line in (ROOT / "environments/swe/data/tiny_rows.jsonl").read_text().splitlines()]
PYTEST_ROW, UNITTEST_ROW = ROWS
PATCHES = patches()


RUN = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
MARK = f"VERIGYM_SWE_TEST_RUN={RUN}"  # set in every sandbox of this module: others' runs are not ours


def _containers() -> list[str]:
    """This module's containers: tiny-image ones (label inherited) carrying this run's mark."""
    ids = subprocess.run(["podman", "ps", "-aq", "--filter", "label=verigym.swe.instance=tinycalc"],
                         capture_output=True, text=True).stdout.split()
    if not ids:
        return []
    inspected = subprocess.run(["podman", "inspect", *ids], capture_output=True, text=True).stdout
    try:
        found = json.loads(inspected or "[]")
    except json.JSONDecodeError:  # a container removed between ps and inspect: ask again
        return _containers()
    return [c["Id"][:12] for c in found if MARK in (c.get("Config", {}).get("Env") or [])]


def _cfg(**kw) -> SweConfig:
    return SweConfig(sandbox_env={"VERIGYM_SWE_TEST_RUN": RUN}, **{"test_timeout_s": 60, **kw})


@pytest.fixture(scope="module")
def podman_image(swe_tiny_image):
    yield swe_tiny_image
    assert _containers() == [], "swe containers leaked"


@pytest.fixture
async def env(podman_image):
    e = SweEnvironment(_cfg())
    yield e
    await e.close()


def _fenced(patch: str) -> ResponseObject:
    return ResponseObject.model_validate(response_from_text(f"```diff\n{patch}```"))


async def _grade(env, row, patch):
    verdict = await env.verify(SweRow.model_validate(row), _fenced(patch), None)
    verdict.check()
    return verdict


async def test_grading_outcomes(env):
    gold = await _grade(env, PYTEST_ROW, PATCHES["gold"])
    assert gold.reward == 1.0 and gold.failure_class is None and gold.extras["resolved"] is True
    assert gold.extras["tests_status"]["PASS_TO_PASS"] == {"tests/test_stats.py::StatsTest::test_total": "PASSED",
                                                           "tests/test_stats.py::StatsTest::test_mean_empty": "PASSED"}
    wrong = await _grade(env, PYTEST_ROW, PATCHES["wrong"])
    assert wrong.reward == 0.0 and wrong.failure_class is None and wrong.extras["patch_applied"] is True
    assert wrong.extras["tests_status"]["FAIL_TO_PASS"] == {"tests/test_stats.py::StatsTest::test_mean": "FAILED"}
    cheat = await _grade(env, PYTEST_ROW, PATCHES["edits_tests"])  # would pass its own edited test_mean
    assert cheat.reward == 0.0 and cheat.extras["patch_applied"] and not cheat.extras["resolved"]
    assert cheat.extras["tests_status"]["FAIL_TO_PASS"]["tests/test_stats.py::StatsTest::test_mean"] == "FAILED"
    stale = await _grade(env, PYTEST_ROW, PATCHES["stale"])
    assert stale.reward == 0.0 and stale.failure_class is None and stale.extras["patch_applied"] is False
    assert "does not apply" in stale.extras["reason"] and stale.extras["apply_log"]
    unit = await _grade(env, UNITTEST_ROW, PATCHES["gold"])
    assert unit.reward == 1.0 and unit.extras["tests_status"]["FAIL_TO_PASS"] == {
        "test_mean (tests.test_stats.StatsTest)": "PASSED"}
    assert _containers() == []  # every grading container removed


async def test_fuzzy_patch_is_applied_by_patch_fallback(env):
    # Line numbers off by 3 and no index line: git apply refuses, patch --fuzz applies.
    shifted = PATCHES["gold"].replace("@@ -8,4 +8,4 @@", "@@ -11,4 +11,4 @@").replace("index 8352598..27d7ba4 100644\n", "")
    fuzzy = shifted.replace(' raise ValueError("mean of an empty list")', ' raise ValueError("mean of an empty list!")', 1)
    verdict = await _grade(env, PYTEST_ROW, fuzzy)
    assert verdict.extras["apply_method"] == "patch --fuzz" and verdict.reward == 1.0


async def test_infrastructure_failures_carry_a_class(podman_image):
    env = SweEnvironment(_cfg(test_timeout_s=3))
    try:
        slow = PATCHES["gold"].replace("+    return total(values) / len(values)\n",
                                       "+    import time; time.sleep(60)\n+    return total(values) / len(values)\n")
        slow = slow.replace("@@ -8,4 +8,4 @@", "@@ -8,4 +8,5 @@")
        verdict = await _grade(env, PYTEST_ROW, slow)
        assert verdict.failure_class == "timeout" and verdict.extras["patch_applied"] is True
        missing = await _grade(env, {**PYTEST_ROW, "image": "localhost/verigym-no-such-image:1"}, PATCHES["gold"])
        assert missing.failure_class == "sandbox_error" and "envs prepare swe" in missing.failure_detail
        wrong_base = await _grade(env, {**PYTEST_ROW, "base_commit": "0" * 40}, PATCHES["gold"])
        assert wrong_base.failure_class == "verifier_error" and "test_patch does not apply" in wrong_base.failure_detail
    finally:
        await env.close()


async def test_warm_pool_start_overhead(podman_image):
    env = SweEnvironment(_cfg(warm_pool_size=1))
    try:
        first = await _grade(env, PYTEST_ROW, PATCHES["gold"])
        second = await _grade(env, PYTEST_ROW, PATCHES["wrong"])
        assert (first.reward, second.reward) == (1.0, 0.0)
        assert second.extras["timings"]["start_s"] < 1.0  # a pooled container: no start on the path
    finally:
        await env.close()
    await asyncio.sleep(0.5)


async def _agent_session(client, row, steps):
    session = await client.seed_session("swe", row)
    outputs = []
    for name, args in steps:
        status, out = await client.call_tool(session, name, args)
        assert status == 200, out
        outputs.append(out)
    reply = await client.verify("swe", row, response_from_text("done"), session=session)
    return outputs, reply


async def test_agent_session_over_http(podman_image):
    server = await start_server(SweEnvironment(_cfg()))
    try:
        async with EnvClient({"swe": server.url}, retries=0) as client:
            outs, reply = await _agent_session(client, UNITTEST_ROW, [
                ("exec", {"command": "python3 -m unittest tests.test_stats 2>&1 | tail -1; pwd"}),
                ("read_file", {"path": "tinycalc/stats.py", "start_line": 8, "end_line": 9}),
                ("str_replace", {"path": "tinycalc/stats.py", "old_str": "(len(values) + 1)", "new_str": "len(values)"}),
                ("write_file", {"path": "tests/test_extra.py", "content": "def test_x():\n    assert True\n"}),
                ("exec", {"command": "sleep 5", "timeout_s": 1}),
                ("submit", {}),
            ])
            assert outs[0]["stdout"] == "OK\n/testbed\n" and outs[0]["exit_code"] == 0
            assert outs[1]["content"] == 'def mean(values):\n    if not values:\n'
            assert outs[2] == {"path": "/testbed/tinycalc/stats.py", "replaced_at_line": 11}
            assert outs[4]["killed"] == "timeout"
            assert reply["reward"] == 1.0 and reply["patch_source"] == "session diff"
            assert "tests/test_extra.py" in reply["model_patch"]  # new files are part of the diff
            # Tool errors come back as data; a cheat through the tools (editing the test) still fails.
            outs, reply = await _agent_session(client, PYTEST_ROW, [
                ("str_replace", {"path": "tinycalc/stats.py", "old_str": "not in the file", "new_str": "x"}),
                ("write_file", {"path": "tests/test_stats.py", "content": "def test_mean():\n    pass\n"}),
            ])
            assert "occurs 0 times" in outs[0]["error"]
            assert reply["reward"] == 0.0 and reply["patch_applied"] is True and reply["resolved"] is False
        assert len(server.server.service.sessions) == 0
    finally:
        await server.stop()
    assert _containers() == []


async def test_sessions_expire_and_never_leak(podman_image):
    """1,000 sessions seeded and verified (lazy: no container unless a tool runs), plus 8
    sessions with containers: 4 verified, 4 left to expire. No container may remain.
    1,000 sessions each with its own container would take ~15 min on this 2-core host."""
    env = SweEnvironment(_cfg(session_ttl_s=8.0))
    service = EnvService(env)
    await service.start()
    try:
        async def lazy() -> float:
            _, _, sid = await service.seed_session(PYTEST_ROW)
            status, reply = await service.verify({**PYTEST_ROW, "response": response_from_text("no idea")}, sid)
            assert status == 200
            return reply["reward"]
        assert await asyncio.gather(*(lazy() for _ in range(1000))) == [0.0] * 1000
        sids = []
        for _ in range(8):
            _, _, sid = await service.seed_session(PYTEST_ROW)
            status, out = await service.call_tool("exec", {"command": "true"}, sid)
            assert status == 200 and out["exit_code"] == 0, out
            sids.append(sid)
        assert len(_containers()) == 8
        for sid in sids[:4]:
            status, reply = await service.verify({**PYTEST_ROW, "response": response_from_text("no")}, sid)
            assert status == 200 and reply["reward"] == 0.0  # no changes: nothing to grade
        for _ in range(300):  # expiry: ttl 8 s, swept every 2 s
            if len(service.sessions) == 0 and not _containers():
                break
            await asyncio.sleep(0.1)
        assert len(service.sessions) == 0 and service.sessions.expired >= 4
        assert _containers() == []
    finally:
        await service.stop()


class _Progress:
    def __init__(self):
        self.n, self.notes = 0, []

    def update(self, n):
        self.n += n

    def set_postfix_str(self, text):
        self.notes.append(text)


async def test_prepare_reports_images(podman_image, capsys):
    progress = _Progress()
    summary = await SweEnvironment.prepare(SweConfig(), ROWS, progress)
    assert summary["images"] == 1 and summary["present"] == 1 and progress.n == 2 and summary["free_disk_gb"] > 0
    unreachable = {**PYTEST_ROW, "instance_id": "x__y-1", "image": None}
    cfg = SweConfig(registries=["localhost:1"], image_template="verigym/{instance_id}:1", pull_timeout_s=30)
    with pytest.raises(SystemExit, match="1 image"):
        await SweEnvironment.prepare(cfg, [*ROWS, unreachable, {"not": "a row"}], _Progress())
    assert "localhost:1/verigym/x__y-1:1" in capsys.readouterr().err
    full_disk = SweConfig(image_template="verigym/{instance_id}:1", min_free_disk_gb=1e9)
    with pytest.raises(SystemExit):
        await SweEnvironment.prepare(full_disk, [unreachable], _Progress())
    assert "GiB free" in capsys.readouterr().err


async def test_str_replace_reads_the_file_again_when_the_runtime_lost_its_output(podman_image, monkeypatch):
    # An exec whose output was lost on the way is LostOutputError (tests/sandboxes/test_container.py
    # has the stand-in): reading a file is safe to repeat, so the tool still edits the right line.
    from environments.swe import agent
    from sandboxes import SandboxSpec, exec_stream, open_backend

    backend = open_backend("container")
    real_frames, losses = exec_stream.AttachedExec.frames, []

    def loses_the_first(self):  # type: ignore[no-untyped-def]
        if losses:
            return real_frames(self)
        losses.append(self.exec_id)
        for _ in real_frames(self):
            pass
        return iter(())

    try:
        async with await backend.create(SandboxSpec(image=IMAGE, env={"VERIGYM_SWE_TEST_RUN": RUN})) as sb:
            monkeypatch.setattr(exec_stream.AttachedExec, "frames", loses_the_first)
            args = agent.StrReplaceArgs(path="tinycalc/stats.py", old_str="(len(values) + 1)", new_str="len(values)")
            assert await agent.str_replace(sb, "/testbed", args) == {"path": "/testbed/tinycalc/stats.py",
                                                                     "replaced_at_line": 11}
            assert losses and "len(values)\n" in (await sb.exec(["cat", "/testbed/tinycalc/stats.py"])).text()
    finally:
        await backend.close()
