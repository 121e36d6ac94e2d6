"""A hub blend trained from local data (issue 29): `driver run --blend rlvr2 --data-dir D` uses the
folder `driver data prep --blend rlvr2 --input FILE --skip-invalid` wrote, with that prep's
choices and without the hub; `data.train_data_path` rows start the environments their agent names
route to; placeholder sources have a command-line local copy and, unreachable, one clear line.

The hub is unreachable here (HF_HUB_OFFLINE=1, HF_DATASETS_OFFLINE=1): any hub access fails.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from trainer.blends import load_blend
from trainer.cli import main
from trainer.prepared_data import data_for_run

REPO = Path(__file__).resolve().parents[2]
TINY_MATH = REPO / "blends" / "data" / "tiny_math.jsonl"  # 192 rows routed by math_with_judge_simple_agent
BAD = {"responses_create_params": {"input": [{"role": "user", "content": "x"}]},
       "agent_ref": {"type": "responses_api_agents", "name": "no_such_agent"}}
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    for key, value in OFFLINE.items():
        monkeypatch.setenv(key, value)


def local_copy(tmp: Path, extra: list[dict] = ()) -> Path:
    path = tmp / "rlvr2-local.jsonl"
    path.write_text(TINY_MATH.read_text() + "".join(json.dumps(r) + "\n" for r in [BAD, *extra]))
    return path


def test_run_uses_the_folder_prep_wrote_with_its_choices_and_never_the_hub(tmp_path, capsys):
    local, data = local_copy(tmp_path), tmp_path / "D"
    assert main(["data", "prep", "--blend", "rlvr2", "--input", str(local), "--output", str(data),
                 "--skip-invalid"]) == 0
    assert "1 invalid rows skipped" in capsys.readouterr().out
    blend = load_blend("rlvr2")

    used = data_for_run(blend, data, progress=False)
    assert used.note == (f"data: {data} as prepared with --input {local} --skip-invalid "
                         "(92 train / 100 val rows, 1 invalid rows left out)")

    # The input changed: the same prep again (still --skip-invalid: the bad row is left out, not fatal).
    local.write_text(local.read_text() + json.dumps(json.loads(TINY_MATH.read_text().splitlines()[0])) + "\n")
    again = data_for_run(blend, data, progress=False)
    assert again.note.startswith(f"data: {data} prepared again (the blend or its inputs changed) with --input {local} "
                                 "--skip-invalid") and again.manifest["counts"]["rejected"] == 1
    assert again.manifest["counts"]["train"] == 93

    local.unlink()  # moved away: the prepared rows are still the run's rows
    kept = data_for_run(blend, data, progress=False)
    assert "as prepared" in kept.note and f"{local} no longer there" in kept.note


def test_driver_run_trains_on_it_offline(tmp_path):
    """The whole command, offline, as the issue ran it: before, it re-ran the prep against the hub."""
    local, data = local_copy(tmp_path), tmp_path / "D"
    env = {**__import__("os").environ, **OFFLINE}
    prep = subprocess.run([sys.executable, "-m", "trainer.cli", "data", "prep", "--blend", "rlvr2", "--input", str(local),
                           "--output", str(data), "--skip-invalid"], capture_output=True, text=True, env=env, timeout=300)
    assert prep.returncode == 0, prep.stderr
    run = subprocess.run([sys.executable, "-m", "trainer.cli", "run", "--blend", "rlvr2", "--data-dir", str(data),
                          "grpo.max_num_steps=0", "grpo.val_at_start=false", "grpo.val_at_end=false",
                          "policy.warm_start.enabled=false", "logger.progress_bar=false",
                          f"logger.log_dir={tmp_path / 'run'}"], capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert f"data: {data} as prepared with --input {local} --skip-invalid" in run.stdout
    assert "environments to start: math\n" in run.stdout and "Traceback" not in run.stderr


def test_a_folder_of_another_blend_is_refused_in_one_line(tmp_path, capsys):
    data = tmp_path / "D"
    assert main(["data", "prep", "--blend", "rlvr2", "--input", str(local_copy(tmp_path)), "--output", str(data),
                 "--skip-invalid"]) == 0
    assert main(["run", "--blend", "rlvr3", "--data-dir", str(data), f"logger.log_dir={tmp_path / 'run'}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]  # after data prep's progress lines
    assert err == (f"driver run: {data} holds the rows of blend 'rlvr2', not of 'rlvr3': pass --data-dir with a "
                   "folder prepared by `driver data prep --blend rlvr3`")


def test_train_data_path_starts_the_environments_its_agents_route_to(tmp_path, capsys):
    train = tmp_path / "train.jsonl"
    train.write_text(TINY_MATH.read_text())  # agent_ref.name math_with_judge_simple_agent -> math
    assert main(["run", "--dry-run", f"data.train_data_path={train}", "data.blend=null",
                 f"logger.log_dir={tmp_path / 'run'}"]) == 0
    out = capsys.readouterr().out
    assert "environments to start: math\n" in out and "math_with_judge_simple_agent" not in out
    train.write_text(json.dumps(BAD) + "\n")
    assert main(["run", "--dry-run", f"data.train_data_path={train}", "data.blend=null"]) == 2
    err = capsys.readouterr().err
    assert "agent_ref.name 'no_such_agent'" in err and "agent_map" in err and "Traceback" not in err
    assert main(["run", "--dry-run", f"data.train_data_path={tmp_path / 'missing.jsonl'}", "data.blend=null"]) == 2
    assert "data.train_data_path" in capsys.readouterr().err


def placeholder_blend(tmp: Path) -> Path:
    rows = tmp / "rows.jsonl"
    rows.write_text(json.dumps({"dataset": "super_v3_lcsft_step1000_dapo17k",
                                "agent_ref": {"type": "responses_api_agents", "name": "math_with_judge_simple_agent"},
                                "_hf_placeholder": {"row": 0, "question_template": {"prefix": "", "suffix": ""}}}) + "\n"
                    + TINY_MATH.read_text())
    path = tmp / "with_placeholders.yaml"
    path.write_text(yaml.safe_dump({"sources": [{"path": str(rows)}], "placeholders": {"resolve": True},
                                    "split": {"val_holdout": 2}}))
    return path


def test_placeholder_source_offline_is_one_line_and_a_local_copy_resolves_it(tmp_path):
    blend = placeholder_blend(tmp_path)
    argv = [sys.executable, "-m", "trainer.cli", "data", "prep", "--blend", str(blend), "--output", str(tmp_path / "o")]
    env = {**__import__("os").environ, **OFFLINE}
    offline = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    assert offline.returncode == 1 and "Traceback" not in offline.stderr, offline.stderr
    line = offline.stderr.strip().splitlines()[-1]  # after the progress line
    assert line.startswith("driver data prep: cannot load placeholder source super_v3_lcsft_step1000_dapo17k from "
                           "hf://BytedTsinghua-SIA/DAPO-Math-17k") and "--placeholder-source dapo=FILE" in line

    copy = tmp_path / "dapo.jsonl"
    copy.write_text(json.dumps({"prompt": [{"role": "user", "content": "Solve.\n\nWhat is 6 times 7?\n\nAnswer: N"}],
                                "reward_model": {"ground_truth": "42"}}) + "\n")
    local = subprocess.run(argv + ["--placeholder-source", f"dapo={copy}"], capture_output=True, text=True, env=env,
                           timeout=300)
    assert local.returncode == 0, local.stderr
    assert "1 placeholders resolved" in local.stdout
    manifest = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert manifest["request"]["placeholder_sources"]["super_v3_lcsft_step1000_dapo17k"] == str(copy)
    rows = [json.loads(x) for x in (tmp_path / "o" / "train.jsonl").read_text().splitlines()]
    assert rows[0]["question"] == "What is 6 times 7?" and rows[0]["expected_answer"] == "42"


def test_a_missing_pass_rates_file_is_one_line(tmp_path, capsys):
    missing = tmp_path / "step_3_pass_rates.jsonl"
    assert main(["data", "prep", "--blend", "tiny", "--output", str(tmp_path / "o"), "--pass-rates", str(missing)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"--pass-rates {missing} does not exist" in err and "driver rollout" in err
