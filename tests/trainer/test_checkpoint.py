"""Kill a real `driver run` subprocess mid-run, resume it: no prompt lost, none repeated."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

pytest.importorskip("ray")

from trainer.fleet import Fleet  # noqa: E402
from trainer.grpo.weight_sync import SHM_PREFIX, shm_base  # noqa: E402

from trainer.grpo.synthetic import arithmetic_rows  # noqa: E402


def _kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL the run and every process it started (Ray head, workers), by pid."""
    try:
        kids = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        kids = []
    proc.send_signal(signal.SIGKILL)
    for k in kids:
        try:
            k.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    proc.wait()


def test_kill_and_resume_loses_and_repeats_no_prompt(tmp_path):
    rows = arithmetic_rows(60, 2)
    train = tmp_path / "train.jsonl"
    train.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    steps, B = 16, 2  # long enough that the kill at step 2 lands mid-run on a fast, quiet machine
    (tmp_path / "fleet").mkdir()
    with Fleet(["math"], log_dir=tmp_path / "fleet") as fleet:
        cmd = [sys.executable, "-m", "trainer.cli", "run", f"data.train_data_path={train}", "data.blend=null",
               "data.shuffle=false", f"logger.log_dir={tmp_path / 'run'}", "logger.progress_bar=false",
               f"grpo.max_num_steps={steps}", f"grpo.num_prompts_per_step={B}", "grpo.num_generations_per_prompt=4",
               "grpo.val_period=0", "grpo.val_at_start=false", "grpo.val_at_end=false", "policy.warm_start.num_steps=5",
               "checkpointing.save_period=1", "checkpointing.keep_top_k=null", "policy.generation_batch_size=1",
               f"env.urls.math={fleet.urls['math']}"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=os.getcwd())
        ckpt = tmp_path / "run" / "checkpoints"
        deadline = time.monotonic() + 240
        try:
            while not (ckpt / "step_000002").exists():
                assert proc.poll() is None, proc.stdout.read().decode()[-3000:]
                assert time.monotonic() < deadline, "no checkpoint in time"
                time.sleep(0.2)
        finally:
            _kill_tree(proc)  # mid-run, with prompts in flight
        killed_at = json.loads((ckpt / (ckpt / "latest").read_text() / "state.json").read_text())
        assert 2 <= killed_at["step"] < steps
        # SIGKILL cannot clean up: the killed run's weight files stay in shared memory ...
        left = list(shm_base().glob(f"{SHM_PREFIX}{proc.pid}-*"))
        assert left and any(d.glob("v*.safetensors") for d in left)
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=os.getcwd())
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        assert "resumed from" in out.stdout
        # ... until the next run starts and removes the folders whose owner pid is dead
        assert not any(d.exists() for d in left) and "weight folder(s) of dead runs" in out.stdout
    final = json.loads((ckpt / f"step_{steps:06d}" / "state.json").read_text())
    consumed = final["buffer"]["consumed"]
    # every prompt trained exactly once, in the data order (shuffle off): nothing lost, nothing repeated
    assert consumed == [str(i) for i in range(steps * B)]  # task ids: the rows' positions
