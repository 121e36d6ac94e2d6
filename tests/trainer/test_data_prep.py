"""``driver data prep`` on small local files in the exact hub formats (incl. placeholders)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from trainer.blends import load_blend
from trainer.cli import main
from trainer.data_prep import DataPrepError, PrepOptions, prepare
from trainer.placeholders import parse_answer, resolve_row, strip_dapo_wrapper

FIXTURES = Path(__file__).parent / "fixture_envs"
DAPO_Q = ("Solve the following math problem step by step. The last line of your response should be of the form "
          "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
          "Let $x$ be 2.\n\nFind $x^2$.\n\nRemember to put your answer on its own line after \"Answer:\".")
AGENT = {"type": "responses_api_agents", "name": "answer_match_simple_agent"}


@pytest.fixture(autouse=True)
def only_fixture_envs(monkeypatch):
    monkeypatch.setenv("VERIGYM_ENV_PATH", str(FIXTURES))


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def sources(tmp: Path) -> dict[str, str]:
    dapo = write_jsonl(tmp / "dapo.jsonl", [
        {"prompt": [{"role": "user", "content": DAPO_Q}], "reward_model": {"ground_truth": "4", "style": "rule"}},
        {"prompt": [{"role": "user", "content": "wrap\n\nOther\n\nend"}], "reward_model": {"ground_truth": "7"}}])
    sky = write_jsonl(tmp / "sky.jsonl", [
        {"prompt": [{"role": "user", "content": "What is 3 squared?"}], "reward_model": {"ground_truth": "[\"9\", \"9.0\"]"}}])
    return {"super_v3_lcsft_step1000_dapo17k": str(dapo), "super_v3_lcsft_step1000_skyworks": str(sky)}


def plain(i: int) -> dict:
    return {"responses_create_params": {"input": [{"role": "user", "content": f"say {i}"}]},
            "expected_answer": str(i), "agent_ref": AGENT, "pass_rate": i / 10}


def blend_file(tmp: Path, rows_path: Path, **extra) -> Path:
    spec = {"sources": [{"path": str(rows_path)}], "agent_map": {"answer_match_simple_agent": "answer_match"},
            "placeholders": {"resolve": True, "local_sources": sources(tmp)}, "split": {"val_holdout": 2}, **extra}
    path = tmp / "b.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_placeholder_resolution_matches_the_recipe(tmp_path):
    src = sources(tmp_path)
    rows = {name: [json.loads(line) for line in Path(p).read_text().splitlines()] for name, p in src.items()}
    fetch = lambda name, i: rows[name][i]  # noqa: E731
    dapo = resolve_row({"dataset": "super_v3_lcsft_step1000_dapo17k", "agent_ref": AGENT, "uuid": "u1",
                        "_hf_placeholder": {"row": 0, "question_template": {"prefix": "Solve:\n", "suffix": "\n\nBox it.\n\n"}}},
                       fetch)
    assert dapo["question"] == "Solve:\nLet $x$ be 2.\n\nFind $x^2$.\n\nBox it."
    assert dapo["expected_answer"] == "4" and dapo["uuid"] == "u1" and "_hf_placeholder" not in dapo
    assert dapo["responses_create_params"] == {"input": [{"role": "user", "content": dapo["question"]}]}
    sky = resolve_row({"dataset": "super_v3_lcsft_step1000_skyworks", "agent_ref": AGENT,
                       "_hf_placeholder": {"row": 0, "question_template": "Q: {question}\nBox it."}}, fetch)
    assert sky["question"] == "What is 3 squared?" and sky["expected_answer"] == "9"
    assert sky["responses_create_params"]["input"][0]["content"] == "Q: What is 3 squared?\nBox it."
    assert strip_dapo_wrapper("no wrapper") == "no wrapper"
    assert parse_answer('{"a": "1"}') == "1" and parse_answer("x+1") == "x+1" and parse_answer(3) == "3"


def test_prep_writes_splits_manifest_and_skips_when_up_to_date(tmp_path):
    rows = [plain(i) for i in range(6)] + [
        {"dataset": "super_v3_lcsft_step1000_dapo17k", "agent_ref": AGENT,
         "_hf_placeholder": {"row": 1, "question_template": {"prefix": "", "suffix": ""}}}]
    blend = load_blend(str(blend_file(tmp_path, write_jsonl(tmp_path / "rlvr.jsonl", rows))))
    out = tmp_path / "out"
    result = prepare(blend, PrepOptions(output=out, progress=False))
    train = [json.loads(x) for x in (out / "train.jsonl").read_text().splitlines()]
    val = [json.loads(x) for x in (out / "val.jsonl").read_text().splitlines()]
    assert len(train) == 5 and len(val) == 2
    assert val[-1]["question"] == "Other" and val[-1]["expected_answer"] == "7"  # last rows -> val, as the recipe
    assert train[0] == rows[0]  # non-placeholder rows pass through unchanged
    m = json.loads((out / "manifest.json").read_text())
    assert m["counts"]["placeholders_resolved"] == 1 and m["counts"]["train_per_env"] == {"answer_match": 5}
    assert len(m["sources"][0]["sha256"]) == 64 and set(m["outputs"]) == {"train.jsonl", "val.jsonl"}
    assert not result.skipped
    assert prepare(blend, PrepOptions(output=out, progress=False)).skipped
    assert not prepare(blend, PrepOptions(output=out, progress=False, force=True)).skipped
    (tmp_path / "rlvr.jsonl").write_text((tmp_path / "rlvr.jsonl").read_text() + json.dumps(plain(9)) + "\n")
    assert not prepare(blend, PrepOptions(output=out, progress=False)).skipped  # input changed


def test_bad_rows_are_reported_by_line_and_reason(tmp_path, capsys):
    rows = [plain(0), "{not json", {"responses_create_params": {"input": "x"}, "agent_ref": AGENT},  # no expected_answer
            {**plain(1), "agent_ref": {"type": "responses_api_agents", "name": "nonexistent_agent"}},
            {"dataset": "super_v3_lcsft_step1000_skyworks", "agent_ref": AGENT,
             "_hf_placeholder": {"row": 99, "question_template": "{question}"}}] + [plain(i) for i in range(2, 6)]
    path = blend_file(tmp_path, write_jsonl(tmp_path / "rows.jsonl", rows))
    with pytest.raises(DataPrepError) as err:
        prepare(load_blend(str(path)), PrepOptions(output=tmp_path / "o", progress=False))
    text = str(err.value)
    assert "4 invalid row(s)" in text
    for line, why in [(2, "not valid JSON"), (3, "expected_answer"), (4, "nonexistent_agent"), (5, "out of range")]:
        assert f"rows.jsonl:{line}: " in text and why in text
    # --skip-invalid: written to rejected.jsonl and counted, never silently dropped.
    code = main(["data", "prep", "--blend", str(path), "--output", str(tmp_path / "o"), "--skip-invalid"])
    assert code == 0 and "4 invalid rows skipped" in capsys.readouterr().out
    rejected = [json.loads(x) for x in (tmp_path / "o" / "rejected.jsonl").read_text().splitlines()]
    assert [r["line"] for r in rejected] == [2, 3, 4, 5]
    assert main(["data", "prep", "--blend", str(path), "--output", str(tmp_path / "o2")]) == 1


def test_curriculum_weights_and_low_effort(tmp_path):
    rows = [plain(i) for i in range(10)]
    path = blend_file(tmp_path, write_jsonl(tmp_path / "r.jsonl", rows),
                      curriculum={"max_pass_rate": 0.55, "sort_by_difficulty": True},
                      low_effort={"fraction": 1.0, "envs": ["answer_match"], "low_string": "/low"},
                      weights={"answer_match": 2.0})
    result = prepare(load_blend(str(path)), PrepOptions(output=tmp_path / "o", progress=False))
    train = [json.loads(x) for x in (tmp_path / "o" / "train.jsonl").read_text().splitlines()]
    rates = [r["pass_rate"] for r in train]
    assert max(rates) <= 0.55 and rates == sorted(rates, reverse=True)  # easiest first, easy ones dropped
    assert len(train) == 2 * 6 and result.manifest["counts"]["curriculum_dropped"] == 2
    assert all(r["responses_create_params"]["input"][-1]["content"].endswith(" /low") for r in train)
    val = [json.loads(x) for x in (tmp_path / "o" / "val.jsonl").read_text().splitlines()]
    assert [r["expected_answer"] for r in val] == ["8", "9"] and "/low" not in json.dumps(val)


def test_input_override_reads_a_local_copy_of_the_hub_file(tmp_path):
    blend = load_blend("swe1")
    local = tmp_path / "dl"
    local.mkdir()
    write_jsonl(local / "swe1.jsonl", [plain(i) for i in range(103)])
    blend.agent_map = {"answer_match_simple_agent": "answer_match"}
    result = prepare(blend, PrepOptions(output=tmp_path / "o", input=local, progress=False))
    assert result.manifest["counts"]["train"] == 3 and result.manifest["counts"]["val"] == 100
    assert result.manifest["sources"][0]["source"] == "hf://nvidia/Nemotron-3-Super-RL-Training-Blends/swe1.jsonl"


def test_prep_accepts_exactly_what_the_server_accepts(tmp_path):
    """swe's own tiny rows carry FAIL_TO_PASS / PASS_TO_PASS as JSON strings (as SWE-bench
    publishes them), which the swe server parses; data prep validates with the same row model,
    so it accepts them too — and rejects a row the server would reject, naming the field."""
    repo = Path(__file__).resolve().parents[2]
    rows = [json.loads(x) for x in (repo / "environments/swe/data/tiny_rows.jsonl").read_text().splitlines() if x.strip()]
    assert any(isinstance(r["FAIL_TO_PASS"], str) for r in rows)
    agent = {"type": "responses_api_agents", "name": "swebench_openhands_agent"}
    bad = {**rows[0], "base_commit": "ab"}  # min_length 4 on the server
    local = tmp_path / "dl"
    local.mkdir()
    write_jsonl(local / "swe2.jsonl", [{**r, "agent_ref": agent} for r in rows] + [{**bad, "agent_ref": agent}])
    blend = load_blend("swe2")
    blend.split.val_holdout = 0
    with pytest.raises(DataPrepError, match=r"swe2.jsonl:3: does not match swe's row fields: base_commit"):
        prepare(blend, PrepOptions(output=tmp_path / "o", input=local, progress=False))
    result = prepare(blend, PrepOptions(output=tmp_path / "o", input=local, progress=False, skip_invalid=True))
    assert result.manifest["counts"]["train"] == len(rows) and result.manifest["counts"]["rejected"] == 1
    assert result.manifest["agent_map"]["swebench_openhands_agent"] == "swe"
    written = [json.loads(x) for x in (tmp_path / "o" / "train.jsonl").read_text().splitlines()]
    assert written == [{**r, "agent_ref": agent} for r in rows]  # nothing private added to a row
