"""equivalence_llm_judge (and the shared equivalence flow) against a scripted judge over real HTTP:
the NeMo-Gym passes (first, swap, full-generation rescue, length threshold), verdict parsing,
and judge failures as failure classes."""

from __future__ import annotations

import asyncio

import pytest

from environments.equivalence_llm_judge.equivalence import EquivalenceSettings, extract_last
from servers.client import EnvClientError
from servers.scripted_judge import Rule, ScriptedJudge
from servers.wire import response_from_text

FAST = {"timeout_s": 1.0, "max_retries": 1, "backoff_s": 0.01, "backoff_max_s": 0.02, "breaker_reset_s": 0.1}


def fenced(text: str) -> str:
    """How a response's text sits in a guarded judge prompt: alone on its lines, before the closing marker."""
    return f"\n{text}\n<<<END RESPONSE "


def row(question: str, expected: str, **extra) -> dict:
    return {"responses_create_params": {"input": [{"role": "user", "content": question}]},
            "expected_answer": expected, **extra}


@pytest.fixture
async def judge():
    j = ScriptedJudge(default_reply="no rule matched")
    await j.start()
    yield j
    await j.stop()


async def serve(serve_env, judge: ScriptedJudge, name: str = "equivalence_llm_judge", **overrides):
    client, env = await serve_env(name, judges={"judge": {"base_url": judge.url, **FAST}}, **overrides)
    return client, env


def test_extraction_is_nemo_gyms():
    assert extract_last("a \\boxed{1} then \\boxed{2}", r"\\boxed\{(.*?)\}") == "2"  # the last match
    assert extract_last("Answer: x", r"Answer:\s*(.*)$|Final:\s*(.*)$") == "x"  # first non-empty group
    assert extract_last("no match here", r"<a>(.*)</a>") == "no match here"  # no match: the whole text
    assert extract_last("  padded  ", None) == "padded"


def test_settings_reject_bad_templates_and_labels():
    with pytest.raises(ValueError, match="placeholders|only"):
        EquivalenceSettings(judge_prompt_template="{question} {answer}")
    with pytest.raises(ValueError, match="must differ"):
        EquivalenceSettings(judge_equal_label="X", judge_not_equal_label="X")
    with pytest.raises(ValueError, match="regular expression"):
        EquivalenceSettings(response_extract_regex="(unclosed")


async def test_swap_check_asks_twice_with_answers_swapped(serve_env, judge):
    # The response is fenced (servers/judge/untrusted.py) in whichever slot it takes; the gold is not.
    judge.rules = [Rule(("GOLD:\nParis\n", "CANDIDATE:\n<<<RESPONSE ", fenced("paris, France")), "same city [[A=B]]"),
                   Rule(("GOLD:\n<<<RESPONSE ", fenced("paris, France"), "CANDIDATE:\nParis"),
                        "the gold has a country [[A!=B]]")]
    client, _ = await serve(serve_env, judge, check_twice_swap=True, reward_if_swap_fails=-1.0)
    reply = await client.verify("equivalence_llm_judge", row("Capital of France?", "Paris"),
                                response_from_text("paris, France"))
    assert reply["reward"] == -1.0
    assert [(e["pass"], e["equal"]) for e in reply["judge_evaluations"]] == [("first", True), ("swap", False)]
    assert judge.answered == 2


async def test_not_equal_skips_the_swap(serve_env, judge):
    judge.rules = [Rule(("GOLD:\nParis\n",), "[[A!=B]]")]
    client, _ = await serve(serve_env, judge, check_twice_swap=True)
    reply = await client.verify("equivalence_llm_judge", row("Capital?", "Paris"), response_from_text("Lyon"))
    assert reply["reward"] == 0.0 and len(reply["judge_evaluations"]) == 1 and judge.answered == 1


async def test_per_record_regex_and_full_generation_rescue(serve_env, judge):
    # the regex cuts "**Lyon**" (wrong); the whole text also says Paris: the rescue pass gives partial credit
    judge.rules = [Rule((fenced("Lyon"),), "[[A!=B]]"), Rule((fenced("Not Lyon but Paris; **Lyon**"),), "[[A=B]]")]
    client, _ = await serve(serve_env, judge, check_full_generation_on_fail=True,
                            reward_if_full_generation_succeeds=0.5)
    r = row("Capital?", "Paris", template_metadata={"output_regex": r"\*\*(.*?)\*\*"})
    reply = await client.verify("equivalence_llm_judge", r, response_from_text("Not Lyon but Paris; **Lyon**"))
    assert reply["extracted_answer"] == "Lyon"
    assert reply["reward"] == 0.5
    assert [e["pass"] for e in reply["judge_evaluations"]] == ["first", "full_generation"]


async def test_long_reference_skips_regex_and_second_pass(serve_env, judge):
    judge.rules = [Rule((fenced("intro **short** outro"),), "[[A!=B]]")]
    client, _ = await serve(serve_env, judge, extraction_length_threshold=10, check_full_generation_on_fail=True,
                            reward_if_full_generation_succeeds=0.5)
    r = row("Explain.", "a reference longer than ten characters", template_metadata={"output_regex": r"\*\*(.*?)\*\*"})
    reply = await client.verify("equivalence_llm_judge", r, response_from_text("intro **short** outro"))
    assert reply["extracted_answer"] == "intro **short** outro" and reply["reward"] == 0.0
    assert len(reply["judge_evaluations"]) == 1


async def test_configurable_prompt_labels_and_question_regex(serve_env, judge):
    judge.rules = [Rule(("Q=What is 2+2?|E=4|G=<<<RESPONSE ", fenced("four")), "verdict: CORRECT")]
    client, _ = await serve(serve_env, judge, judge_prompt_template="Q={question}|E={expected_answer}|G={generated_answer}",
                            judge_equal_label="CORRECT", judge_not_equal_label="INCORRECT",
                            question_extract_regex=r"^QUESTION:\s*(.*)$", judge_system_message="be strict")
    reply = await client.verify("equivalence_llm_judge", row("context...\nQUESTION: What is 2+2?", "4"),
                                response_from_text("four"))
    assert reply["reward"] == 1.0 and reply["judge_evaluations"][0]["verdict_label"] == "CORRECT"
    judge.rules = [Rule((fenced("five"),), "It is INCORRECT")]  # CORRECT inside INCORRECT is not a CORRECT
    reply = await client.verify("equivalence_llm_judge", row("QUESTION: What is 2+2?", "4"), response_from_text("five"))
    assert reply["reward"] == 0.0


async def test_judge_garbage_down_and_slow_are_failure_classes(serve_env, judge):
    client, _ = await serve(serve_env, judge)
    r, resp = row("Capital?", "Paris"), response_from_text("Paris")
    judge.garbage = True  # 200 with no label, on every ask
    reply = await client.verify("equivalence_llm_judge", r, resp)
    assert reply["_ng_failure_class"] == "judge_error" and reply["instance_config"]["mask_sample"] is True
    assert judge.answered == 2  # asked again once (parse_retries 1), then judge_error
    judge.garbage = False
    judge.stall_s = 3.0  # past the 1 s deadline, retried once
    reply = await client.verify("equivalence_llm_judge", r, resp)
    assert reply["_ng_failure_class"] == "judge_error" and "timeout" in reply["_ng_failure_detail"]
    judge.stall_s = 0.0
    await judge.stop()  # down: connection errors
    replies = await asyncio.gather(*(client.verify("equivalence_llm_judge", r, resp) for _ in range(8)))
    assert all(x["_ng_failure_class"] == "judge_error" for x in replies) and len(replies) == 8
    assert all(x["reward"] == 0.0 for x in replies)
    await judge.start()  # back on the same port: the server scores again (after the breaker's probe)
    judge.rules = [Rule(("GOLD:\nParis\n",), "[[A=B]]")]
    await asyncio.sleep(0.2)  # breaker_reset_s: then one probe call decides
    reply = await client.verify("equivalence_llm_judge", r, resp)
    assert reply["reward"] == 1.0 and "_ng_failure_class" not in reply


async def test_cache_answers_repeated_responses(serve_env, judge):
    judge.rules = [Rule(("GOLD:\nParis\n",), "[[A=B]]")]
    client, _ = await serve(serve_env, judge)
    replies = [await client.verify("equivalence_llm_judge", row("Capital?", "Paris"), response_from_text("Paris"))
               for _ in range(3)]
    assert [r["judge_evaluations"][0]["cached"] for r in replies] == [False, True, True]
    assert judge.answered == 1


async def test_bad_rows_are_422(serve_env, judge):
    client, _ = await serve(serve_env, judge)
    for bad, field in ((row("q", ""), "expected_answer"),
                       (row("q", "x", template_metadata={"output_regex": "(unclosed"}), "output_regex"),
                       ({"responses_create_params": {"input": "q"}}, "expected_answer")):
        with pytest.raises(EnvClientError) as err:
            await client.verify("equivalence_llm_judge", bad, response_from_text("x"))
        assert err.value.status == 422 and field in str(err.value)
    assert judge.requests == 0
