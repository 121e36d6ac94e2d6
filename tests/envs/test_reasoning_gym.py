"""reasoning_gym: extraction rules, the library's scorers, task validation, generation."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from environments.reasoning_gym.scoring import answer_line, answer_tag, extract_answer, last_boxed, score_entry
from environments.reasoning_gym.verifier import ReasoningGymEnvironment, RGRow
from servers import registry
from servers.wire import ResponseObject, response_from_text


@pytest.mark.parametrize("fn, text, expected", [
    (answer_tag, "<answer>1</answer> then <answer> 2 </answer>", "2"),
    (answer_tag, "<answer>multi\nline</answer>", "multi\nline"),
    (answer_tag, "no tags", None),
    (last_boxed, "\\boxed{a} \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
    (last_boxed, "\\boxed{unclosed", None),
    (answer_line, "Answer: 5\nFinal answer: 6.", "6"),
    (answer_line, "the answer is 5", None),
])
def test_extraction_rules(fn, text, expected):
    assert fn(text) == expected


def test_extraction_order_is_configurable():
    text = "Answer: 3\n\\boxed{4}\n<answer>5</answer>"
    assert extract_answer(text, ["answer_tag", "boxed"]) == ("5", "answer_tag")
    assert extract_answer(text, ["boxed", "answer_tag"]) == ("4", "boxed")
    assert extract_answer("plain", ["answer_tag", "full_text"]) == ("plain", "full_text")
    assert extract_answer("plain", ["answer_tag"]) == (None, "none")


def _rows(tasks, size=6, seed=1, **options):
    return list(ReasoningGymEnvironment.generate(tasks=tasks, size=size, seed=seed, **options))


def test_generate_is_deterministic_and_nemo_gym_shaped():
    a, b = _rows(["basic_arithmetic", "countdown"], size=8), _rows(["basic_arithmetic", "countdown"], size=8)
    assert a == b
    assert a != _rows(["basic_arithmetic", "countdown"], size=8, seed=2)
    assert {r["metadata"]["source_dataset"] for r in a} == {"basic_arithmetic", "countdown"}
    for row in a:
        assert row["agent_ref"] == {"type": "responses_api_agents", "name": "reasoning_gym_simple_agent"}
        message = row["responses_create_params"]["input"][-1]
        assert message["role"] == "user" and row["question"] in message["content"] and "<answer>" in message["content"]
        assert json.loads(json.dumps(row)) == row  # JSON-safe as written
        RGRow.model_validate(row)


def test_generate_options():
    row = _rows(["leg_counting"], size=1, answer_format="boxed", system_prompt=True)[0]
    messages = row["responses_create_params"]["input"]
    assert messages[0]["role"] == "system" and "\\boxed{}" in messages[1]["content"]
    rows = _rows(["basic_arithmetic"], size=5, min_terms=2, max_terms=2)
    assert all(r["metadata"]["num_terms"] == 2 for r in rows)
    with pytest.raises(ValueError, match="unknown reasoning-gym task"):
        _rows(["no_such_task"])
    with pytest.raises(ValueError, match="per task"):
        _rows(["basic_arithmetic", "countdown"], min_terms=2)
    with pytest.raises(ValueError, match="answer_format"):
        _rows(["basic_arithmetic"], answer_format="xml")


@pytest.mark.parametrize("task", ["basic_arithmetic", "countdown", "leg_counting", "knights_knaves", "gcd"])
def test_generated_gold_answers_score_one_after_json(task):
    for row in _rows([task], size=3, seed=7):
        row = json.loads(json.dumps(row))
        entry = {"question": row["question"], "answer": row["answer"], "metadata": row["metadata"]}
        assert score_entry(task, row["answer"], entry) == 1.0
        assert score_entry(task, "definitely wrong", entry) < 1.0


def test_unknown_source_dataset_is_rejected_with_a_hint():
    row = _rows(["knights_knaves"], size=1)[0]
    row["metadata"]["source_dataset"] = "knights_knave"
    with pytest.raises(ValidationError, match="Did you mean knights_knaves"):
        RGRow.model_validate(row)


async def test_verify_inprocess():
    env = registry.instantiate("reasoning_gym")
    row = _rows(["basic_arithmetic"], size=1, seed=3)[0]
    model = env.Row.model_validate(row)
    good = ResponseObject.model_validate(response_from_text(f"Thinking... <answer>{row['answer']}</answer>"))
    verdict = await env.verify(model, good, None)
    assert verdict.reward == 1.0
    assert verdict.extras == {"task_name": "basic_arithmetic", "extracted_answer": row["answer"],
                              "extraction_rule": "answer_tag", "score": 1.0}
    bad = ResponseObject.model_validate(response_from_text("<answer>not a number</answer>"))
    assert (await env.verify(model, bad, None)).reward == 0.0
