"""A judged server is ready only when its judge's endpoint serves the configured model (issue 29).

The judge is the scripted judge run as its own process (``python -m servers.scripted_judge
--model NAME``, real HTTP, a real server's 404 for another model): before the fix, a judge URL
serving another model answered /health 200 while every /verify was judge_error.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from servers.cli_serve import ServeError, spawn_servers
from servers.judge import JudgeConfig, JudgeSet
from servers.scripted_judge import ScriptedJudge
from servers.wire import FAILURE_CLASS_KEY, response_from_text

REPO = Path(__file__).resolve().parents[2]
CONFIGURED = "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8"  # multichallenge's judge model (its config.yaml)


@pytest.fixture
def judge_serving() -> Iterator:
    """``judge_serving(*models)`` -> base_url of a scripted judge process serving those model names."""
    procs: list[subprocess.Popen] = []

    def start(*models: str) -> str:
        argv = [sys.executable, "-m", "servers.scripted_judge", "--port", "0", "--reply", "fine [[YES]]"]
        for model in models:
            argv += ["--model", model]
        proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        procs.append(proc)
        line = proc.stdout.readline()  # type: ignore[union-attr]
        match = re.search(r"(http://\S+/v1)", line)
        assert match, f"scripted judge did not start: {line!r}"
        return match.group(1)

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(30)


def rubric_row() -> dict:
    return {"responses_create_params": {"input": [{"role": "user", "content": "Plan my day."}]},
            "rubric": [{"question": "Is it a plan?", "pass_criteria": "YES"}],
            "response": response_from_text("Run, then work.")}


async def test_health_is_503_naming_the_model_while_the_judge_serves_another(serve_env, judge_serving):
    url = judge_serving("other-model", "another-model")
    client, _ = await serve_env("multichallenge", judges={"judge": {"base_url": url, "max_retries": 0}})
    status, body = await client.get("multichallenge", "/health")
    env_check = body["checks"]["environment"]
    assert status == 503 and env_check["ok"] is False
    error = env_check["error"]
    assert "\n" not in error
    assert f"model {CONFIGURED!r} is not served at {url}" in error
    assert "'other-model', 'another-model'" in error and "judges.judge.model" in error
    assert env_check["judges"]["judge"]["served_models"] == ["other-model", "another-model"]
    # What /health now says up front is what every sample would meet: never a default score.
    reply = await client.verify("multichallenge", rubric_row())
    assert reply[FAILURE_CLASS_KEY] == "judge_error" and "does not exist" in reply["_ng_failure_detail"]


async def test_health_is_200_and_the_sample_scores_when_the_configured_model_is_served(serve_env, judge_serving):
    url = judge_serving("other-model", CONFIGURED)
    client, _ = await serve_env("multichallenge", judges={"judge": {"base_url": url}})
    status, body = await client.get("multichallenge", "/health")
    assert status == 200, body
    assert body["checks"]["environment"]["judges"]["judge"]["ok"] is True
    assert (await client.verify("multichallenge", rubric_row()))["reward"] == 1.0


async def test_envs_serve_keeps_waiting_and_says_which_model_is_missing(judge_serving):
    url = judge_serving("other-model")
    with pytest.raises(ServeError) as err:
        await spawn_servers(["multichallenge"], overrides=[f"judges.judge.base_url={url}"], ready_timeout_s=10,
                            echo_output=False)
    assert f"model {CONFIGURED!r} is not served" in str(err.value) and "'other-model'" in str(err.value)


async def test_a_judge_with_a_key_is_probed_with_it(monkeypatch):
    """Hosted endpoints answer /models only with the key: the probe sends it."""
    judge = ScriptedJudge(models=("m",), strict_models=True)
    url = await judge.start()
    monkeypatch.setenv("VERIGYM_TEST_JUDGE_KEY", "sekrit")
    judges = JudgeSet({"a": JudgeConfig(base_url=url, model="m", api_key_env="VERIGYM_TEST_JUDGE_KEY"),
                       "b": JudgeConfig(base_url=url, model="absent", api_key_env="VERIGYM_TEST_JUDGE_KEY")})
    try:
        report = await judges.health(max_age_s=0)
    finally:
        await judges.close()
        await judge.stop()
    assert judge.last_authorization == "Bearer sekrit"
    assert report["a"]["ok"] is True and "error" not in report["a"]
    assert report["b"]["ok"] is False and "model 'absent' is not served" in report["b"]["error"]
