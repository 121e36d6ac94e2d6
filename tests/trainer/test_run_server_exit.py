"""The servers a real `driver run` starts, killed as a crash or the OOM killer would kill them:

* a server that dies mid-run (an environment server, the generation server) ends the run with one
  line that names it, its log and where the run stopped, status 1, no traceback, no hang, and no
  process of the run left;
* a driver killed with SIGKILL (no cleanup of its own) takes its servers with it: the kernel sends
  them SIGTERM (trainer/child_servers.py).
"""
import json
import os
import signal
import subprocess

import psutil
import pytest

from tests.trainer.driver_process import start_run, wait_for_training

pytest.importorskip("ray")


def _server(kids: list[psutil.Process], words: str) -> psutil.Process:
    return next(k for k in kids if words in " ".join(k.cmdline()))


def _end(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.mark.parametrize("which", ["envs serve", "envs model serve"])
def test_a_server_that_dies_mid_run_ends_it_with_one_line(tmp_path, which):
    backend = ["policy.generation.backend=server"] if which == "envs model serve" else []
    proc, run, out = start_run(tmp_path, *backend)
    try:
        wait_for_training(proc, run, out)
        kids = psutil.Process(proc.pid).children(recursive=True)
        victim = _server(kids, "serve math --host" if which == "envs serve" else "model serve")
        victim.kill()  # the server process alone, as a crash: not its group
        rc = proc.wait(timeout=90)  # no hang
    finally:
        _end(proc)
    text = out.read_text(errors="replace")
    assert rc == 1, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    last = text.strip().splitlines()[-1]
    what = "the environment server 'math'" if which == "envs serve" else "the generation server"
    log = run / ("env_logs/math.log" if which == "envs serve" else "generation_server.log")
    assert last.startswith(f"driver run: {what} ({which}, pid {victim.pid}) was killed by SIGKILL during the run; "
                           f"its log: {log} (last line: "), last
    assert "; stopped at step " in last and last.endswith("fix the cause, then rerun the same command"), last
    error_log = (run / "error.log").read_text()
    assert f"pid {victim.pid}" in error_log and f"the last lines of {log}:" in error_log
    assert not (run / "summary.json").exists()  # it did not pass for a finished run
    step = int(last.split("; stopped at step ")[1].split(";")[0])
    if "final checkpoint written" in last:  # a rerun resumes there
        state = json.loads((run / "checkpoints" / f"step_{step:06d}" / "state.json").read_text())
        assert state["step"] == step
    # samples the dead server cut short were masked with a failure class, never scored
    for row in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()):
        if "train/failed_frac" in row:
            assert row["train/failed_frac"] == row["train/masked_frac"], row
    _, alive = psutil.wait_procs(kids, timeout=30)
    assert not alive, [(k.pid, k.cmdline()) for k in alive]


def test_a_killed_driver_takes_its_servers_and_ray_with_it(tmp_path):
    """SIGKILL leaves the driver no chance to stop anything: its environment servers (each with its
    workers) and its generation server get SIGTERM from the kernel and drain; Ray's head follows by
    fate sharing; the reaper (trainer/reaper.py) ends Ray's agents and workers, which would outlive
    the driver by a minute or more."""
    proc, run, out = start_run(tmp_path, "policy.generation.backend=server")
    ours: list[psutil.Process] = []
    try:
        wait_for_training(proc, run, out)
        ours = psutil.Process(proc.pid).children(recursive=True)
        servers = [k for k in ours if "servers.cli" in " ".join(k.cmdline())]
        assert _server(servers, "serve math --host") and _server(servers, "model serve")
        assert _server(ours, "trainer.reaper") and any(k.name() == "raylet" for k in ours)
        assert any("DashboardAgent" in " ".join(k.cmdline()) for k in ours)
        proc.kill()
        proc.wait(timeout=10)
        _, alive = psutil.wait_procs(ours, timeout=45)
        assert not alive, [(k.pid, k.cmdline()) for k in alive]
    finally:
        _end(proc)
        for k in ours:  # whatever a failure left behind
            try:
                k.kill()
            except psutil.NoSuchProcess:
                pass


def test_a_generation_server_that_cannot_start_is_one_line_naming_its_log(tmp_path):
    from trainer.config import load_config
    from trainer.rollout.generation_server import GenerationServer, GenerationServerError

    cfg = load_config("tiny", ["policy.generation.backend=server", "policy.generation.server.device=cuda:99"])
    with pytest.raises(GenerationServerError) as err:
        GenerationServer(cfg, tmp_path).start()
    text = str(err.value)
    assert "\n" not in text and "the generation server (envs model serve, pid " in text, text
    assert f"before it was ready; its log: {tmp_path / 'generation_server.log'} (last line: envs model serve: " in text
