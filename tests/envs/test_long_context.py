"""long_context: metrics computed by hand, the generator's length/needle/determinism, metric choice."""

from __future__ import annotations

import json

import pytest

from environments.long_context import scoring
from environments.long_context.synthetic import CHARS_PER_TOKEN, TASKS
from environments.long_context.verifier import LongContext
from servers import registry
from servers.service import EnvService
from servers.wire import response_from_text


def test_ruler_string_match():
    assert scoring.string_match_all("abc XYZ", ["xyz", "ABC", "q", "r"]) == 0.5
    assert scoring.string_match_all("anything", []) == 0.0
    assert scoring.string_match_part("in Paris.", ["London", "paris"]) == 1.0
    assert scoring.string_match_part("in Rome.", ["London", "paris"]) == 0.0


def test_squad_metrics():
    assert scoring.normalize_answer("The  Cat, sat!") == "cat sat"
    assert scoring.exact_match("the Eiffel tower.", ["Eiffel Tower"]) == 1.0
    # pred tokens [bram, stoker, wrote, it], gold [bram, stoker]: P=2/4 R=1 -> F1=2/3
    assert scoring.token_f1("Bram Stoker wrote it", ["Bram Stoker", "nobody"]) == pytest.approx(2 / 3)
    assert scoring.token_f1("", ["x"]) == 0.0 and scoring.token_f1("", [""]) == 1.0


def test_graphwalks_answer_parsing_and_f1():
    assert scoring.final_answer_list("reasoning\nFinal Answer: [a, 'b', \"c\"]") == ["a", "b", "c"]
    assert scoring.final_answer_list("Final Answer: [a]\nmore text") is None  # must be the last line
    assert scoring.final_answer_list("Final Answer: []") == []
    assert scoring.set_f1(["a", "b"], '["a", "c"]') == pytest.approx(0.5)
    assert scoring.set_f1([], "[]") == 1.0 and scoring.set_f1(None, "[]") == 0.0
    with pytest.raises(ValueError):
        scoring.set_f1(["a"], "not json")


def test_ngram_overlap():
    source = " ".join(f"w{i}" for i in range(100))
    copied = " ".join(f"w{i}" for i in range(10, 40))
    assert scoring.ngram_overlap(copied, source) == 1.0
    assert scoring.ngram_overlap("short text", source) == 0.0  # fewer than n words
    own = " ".join(f"x{i}" for i in range(30))
    assert scoring.ngram_overlap(own, source) == 0.0


@pytest.mark.parametrize("target", [500, 8000, 32000])
def test_generator_hits_the_token_target_and_hides_the_needle(target):
    rows = list(LongContext.generate(tasks=None, size=3, seed=3, target_tokens=target))
    assert [r["subset"] for r in rows] == list(TASKS)
    for row in rows:
        prompt = row["responses_create_params"]["input"][0]["content"]
        assert abs(len(prompt) / CHARS_PER_TOKEN - target) <= 0.03 * target + 30
        assert row["length"] == len(prompt) // CHARS_PER_TOKEN
        for gold in row["outputs"]:
            assert gold in prompt
    vt = rows[2]
    prompt = vt["responses_create_params"]["input"][0]["content"]
    assert len(vt["outputs"]) == 5 and f"VAR {vt['outputs'][1]} = VAR {vt['outputs'][0]}." in prompt
    multikey = rows[1]["responses_create_params"]["input"][0]["content"]
    assert multikey.count("One of the special magic numbers for") == 4


def test_generator_is_deterministic_and_validates():
    a = list(LongContext.generate(tasks=["niah_single"], size=4, seed=1, target_tokens=300))
    assert a == list(LongContext.generate(tasks=["niah_single"], size=4, seed=1, target_tokens=300))
    assert a[:2] == list(LongContext.generate(tasks=["niah_single"], size=2, seed=1, target_tokens=300))
    assert a != list(LongContext.generate(tasks=["niah_single"], size=4, seed=2, target_tokens=300))
    with pytest.raises(ValueError, match="unknown long_context task"):
        list(LongContext.generate(tasks=["cwe"], size=1, seed=0))
    with pytest.raises(ValueError, match="unknown long_context option"):
        list(LongContext.generate(tasks=None, size=1, seed=0, haystack="essay"))


async def test_generated_rows_score_end_to_end():
    service = EnvService(registry.instantiate("long_context"))
    await service.start()
    try:
        for row in LongContext.generate(tasks=None, size=6, seed=5, target_tokens=1000):
            json.dumps(row)  # rows are plain JSON
            status, good = await service.verify({**row, "response": response_from_text(" ".join(row["outputs"]))})
            status2, bad = await service.verify({**row, "response": response_from_text("no idea")})
            assert (status, status2) == (200, 200) and good["reward"] == 1.0 and bad["reward"] == 0.0
    finally:
        await service.stop()


@pytest.mark.parametrize("rule,reward", [("base", 1.0), ("multiply", 0.0), ("minus", 0.0)])
async def test_overlap_rules(rule, reward):
    service = EnvService(registry.instantiate("long_context", overrides={"overlap_grading_rule": rule}))
    await service.start()
    try:
        prompt = " ".join(f"edge{i} -> node{i}" for i in range(50))
        response = response_from_text("Final Answer: [a]")
        response["output"].insert(0, {"type": "reasoning", "summary": [{"type": "summary_text", "text": prompt}]})
        _, reply = await service.verify({"responses_create_params": {"input": prompt}, "expected_answer": '["a"]',
                                         "response": response})
        assert reply["answer_score"] == 1.0 and reply["reasoning_overlap"] == 1.0 and reply["reward"] == reward
    finally:
        await service.stop()


@pytest.mark.parametrize("gold", [{"outputs": []}, {"outputs": [""]}, {"outputs": ["x", "  "]}, {"answers": []},
                                  {"answers": [""]}, {"expected_answer": "not json"},
                                  {"expected_answer": '"abc"'}, {"expected_answer": "[1, 2]"},
                                  {"expected_answer": '{"a": 1}'}])
async def test_golds_that_would_give_every_response_the_same_reward_are_rejected(gold):
    # outputs=[""] used to score 1.0 for any answer ("" is in every string); [] scored 0.0;
    # expected_answer '"abc"' became the node set {a, b, c}.
    service = EnvService(registry.instantiate("long_context"))
    await service.start()
    try:
        status, body = await service.verify({"responses_create_params": {"input": "q"}, **gold,
                                             "response": response_from_text("Final Answer: [a, b, c]")})
        assert status == 422, body
        assert next(iter(gold)) in str(body["detail"])
    finally:
        await service.stop()
