"""A real `driver run` as a separate process, for the tests that stop, kill or break one mid-run:
the tiny policy on 60 synthetic math rows, one math server, steps enough never to finish first."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from trainer.grpo.synthetic import arithmetic_rows


def start_run(tmp_path: Path, *overrides: str, steps: int = 100000) -> tuple[subprocess.Popen, Path, Path]:
    """The run, in its own session (as a terminal job is its own process group): ``(process, log_dir,
    the file its output goes to)``."""
    rows = [{**r, "env": "math"} for r in arithmetic_rows(60, 5)]
    for r in rows:
        r.pop("agent_ref")
    train = tmp_path / "train.jsonl"
    train.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "trainer.cli", "run", "--no-resume", f"data.train_data_path={train}", "data.blend=null",
           f"logger.log_dir={run}", "logger.progress_bar=false", f"grpo.max_num_steps={steps}", "grpo.num_prompts_per_step=2",
           "grpo.num_generations_per_prompt=4", "grpo.val_period=0", "grpo.val_at_start=false",
           "policy.warm_start.num_steps=2", "checkpointing.save_period=1000", "policy.generation_batch_size=1", *overrides]
    out = tmp_path / "out.txt"
    with open(out, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=os.getcwd(), start_new_session=True)
    return proc, run, out


def wait_for_training(proc: subprocess.Popen, log_dir: Path, out: Path, timeout_s: float = 180) -> None:
    """Until the first GRPO step is in ``metrics.jsonl``; fails with the run's output if it exits first."""
    deadline = time.monotonic() + timeout_s
    metrics = log_dir / "metrics.jsonl"
    while not (metrics.exists() and any("train/reward" in x for x in metrics.read_text().splitlines())):
        assert proc.poll() is None, out.read_text(errors="replace")[-3000:]
        assert time.monotonic() < deadline, "no training step in time:\n" + out.read_text(errors="replace")[-3000:]
        time.sleep(0.2)
