"""`driver run --blend tiny` end to end, as a user types it: data prep, the real environment
servers (math + reasoning_gym) started by the driver, warm start, async GRPO, validation,
metrics, plot, checkpoints and the final summary.

The smoke test runs a few steps (CI). The learning test runs the shipped config unchanged
(600 steps, about 3.5-4 minutes on a 2-core CPU) and is opt-in: ``VERIGYM_SLOW=1 pytest -m slow``.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray")


def _run(tmp_path: Path, *overrides: str, timeout: int) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "trainer.cli", "run", "--blend", "tiny", "--data-dir", str(tmp_path / "data"),
           f"logger.log_dir={tmp_path / 'run'}", *overrides]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=os.getcwd())


def _metrics(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]


def test_driver_run_tiny_end_to_end_writes_every_output(tmp_path):
    out = _run(tmp_path, "grpo.max_num_steps=3", "grpo.num_prompts_per_step=4", "grpo.num_generations_per_prompt=4",
               "grpo.max_val_samples=8", "grpo.val_period=0", "policy.warm_start.num_steps=10",
               "checkpointing.save_period=2", timeout=280)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    run = tmp_path / "run"
    # both environments of the blend were started and scored rows
    assert "environments to start: math, reasoning_gym" in out.stdout
    assert "run summary" in out.stdout and "validation reward: step 0:" in out.stdout
    assert "GRPO" in out.stderr and "3/3" in out.stderr  # the progress bar reached the last step
    rows = _metrics(run)
    steps = [r for r in rows if "train/reward" in r]
    assert [r["step"] for r in steps] == [1, 2, 3]
    assert all({"train/reward/math", "train/reward/reasoning_gym"} & set(r) for r in steps)
    assert rows[0]["warm_start/steps"] == 10
    val = [r for r in rows if "validation/reward" in r]
    assert [r["step"] for r in val] == [0, 3]
    assert all(0.0 <= r["validation/reward"] <= 1.0 and r["validation/failed_frac"] == 0 for r in val)
    png = run / "reward_curve.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    ckpt = run / "checkpoints"
    assert (ckpt / "latest").read_text().strip() == "step_000003"
    for step in ("step_000002", "step_000003"):
        assert (ckpt / step / "model.safetensors").stat().st_size > 0 and (ckpt / step / "optimizer.pt").exists()
    state = json.loads((ckpt / "step_000003" / "state.json").read_text())
    assert state["step"] == 3 and len(state["buffer"]["consumed"]) == 3 * 4
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 3 and summary["failed_samples"] == 0
    assert [v[0] for v in summary["validation"]] == [0, 3] and summary["reward_curve"] == str(png)
    assert (tmp_path / "data" / "manifest.json").exists()


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("VERIGYM_SLOW"), reason="minutes on a small CPU; set VERIGYM_SLOW=1")
def test_driver_run_tiny_learns(tmp_path):
    """The README's first command, shipped config unchanged: validation reward rises by RL."""
    out = _run(tmp_path, "logger.progress_bar=false", timeout=1200)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    val = summary["validation"]
    assert val[0][0] == 0 and val[-1][0] == 600
    assert val[-1][1] >= val[0][1] + 0.25, val  # the bar, on the final value (not the best one)
    rows = [r for r in _metrics(tmp_path / "run") if "validation/reward" in r]
    for env in ("math", "reasoning_gym"):  # every environment of the blend rises
        assert rows[-1][f"validation/reward/{env}"] > rows[0][f"validation/reward/{env}"], (env, rows[0], rows[-1])
    assert summary["in_flight_weight_updates"] > 0 and summary["lag"]["mixed_version_samples_frac"] > 0
