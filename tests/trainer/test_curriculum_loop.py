"""The curriculum loop for real: data prep -> `driver rollout --split train` (the policy, a real server) ->
per-prompt pass rates -> `driver data prep --pass-rates` drops what is always solved and orders the rest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from trainer.cli import main
from trainer.curriculum import SOURCE_KEY, attach_pass_rates, pass_rates, read_pass_rates, row_key
from trainer.fleet import Fleet

FIXTURES = Path(__file__).parent / "fixture_envs"


@pytest.fixture(autouse=True)
def fixture_envs(monkeypatch):
    monkeypatch.setenv("VERIGYM_ENV_PATH", str(FIXTURES))


def _row(i: int, expected: str) -> dict:
    return {"responses_create_params": {"input": [{"role": "user", "content": f"say {i}"}]},
            "expected_answer": expected, "agent_ref": {"type": "responses_api_agents", "name": "answer_match"}}


def test_row_key_ignores_private_fields_and_the_pass_rate_and_follows_the_source_stamp():
    row = _row(1, "x")
    assert row_key({**row, "_verigym_env": "a", "pass_rate": 0.5}) == row_key(row) != row_key(_row(2, "x"))
    assert row_key({**_row(9, "y"), SOURCE_KEY: row_key(row)}) == row_key(row)
    records = [{"_ng_task_index": 0, "reward": 1.0, "_verigym_env": "e"}, {"_ng_task_index": 0, "reward": 0.0},
               {"_ng_task_index": 1, "reward": 1.0}, {"_ng_task_index": 7, "reward": 1.0}]  # 7: not a row
    got = pass_rates([row, _row(2, "x")], records)
    assert [(e["pass_rate"], e["rollouts"]) for e in got] == [(0.5, 2), (1.0, 1)]
    rows, matched = attach_pass_rates([row, _row(3, "z")], {got[0]["key"]: 0.5}, "pass_rate")
    assert matched == 1 and rows[0]["pass_rate"] == 0.5 and "pass_rate" not in rows[1]


def test_read_pass_rates_names_a_bad_line(tmp_path):
    bad = tmp_path / "p.jsonl"
    bad.write_text('{"key": "a", "pass_rate": 1}\n{"oops": 1}\n')
    with pytest.raises(ValueError, match=r"p.jsonl:2"):
        read_pass_rates(bad)


def test_rollout_then_prep_filters_always_solved_and_orders_by_difficulty(tmp_path, capsys, monkeypatch):
    # "" is in every response (always solved); a long random string never is (never solved)
    rows = [_row(i, "" if i % 3 == 0 else "qzqzqzqzqzqz") for i in range(12)] + [_row(99, "held out")]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = {"sources": [{"path": str(tmp_path / "rows.jsonl")}], "split": {"val_holdout": 1},
            "curriculum": {"max_pass_rate": 0.99, "sort_by_difficulty": True},
            "low_effort": {"fraction": 0.5, "envs": ["answer_match"], "low_string": "/low", "seed": 1}}
    blend = tmp_path / "loop.yaml"
    blend.write_text(yaml.safe_dump(spec))
    data = tmp_path / "data"
    assert main(["data", "prep", "--blend", str(blend), "--output", str(data)]) == 0
    first = [json.loads(x) for x in (data / "train.jsonl").read_text().splitlines()]
    assert len(first) == 12 and any(SOURCE_KEY in r for r in first)  # low-effort rows keep their source key

    monkeypatch.setenv("VERIGYM_ENV_PATH", str(FIXTURES))
    out = tmp_path / "rollouts" / "train.jsonl"
    with Fleet(["answer_match"]) as fleet:
        assert main(["rollout", "--blend", str(blend), "--input", str(data / "train.jsonl"), "--num-generations", "3",
                     "--output", str(out), "--env-url", f"answer_match={fleet.urls['answer_match']}",
                     "--max-new-tokens", "4"]) == 0
    rates_file = out.with_name("train_pass_rates.jsonl")
    assert str(rates_file) in capsys.readouterr().out
    rates = read_pass_rates(rates_file)
    assert sorted(rates.values()) == [0.0] * 8 + [1.0] * 4

    assert main(["data", "prep", "--blend", str(blend), "--output", str(data), "--pass-rates", str(rates_file)]) == 0
    assert "12 train rows matched" in capsys.readouterr().out
    manifest = json.loads((data / "manifest.json").read_text())
    assert manifest["counts"]["curriculum_dropped"] == 4 and manifest["counts"]["pass_rates_matched"] == 12
    second = [json.loads(x) for x in (data / "train.jsonl").read_text().splitlines()]
    assert len(second) == 8 and all(r["pass_rate"] == 0.0 for r in second)
    assert all(r["expected_answer"] != "" for r in second)  # the always-solved prompts are gone
    assert "held out" in (data / "val.jsonl").read_text()  # validation rows are never filtered
