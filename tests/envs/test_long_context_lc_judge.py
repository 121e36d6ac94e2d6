"""long_context's lc_judge mode against a scripted judge over HTTP: which rows are judged, the
question extraction, CORRECT/INCORRECT, judge failures; rule-scored rows never touch the judge."""

from __future__ import annotations

import pytest

from servers.client import EnvClientError
from servers.scripted_judge import Rule, ScriptedJudge
from servers.wire import response_from_text

DOC = "<text>\nThe bridge opened in 1932 after six years of work.\n</text>\n\nWhen did the bridge open?"
LC_ROW = {"responses_create_params": {"input": [{"role": "user", "content": DOC}]}, "expected_answer": "1932",
          "agent_ref": {"type": "responses_api_agents", "name": "lc_judge_simple_agent"}}
RULER_ROW = {"responses_create_params": {"input": [{"role": "user", "content": "Find the magic number."}]},
             "outputs": ["4242"]}


@pytest.fixture
async def judge():
    j = ScriptedJudge([Rule(("The question, for reference only: When did the bridge open?",
                             "The OFFICIAL ANSWER: 1932", "CANDIDATE ANSWER TO ASSESS: <<<RESPONSE ", "\nin 1932\n<<<END RESPONSE "), "CORRECT"),
                       Rule(("\nin 1931\n<<<END RESPONSE ",), "INCORRECT")], default_reply="unsure")
    await j.start()
    yield j
    await j.stop()


async def test_lc_judge_rows_are_judged(serve_env, judge):
    client, _ = await serve_env("long_context", judges={"judge": {"base_url": judge.url}})
    reply = await client.verify("long_context", LC_ROW, response_from_text("in 1932"))
    assert reply["reward"] == 1.0 and reply["metric"] == "judge"
    assert reply["judge_evaluations"][0]["verdict_label"] == "CORRECT"
    # INCORRECT contains CORRECT: the longer label wins there
    reply = await client.verify("long_context", {**LC_ROW, "agent_ref": None, "metric": "judge"},
                                response_from_text("in 1931"))
    assert reply["reward"] == 0.0 and reply["judge_evaluations"][0]["verdict_label"] == "INCORRECT"


async def test_rule_rows_never_call_the_judge_and_health_stays_up(serve_env, judge):
    client, _ = await serve_env("long_context", judges={"judge": {"base_url": judge.url, "max_retries": 0}})
    await judge.stop()
    status, health = await client.get("long_context", "/health")
    assert status == 200 and health["checks"]["environment"]["judges"]["judge"]["ok"] is False  # judge_health: report
    reply = await client.verify("long_context", RULER_ROW, response_from_text("It is 4242."))
    assert reply["reward"] == 1.0 and reply["metric"] == "string_match_all"
    reply = await client.verify("long_context", LC_ROW, response_from_text("in 1932"))
    assert reply["_ng_failure_class"] == "judge_error" and reply["instance_config"]["mask_sample"] is True
    assert judge.requests == 0


async def test_free_text_answer_outside_judge_mode_is_422(serve_env, judge):
    client, _ = await serve_env("long_context", judges={"judge": {"base_url": judge.url}})
    with pytest.raises(EnvClientError) as err:
        await client.verify("long_context", {**LC_ROW, "agent_ref": None}, response_from_text("1932"))
    assert err.value.status == 422 and "lc_judge" in str(err.value)
    with pytest.raises(EnvClientError) as err:
        await client.verify("long_context", {**LC_ROW, "expected_answer": " "}, response_from_text("1932"))
    assert err.value.status == 422
