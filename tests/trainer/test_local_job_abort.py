"""`driver run --run local` (the job script on this machine, attached) aborted from outside: SIGTERM
to the driver cancels the job as Ctrl-C does, and SIGKILL (no chance to cancel) still ends it — the
job script gets SIGTERM from the kernel; and an environment server step that dies while the trainer
trains ends the job with status 1 and a line that says so. Every time the job stops in order (the
trainer first, with its final checkpoint, then the environment servers, then Ray) and nothing of it
is left running."""
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.thread_budget import skip_if_short_of_threads

pytest.importorskip("ray")
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("how", ["sigterm", "sigkill", "fleet-dies"])
def test_an_aborted_attached_local_job_leaves_nothing_running(tmp_path, how):
    skip_if_short_of_threads("a local job (Ray, the fleet, the trainer)")
    log_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "trainer.cli", "run", "--blend", "tiny", "--run", "local", "--env-file",
           str(REPO / "examples" / "env.toml"), "--data-dir", str(tmp_path / "data"), f"logger.log_dir={log_dir}",
           "grpo.max_num_steps=100000", "grpo.num_prompts_per_step=2", "grpo.num_generations_per_prompt=4",
           "grpo.val_period=0", "grpo.val_at_start=false", "policy.warm_start.num_steps=2", "logger.progress_bar=false"]
    out = tmp_path / "out.txt"
    with open(out, "wb") as log:
        driver = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True)
    job: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 240
        metrics = log_dir / "metrics.jsonl"
        while not (metrics.exists() and any("train/reward" in x for x in metrics.read_text().splitlines())):
            assert driver.poll() is None, out.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, "no training step in time:\n" + out.read_text(errors="replace")[-3000:]
            time.sleep(0.3)
        job = psutil.Process(driver.pid).children(recursive=True)
        roles = " ".join(" ".join(p.cmdline()) for p in job)
        assert "ray_node head" in roles and "fleet_steps serve" in roles and "--fleet-file" in roles
        if how == "sigterm":
            driver.send_signal(signal.SIGTERM)
            rc = driver.wait(timeout=150)
            assert rc == 143, out.read_text(errors="replace")[-3000:]  # the job's status: stopped by SIGTERM
            assert "cancelling job local-" in out.read_text(errors="replace")
        elif how == "sigkill":
            driver.kill()
            driver.wait(timeout=10)
        else:  # the fleet step's leader dies (its envs serve gets SIGTERM from the kernel and goes too)
            leader = next(p for p in job if "fleet_steps serve" in " ".join(p.cmdline()))
            leader.kill()
            assert driver.wait(timeout=150) == 1, out.read_text(errors="replace")[-3000:]
        _, alive = psutil.wait_procs(job, timeout=150)
        assert not alive, [(p.pid, p.cmdline()) for p in alive]
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        for p in job:  # whatever a failure left behind
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
    text = next((log_dir / "job").glob("local-*.log")).read_text(errors="replace")
    # in order: the trainer stopped first (a checkpoint when its state allowed one), then servers and Ray
    assert text.index("driver: stopped at step") < text.index("stopping the environment servers and Ray")
    if how == "fleet-dies":
        assert f"an environment server step (pid {leader.pid}) exited with 137 during training" in text, text[-3000:]
        assert "job exit status 1" in text
    else:
        assert "job exit status 143" in text
    assert [p.name for p in (log_dir / "job").iterdir() if p.suffix == ".json"] == []  # the fleet file went with the servers
