"""Reasoning control on training rows: reasoning off (traces stripped, control string) and budgets."""

from __future__ import annotations

import copy

import pytest

from trainer.reasoning_control import (REASONING_KEY, ReasoningControl, apply_reasoning_control, has_reasoning,
                                       reasoning_budget, reasoning_off)


def _row(i: int = 0) -> dict:
    return {"responses_create_params": {"input": [
        {"role": "system", "content": "You are a solver."},
        {"role": "user", "content": f"q{i}"},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "one two three four five six"}]},
        {"role": "assistant", "content": "<think>alpha beta gamma delta</think>\nThe answer is 4."},
        {"role": "assistant", "content": "plain", "reasoning_content": "r1 r2 r3 r4"},
        {"role": "user", "content": "and now?"}]}, "expected_answer": "4", "uuid": f"u{i}"}


def test_reasoning_off_strips_every_trace_and_marks_the_system_turn() -> None:
    before = _row()
    row = reasoning_off(before, "/no_think")
    items = row["responses_create_params"]["input"]
    assert not has_reasoning(row) and has_reasoning(before)
    assert before == _row()  # the input row is not modified
    assert items[0] == {"role": "system", "content": "You are a solver. /no_think"}
    assert not any(i.get("type") == "reasoning" for i in items)
    assert items[2]["content"] == "The answer is 4." and "reasoning_content" not in items[3]
    assert row[REASONING_KEY] == {"mode": "off"} and row["expected_answer"] == "4"
    plain = reasoning_off({"responses_create_params": {"input": "2+2?"}}, "/no_think")
    assert plain["responses_create_params"]["input"] == [{"role": "system", "content": "/no_think"},
                                                         {"role": "user", "content": "2+2?"}]


def test_budget_cuts_each_trace_to_its_first_words() -> None:
    row = reasoning_budget(_row(), 2)
    items = row["responses_create_params"]["input"]
    assert items[2]["summary"][0]["text"] == "one two"
    assert items[3]["content"] == "<think>alpha beta</think>\nThe answer is 4."
    assert items[4]["reasoning_content"] == "r1 r2"
    assert row[REASONING_KEY] == {"mode": "budget", "budget_words": 2}
    assert reasoning_budget(_row(), 100)["responses_create_params"] == _row()["responses_create_params"]


def test_fractions_seeded_and_env_filtered() -> None:
    rows = [_row(i) for i in range(2000)] + [{"responses_create_params": {"input": "x"}, "env": "code"}] * 50
    rows = [copy.deepcopy(r) for r in rows]
    cfg = ReasoningControl(off_fraction=0.10, budget_fraction=0.03, envs=["math"], seed=3)
    env_of = lambda r: r.get("env", "math")  # noqa: E731
    counts = apply_reasoning_control(rows, cfg, env_of)
    assert 160 <= counts["reasoning_off"] <= 240 and 35 <= counts["reasoning_budget"] <= 90
    assert sum(REASONING_KEY in r for r in rows) == counts["reasoning_off"] + counts["reasoning_budget"]
    assert not any(REASONING_KEY in r for r in rows[2000:])  # code rows are not in envs
    budgets = {r[REASONING_KEY]["budget_words"] for r in rows if r.get(REASONING_KEY, {}).get("mode") == "budget"}
    assert budgets <= set(cfg.budgets) and len(budgets) > 1  # different budgets
    again = [copy.deepcopy(_row(i)) for i in range(2000)]
    assert apply_reasoning_control(again, cfg, env_of) == counts  # same seed, same rows -> same choice
    assert apply_reasoning_control([_row()], ReasoningControl(), env_of) == {"reasoning_off": 0, "reasoning_budget": 0}


def test_bad_options_are_errors() -> None:
    with pytest.raises(ValueError, match="<= 1"):
        ReasoningControl(off_fraction=0.8, budget_fraction=0.3)
    with pytest.raises(ValueError, match="budgets"):
        ReasoningControl(budgets=[])
    with pytest.raises(ValueError):
        ReasoningControl(off_fraction=0.1, typo=1)


def test_data_prep_applies_it_to_train_rows_and_counts_it(tmp_path, monkeypatch):
    import json
    from pathlib import Path

    import yaml

    from trainer.blends import load_blend
    from trainer.data_prep import PrepOptions, prepare

    monkeypatch.setenv("VERIGYM_ENV_PATH", str(Path(__file__).parent / "fixture_envs"))
    agent = {"type": "responses_api_agents", "name": "answer_match_simple_agent"}
    rows = [{"responses_create_params": {"input": [{"role": "user", "content": f"say {i}"},
                                                   {"role": "assistant", "content": "<think>a b c d</think>x"},
                                                   {"role": "user", "content": "again"}]},
             "expected_answer": str(i), "agent_ref": agent} for i in range(60)]
    (tmp_path / "r.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = {"sources": [{"path": str(tmp_path / "r.jsonl")}], "split": {"val_holdout": 10},
            "agent_map": {"answer_match_simple_agent": "answer_match"},
            "reasoning_control": {"off_fraction": 0.3, "budget_fraction": 0.3, "budgets": [1, 2], "seed": 1}}
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(spec))
    result = prepare(load_blend(str(tmp_path / "b.yaml")), PrepOptions(output=tmp_path / "o", progress=False))
    train = [json.loads(x) for x in (tmp_path / "o" / "train.jsonl").read_text().splitlines()]
    val = (tmp_path / "o" / "val.jsonl").read_text()
    counts = result.manifest["counts"]
    modes = [r.get(REASONING_KEY, {}).get("mode") for r in train]
    assert counts["reasoning_off"] == modes.count("off") > 0 and counts["reasoning_budget"] == modes.count("budget") > 0
    assert result.manifest["options"]["reasoning_control"]["off_fraction"] == 0.3
    off = next(r for r in train if r.get(REASONING_KEY, {}).get("mode") == "off")
    assert "<think>" not in json.dumps(off) and off["responses_create_params"]["input"][0]["content"] == "/no_think"
    assert REASONING_KEY not in val  # validation rows are never rewritten
