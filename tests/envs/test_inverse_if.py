"""inverse_if against a scripted judge over HTTP: the task's own template and system prompt, the
config fallbacks, verdict parsing, aggregation, and judge failures as failure classes."""

from __future__ import annotations

import pytest

from environments.inverse_if.verifier import parse_verdict
from servers.client import EnvClientError
from servers.scripted_judge import Rule, ScriptedJudge
from servers.wire import response_from_text

ROW = {"responses_create_params": {"input": [{"role": "user", "content": "Answer 2+2 in Roman numerals."}]},
       "rubric": [{"id": "C1", "criteria": "Is it four?"}, {"id": "C2", "criteria": "Roman numerals?"}],
       "reference_response": "IV",
       "judge_prompt_template": "Q:{prompt}|R:{model_response}|S:{standard_response}|C:{criteria}",
       "judge_system_prompt": "task system prompt"}


@pytest.mark.parametrize("text,verdict", [
    ('```json\n{"result": "PASS", "explanation": "ok"}\n```', ("PASS", "ok")),
    ('reasoning... {"result": "fail", "explanation": "no"} done', ("FAIL", "no")),
    ("Looks right.\n\n**PASS**", ("PASS", "")),
    ("I would FAIL this... no, on reflection it should PASS", ("PASS", "")),
    ("The passage is fine; no verdict here.", None),  # PASSAGE is not PASS
    ('```json\n{"result": "MAYBE"}\n```', None),
])
def test_parse_verdict(text, verdict):
    assert parse_verdict(text) == verdict


@pytest.fixture
async def judge():
    j = ScriptedJudge(default_reply="no rule")
    await j.start()
    yield j
    await j.stop()


async def test_task_template_and_system_prompt_reach_the_judge(serve_env, judge):
    judge.rules = [Rule(("Q:Answer 2+2 in Roman numerals.|R:<<<RESPONSE ", "\nIV\n<<<END RESPONSE ", ">>>|S:IV|C:Is it four?"),
                        '{"result": "PASS"}'),
                   Rule(("|C:Roman numerals?",), '{"result": "FAIL", "explanation": "digits"}')]
    client, _ = await serve_env("inverse_if", judges={"judge": {"base_url": judge.url}}, aggregation="mean")
    reply = await client.verify("inverse_if", ROW, response_from_text("IV"))
    assert reply["reward"] == 0.5 and reply["num_passed"] == 1 and reply["num_total"] == 2
    assert [e["verdict"] for e in reply["rubric_evaluations"]] == ["PASS", "FAIL"]
    assert reply["rubric_evaluations"][1]["explanation"] == "digits"
    client2, _ = await serve_env("inverse_if", judges={"judge": {"base_url": judge.url}}, aggregation="all")
    assert (await client2.verify("inverse_if", ROW, response_from_text("IV")))["reward"] == 0.0


async def test_config_fallbacks_for_tasks_without_prompts(serve_env, judge):
    judge.rules = [Rule(("## Student Response\n<<<RESPONSE ", "\nIV\n<<<END RESPONSE ", "## Evaluation Criteria\nIs it four?"), "PASS"),
                   Rule(("## Evaluation Criteria\nRoman numerals?",), "PASS")]
    client, _ = await serve_env("inverse_if", judges={"judge": {"base_url": judge.url}})
    row = {k: v for k, v in ROW.items() if k not in ("judge_prompt_template", "judge_system_prompt")}
    reply = await client.verify("inverse_if", row, response_from_text("IV"))
    assert reply["reward"] == 1.0
    assert "## Question\nAnswer 2+2 in Roman numerals." in judge.prompts[0]  # no 'prompt' field: the user message


async def test_one_failed_criterion_fails_the_sample(serve_env, judge):
    judge.rules = [Rule(("|C:Is it four?",), '{"result": "PASS"}')]  # C2 gets "no rule": no verdict
    client, _ = await serve_env("inverse_if", judges={"judge": {"base_url": judge.url, "max_retries": 0}})
    reply = await client.verify("inverse_if", ROW, response_from_text("IV"))
    assert reply["_ng_failure_class"] == "judge_error" and reply["instance_config"]["mask_sample"] is True
    judge.rules = [Rule((), '{"result": "PASS"}')]
    judge.fail_next.extend([503])  # one 503 on the first call: retried, then scored
    client, _ = await serve_env("inverse_if", judges={"judge": {"base_url": judge.url, "max_retries": 1,
                                                                "backoff_s": 0.01}})
    reply = await client.verify("inverse_if", ROW, response_from_text("IV"))
    assert reply["reward"] == 1.0


async def test_bad_rows_are_422(serve_env, judge):
    client, _ = await serve_env("inverse_if", judges={"judge": {"base_url": judge.url}})
    for bad, field in (({**ROW, "rubric": []}, "rubric"), ({**ROW, "judge_prompt_template": "{answer}"}, "template")):
        with pytest.raises(EnvClientError) as err:
            await client.verify("inverse_if", bad, response_from_text("IV"))
        assert err.value.status == 422 and field in str(err.value)
    assert judge.requests == 0
