"""swe_gen, for real against Podman and swe's tiny instance image: patch grading, reproduction
tests, failure classes, no container left behind, over HTTP."""

from __future__ import annotations

import json
import subprocess
import uuid

import pytest

from environments.swe_gen.data.build_examples import BUGGY, FIXED, REPRO_GOOD, edit_answer, repro_answer, tiny_row
from environments.swe_gen.verifier import SweGenConfig, SweGenEnvironment, SweGenRow
from servers.wire import ResponseObject, response_from_text

pytestmark = pytest.mark.podman
RUN = uuid.uuid4().hex[:10]
MARK = f"VERIGYM_SWE_GEN_TEST_RUN={RUN}"


def _containers() -> list[str]:
    ids = subprocess.run(["podman", "ps", "-aq", "--filter", "label=verigym.swe.instance=tinycalc"],
                         capture_output=True, text=True).stdout.split()
    if not ids:
        return []
    found = json.loads(subprocess.run(["podman", "inspect", *ids], capture_output=True, text=True).stdout or "[]")
    return [c["Id"][:12] for c in found if MARK in (c.get("Config", {}).get("Env") or [])]


@pytest.fixture
async def make_env(swe_tiny_image):
    made: list[SweGenEnvironment] = []

    def make(**kw) -> SweGenEnvironment:
        env = SweGenEnvironment(SweGenConfig(sandbox_env={"VERIGYM_SWE_GEN_TEST_RUN": RUN}, **{"test_timeout_s": 120, **kw}))
        made.append(env)
        return env

    yield make
    for env in made:
        await env.close()
    assert _containers() == [], "swe_gen containers leaked"


async def _verify(env: SweGenEnvironment, row: dict, text: str):
    verdict = await env.verify(SweGenRow.model_validate(row), ResponseObject.model_validate(response_from_text(text)), None)
    verdict.check()
    return verdict


async def test_patch_and_repro_grading(make_env):
    env = make_env()
    full = await _verify(env, tiny_row("eval"), edit_answer(BUGGY.rstrip("\n"), FIXED.rstrip("\n")))
    assert full.reward == 1.0 and full.extras["resolution"] == "RESOLVED_FULL" and full.extras["apply_method"] == "git apply"
    assert full.extras["verification_result"] == {"status": "done", "resolution": "RESOLVED_FULL"}
    assert full.extras["model_patch"].startswith("diff --git a/tinycalc/stats.py b/tinycalc/stats.py")
    good = await _verify(env, tiny_row("repro-gen"), repro_answer(REPRO_GOOD))
    assert good.reward == 1.0 and "issue reproduced" in good.extras["output_before"] and "issue solved" in good.extras["output_after"]
    # A test that only prints what the old log-based check looked for gets nothing: exit codes decide.
    spoof = await _verify(env, tiny_row("repro-gen"),
                          repro_answer("print('reproduction test status:2')\nprint('reproduction test status:0')\nsys.exit(1)"))
    assert spoof.reward == 0.0 and spoof.extras["return_codes_before_patch"] == [1, 1]  # two runs (repro_guard)


async def test_warm_pool_reuses_clean_containers(make_env):
    env = make_env(warm_pool_size=1)
    right = edit_answer(BUGGY.rstrip("\n"), FIXED.rstrip("\n"))
    wrong = edit_answer(BUGGY.rstrip("\n"), "    return total(values) / (len(values) - 1)")
    # A reused container must not keep the previous grade's patch: right, wrong, right again.
    rewards = [(await _verify(env, tiny_row("eval"), text)).reward for text in (right, wrong, right)]
    assert rewards == [1.0, 0.0, 1.0]
    assert (await env.health())["warm_pools"]["verigym-swe-tiny:latest"]["total"] >= 1


async def test_failures_carry_a_class(make_env):
    slow_row = tiny_row("eval")
    slow_row["instance"]["test_script"] = "#!/bin/bash\nsleep 60\n"
    slow = await _verify(make_env(test_timeout_s=3), slow_row, edit_answer(BUGGY.rstrip("\n"), FIXED.rstrip("\n")))
    assert slow.failure_class == "timeout" and slow.extras["patch_applied"] is True
    bad_gold = tiny_row("repro-gen")
    bad_gold["instance"]["patch"] = bad_gold["instance"]["patch"].replace("(len(values) + 1)", "(len(values) + 7)")
    broken = await _verify(make_env(), bad_gold, repro_answer(REPRO_GOOD))
    assert broken.failure_class == "verifier_error" and "gold patch" in broken.failure_detail
    missing = tiny_row("eval")
    missing["metadata"]["image"] = "localhost/verigym-no-such-image:1"
    absent = await _verify(make_env(), missing, edit_answer(BUGGY.rstrip("\n"), FIXED.rstrip("\n")))
    assert absent.failure_class == "sandbox_error" and "no-such-image" in absent.failure_detail
    # The model's own test hanging is the test's fault: reward 0, not a failure class.
    hang = await _verify(make_env(repro_timeout_s=2), tiny_row("repro-gen"), repro_answer("import time\ntime.sleep(60)"))
    assert hang.failure_class is None and hang.reward == 0.0 and hang.extras["verdict_before"] == ["timeout", "timeout"]


async def test_over_http(serve_env, swe_tiny_image):
    client, _ = await serve_env("swe_gen", sandbox_env={"VERIGYM_SWE_GEN_TEST_RUN": RUN}, test_timeout_s=120)
    reply = await client.verify("swe_gen", tiny_row("eval"),
                                response_from_text(edit_answer(BUGGY.rstrip("\n"), "    return total(values) / (len(values) - 1)")))
    assert reply["reward"] == 0.0 and reply["resolution"] == "RESOLVED_NO" and reply["mode"] == "eval"
    assert reply["tests_status"]["PASS_TO_PASS"]["tests/test_stats.py::StatsTest::test_total"] == "PASSED"


async def test_prepare_pulls_what_rows_need(swe_tiny_image, capsys):
    summary = await SweGenEnvironment.prepare(SweGenConfig(), [tiny_row("eval"), tiny_row("repro-gen"), {"not": "a row"}])
    assert summary["images"] == 1 and summary["present"] == 1 and summary["invalid_rows"] == 1
    gym_row = tiny_row("eval")
    gym_row["metadata"]["image"] = "/swebench-images/verigym_no-such-image.sif"  # -> docker ref verigym/no-such-image
    no_image = tiny_row("eval")
    no_image["metadata"]["image"] = None
    offline = SweGenConfig(registries=["localhost:1"], pull_timeout_s=30)
    with pytest.raises(SystemExit, match="envs prepare swe_gen"):
        await SweGenEnvironment.prepare(offline, [gym_row, no_image])
    err = capsys.readouterr().err
    assert "localhost:1/verigym/no-such-image" in err and "row 2" in err


async def test_a_reproduction_run_whose_output_the_runtime_lost_is_graded_by_its_exit_code(make_env, monkeypatch):
    # Output lost between the program and us, exit code right (stand-in: the frames of every run
    # of the model's test are read and dropped): LostOutputError. The grade needs only the codes.
    import docker

    from sandboxes import exec_stream

    real_create, real_frames, tests = docker.APIClient.exec_create, exec_stream.AttachedExec.frames, set()

    def create(self, container, cmd, *args, **kwargs):  # type: ignore[no-untyped-def]
        made = real_create(self, container, cmd, *args, **kwargs)
        if any("reproduce_bug" in str(part) for part in cmd):
            tests.add(made["Id"])
        return made

    def frames(self):  # type: ignore[no-untyped-def]
        if self.exec_id not in tests:
            return real_frames(self)
        for _ in real_frames(self):
            pass
        return iter(())

    monkeypatch.setattr(docker.APIClient, "exec_create", create)
    monkeypatch.setattr(exec_stream.AttachedExec, "frames", frames)
    good = await _verify(make_env(), tiny_row("repro-gen"), repro_answer(REPRO_GOOD))
    assert len(tests) == 4 and good.reward == 1.0, (tests, good.failure_detail, good.extras)
    assert good.extras["return_codes_before_patch"] == [2, 2] and good.extras["return_codes_after_patch"] == [0, 0]
    assert "output was lost" in good.extras["output_after"]
