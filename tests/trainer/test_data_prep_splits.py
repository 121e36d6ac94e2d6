"""``driver data prep``: the ratio split (train/val/test) and the W&B artifact (offline mode)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from trainer.blends import BlendError, Split, load_blend
from trainer.data_prep import PrepOptions, prepare

FIXTURES = Path(__file__).parent / "fixture_envs"
REPO = Path(__file__).resolve().parents[2]
AGENT = {"type": "responses_api_agents", "name": "answer_match_simple_agent"}


@pytest.fixture(autouse=True)
def only_fixture_envs(monkeypatch):
    monkeypatch.setenv("VERIGYM_ENV_PATH", str(FIXTURES))


def make_blend(tmp: Path, n: int, split: dict) -> Path:
    rows = tmp / "rows.jsonl"
    rows.write_text("".join(json.dumps({"responses_create_params": {"input": [{"role": "user", "content": f"say {i}"}]},
                                        "expected_answer": str(i), "agent_ref": AGENT}) + "\n" for i in range(n)))
    path = tmp / "ratio.yaml"
    path.write_text(yaml.safe_dump({"sources": [{"path": str(rows)}], "split": split,
                                    "agent_map": {"answer_match_simple_agent": "answer_match"}}))
    return path


def answers(path: Path) -> list[str]:
    return [json.loads(x)["expected_answer"] for x in path.read_text().splitlines()]


def test_ratio_split_writes_train_val_test_in_order(tmp_path):
    blend = load_blend(str(make_blend(tmp_path, 100, {"val_holdout": None, "train_ratio": 0.9, "val_ratio": 0.06})))
    out = tmp_path / "out"
    result = prepare(blend, PrepOptions(output=out, progress=False))
    assert answers(out / "train.jsonl") == [str(i) for i in range(90)]
    assert answers(out / "val.jsonl") == [str(i) for i in range(90, 96)]
    assert answers(out / "test.jsonl") == [str(i) for i in range(96, 100)]
    c = result.manifest["counts"]
    assert (c["train"], c["val"], c["test"]) == (90, 6, 4)
    assert set(result.manifest["outputs"]) == {"train.jsonl", "val.jsonl", "test.jsonl"}
    assert prepare(blend, PrepOptions(output=out, progress=False)).skipped  # test.jsonl is part of the up-to-date check
    (out / "test.jsonl").write_text("")
    assert not prepare(blend, PrepOptions(output=out, progress=False)).skipped


def test_holdout_split_has_no_test_file_and_removes_a_stale_one(tmp_path):
    out = tmp_path / "out"
    prepare(load_blend(str(make_blend(tmp_path, 20, {"val_holdout": None, "train_ratio": 0.5, "val_ratio": 0.25}))),
            PrepOptions(output=out, progress=False))
    assert (out / "test.jsonl").exists()
    result = prepare(load_blend(str(make_blend(tmp_path, 20, {"val_holdout": 3}))), PrepOptions(output=out, progress=False))
    assert not (out / "test.jsonl").exists()
    assert (result.manifest["counts"]["train"], result.manifest["counts"]["val"]) == (17, 3)


@pytest.mark.parametrize("split, message", [
    ({"train_ratio": 0.9}, "needs split.val_ratio"),
    ({"train_ratio": 0.9, "val_ratio": 0.2, "val_holdout": None}, "> 1"),
    ({"train_ratio": 0.9, "val_ratio": 0.05, "val_holdout": 100}, "set one"),
    ({"train_ratio": 0.0, "val_ratio": 0.05}, "greater than 0"),
])
def test_ratio_split_errors(split, message):
    with pytest.raises(ValidationError, match=message):
        Split.model_validate(split)


def test_ratio_split_error_names_the_blend_key(tmp_path):
    with pytest.raises(BlendError, match="needs split.val_ratio"):
        load_blend(str(make_blend(tmp_path, 5, {"train_ratio": 0.8})))


def test_wandb_offline_artifact_with_lineage(tmp_path):
    blend = make_blend(tmp_path, 10, {"val_holdout": None, "train_ratio": 0.8, "val_ratio": 0.1})
    out = tmp_path / "out"
    env = {**os.environ, "VERIGYM_ENV_PATH": str(FIXTURES), "WANDB_MODE": "offline", "WANDB_SILENT": "true",
           "WANDB_API_KEY": "", "HOME": str(tmp_path)}  # no network, no credentials
    done = subprocess.run([sys.executable, "-m", "trainer.cli", "data", "prep", "--blend", str(blend), "--output",
                           str(out), "--wandb", "vg-test"], capture_output=True, text=True, cwd=REPO, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "W&B artifact ratio-data" in done.stdout and "wandb sync" in done.stdout
    runs = list((out / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(runs) == 1
    record = runs[0].read_bytes()  # the run's record log: both artifacts, their files and the lineage metadata
    for needle in (b"ratio-inputs", b"ratio-data", b"train.jsonl", b"val.jsonl", b"test.jsonl", b"manifest.json",
                   b"blend_ratio.yaml", b'"inputs":"ratio-inputs"', b"rows.jsonl"):
        assert needle in record, needle
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["sources"][0]["sha256"].encode() in record
