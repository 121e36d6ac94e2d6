"""Ctrl-C / SIGTERM on a real `driver run`: a prompt, clean stop with nothing left behind."""
import json
import os
import signal
import time

import psutil
import pytest

from tests.trainer.driver_process import start_run, wait_for_training
from trainer.grpo.weight_sync import SHM_PREFIX, shm_base


# Each case is a real run (~20 s, mostly Ray actors importing torch); the default suite runs the
# Ctrl-C one, the other two are opt-in to keep `pytest tests/trainer` short: VERIGYM_SLOW=1.
_opt_in = [pytest.mark.slow, pytest.mark.skipif(not os.environ.get("VERIGYM_SLOW"), reason="set VERIGYM_SLOW=1")]


@pytest.mark.parametrize("how", ["ctrl-c", pytest.param("sigterm", marks=_opt_in),
                                 pytest.param("ctrl-c-twice", marks=_opt_in)])
def test_signal_stops_a_training_run_cleanly(tmp_path, how):
    """Ctrl-C reaches the whole process group as from a terminal; SIGTERM only the driver (and Ray
    must not keep its own SIGTERM handler); a second Ctrl-C forces the exit. Every case: the exit
    code, no process of the run left, no shared-memory weights left, a resume line."""
    pytest.importorskip("ray")
    proc, run, out_file = start_run(tmp_path)
    output = lambda: out_file.read_text(errors="replace")  # noqa: E731
    try:
        wait_for_training(proc, run, out_file)
        kids = psutil.Process(proc.pid).children(recursive=True)
        assert any("--ready-file" in k.cmdline() for k in kids)  # the math server it started (envs serve)
        t0 = time.monotonic()
        if how == "sigterm":
            proc.send_signal(signal.SIGTERM)
        else:
            os.killpg(proc.pid, signal.SIGINT)
            if how == "ctrl-c-twice":
                time.sleep(0.3)
                os.killpg(proc.pid, signal.SIGINT)
        rc = proc.wait(timeout=60)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    out = output()
    assert rc == (143 if how == "sigterm" else 130), out[-3000:]
    assert took < 60
    _, alive = psutil.wait_procs(kids, timeout=15)
    assert not alive, [(k.pid, k.cmdline()) for k in alive]
    assert not list(shm_base().glob(f"{SHM_PREFIX}{proc.pid}-*"))
    if how == "ctrl-c-twice":
        assert "forcing exit" in out
        return
    assert "resume with the same command" in out
    line = next(x for x in out.splitlines() if "resume with the same command" in x)
    step = int(line.split("stopped at step ")[1].split()[0])
    assert step >= 1
    ckpt = run / "checkpoints"
    if "final checkpoint written" in line:
        assert json.loads((ckpt / (ckpt / "latest").read_text() / "state.json").read_text())["step"] == step
    else:  # stopped in the middle of a step: nothing newer than the last checkpoint (none here)
        assert not (ckpt / "latest").exists()
