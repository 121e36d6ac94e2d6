"""One resolver of model paths (servers/model/loading.resolve_source), shared by `envs model serve`,
`driver rollout --model` and `driver run policy.model_name=`: a run's checkpoints folder and its
`checkpoints/latest` pointer (the form blends/README.md documents) name the newest step; a wrong
path is one line, not a traceback (issue 29)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from servers.model.loading import ModelLoadError, resolve_source

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> Path:
    """A run's checkpoints folder as `driver run` leaves it: step folders (Hugging Face) + `latest`."""
    from trainer.policy import Policy, PolicyConfig

    root = tmp_path_factory.mktemp("run") / "checkpoints"
    policy = Policy.load(PolicyConfig(model_name="tiny", seed=0))
    for step in ("step_000001", "step_000002"):
        policy.save(root / step)
    (root / "latest").write_text("step_000002\n")
    return root


def test_a_checkpoints_folder_and_its_latest_pointer_name_the_newest_step(checkpoints):
    assert resolve_source(str(checkpoints)) == str(checkpoints / "step_000002")
    assert resolve_source(str(checkpoints / "latest")) == str(checkpoints / "step_000002")
    assert resolve_source(str(checkpoints / "step_000001")) == str(checkpoints / "step_000001")


def test_a_pointer_to_a_deleted_step_says_so(tmp_path):
    (tmp_path / "latest").write_text("step_000009")
    with pytest.raises(ModelLoadError, match="names 'step_000009', which is not in"):
        resolve_source(str(tmp_path / "latest"))


def _rollout(model: str, tmp: Path) -> subprocess.CompletedProcess:
    row = json.loads((REPO / "blends/data/tiny_math.jsonl").read_text().splitlines()[0])
    (tmp / "rows.jsonl").write_text(json.dumps(row) + "\n")
    return subprocess.run([sys.executable, "-m", "trainer.cli", "rollout", "--blend", "tiny", "--input",
                           str(tmp / "rows.jsonl"), "--model", model, "--num-generations", "2", "--max-new-tokens", "8",
                           "--output", str(tmp / "out.jsonl")], cwd=tmp, capture_output=True, text=True, timeout=300)


def test_driver_rollout_takes_checkpoints_latest(checkpoints, tmp_path):
    done = _rollout(str(checkpoints / "latest"), tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rollouts = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert len(rollouts) == 2 and all("reward" in r for r in rollouts)


def test_driver_rollout_with_a_wrong_model_path_is_one_line(tmp_path):
    done = _rollout(str(tmp_path / "runs" / "x" / "checkpoints"), tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip() == (f"driver rollout: --model {tmp_path / 'runs' / 'x' / 'checkpoints'} does not exist "
                                   "(give 'tiny', a checkpoint folder or a hub id)")
