"""`driver run --blend tiny_rlhf -c tiny_rlhf` end to end, as the README has it: a tiny GenRM taught
the verdict format (environments/genrm/tiny_genrm.py), served by `envs model serve` (the local
OpenAI-compatible model server), the genrm environment server started by the driver and pointed at
it through env.server_config, GRPO with the KL penalty against a frozen reference. The run must
complete with rewards flowing from the GenRM and train/kl_penalty > 0 once the policy has moved.
The GenRM's scores are noise by construction; nothing here is about the policy improving."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")
# training the tiny GenRM and three GRPO steps whose rewards come from a CPU model server
pytestmark = [pytest.mark.train, pytest.mark.timeout(1800)]


@pytest.fixture
def model_server(tiny_genrm, tmp_path):
    ready = tmp_path / "model_ready.json"
    log = open(tmp_path / "model_server.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "servers.cli", "model", "serve", str(tiny_genrm), "--port", "0",
                             "--ready-file", str(ready)], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180
        while not ready.exists():
            assert proc.poll() is None, (tmp_path / "model_server.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "model server not ready"
            time.sleep(0.2)
        yield json.loads(ready.read_text())
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def test_tiny_rlhf_runs_with_a_local_genrm_rewards_flow_and_kl_acts(tmp_path, model_server):
    assert model_server["model"] == "tiny_genrm"
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "trainer.cli", "run", "--blend", "tiny_rlhf", "-c", "tiny_rlhf",
           "--data-dir", str(tmp_path / "data"), f"logger.log_dir={run}", "grpo.max_num_steps=3",
           f"env.server_config.genrm.judges.genrm.base_url={model_server['base_url']}"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=os.getcwd())
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "environments to start: genrm" in out.stdout and "run summary" in out.stdout
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    steps = [r for r in rows if "train/reward" in r]
    assert [r["step"] for r in steps] == [1, 2, 3]
    summary = json.loads((run / "summary.json").read_text())
    total = 3 * 4 * 4
    # rewards flow: most samples were scored by the GenRM (a comparison it botched is masked, not scored)
    assert summary["failed_samples"] <= total // 2, summary["failures_by_class"]
    assert any(r.get("train/reward/genrm", 0.0) != 0.0 for r in steps)
    # the KL penalty against the frozen reference is logged and acts once the policy has moved
    assert steps[0]["train/kl_penalty"] == 0.0 and all(r["train/kl_penalty"] > 0 for r in steps[1:])
    env_log = (run / "env_logs" / "genrm.log").read_text()
    assert "Traceback" not in env_log


def test_env_server_config_reaches_the_fleet_of_a_job(tmp_path, model_server):
    """The issue's reproduction: `driver run --blend tiny_rlhf -c tiny_rlhf --run local` with the GenRM's
    URL given in env.server_config. The job's fleet must get it (before: every sample judge_error,
    the job exiting 0). The URL is the user's own server, so the job starts none and checks it."""
    run = tmp_path / "run"
    env_file = tmp_path / "env.toml"
    env_file.write_text('[local]\nexecutor = "local"\n')  # no [local.model_servers]: the user's own GenRM
    cmd = [sys.executable, "-m", "trainer.cli", "run", "--blend", "tiny_rlhf", "-c", "tiny_rlhf", "--run", "local",
           "--env-file", str(env_file), "--data-dir", str(tmp_path / "data"), f"logger.log_dir={run}",
           "grpo.max_num_steps=1", "grpo.val_at_end=false", "logger.progress_bar=false",
           f"env.server_config.genrm.judges.genrm.base_url={model_server['base_url']}"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert f"tiny_genrm: external at {model_server['base_url']}" in out.stdout
    assert f"model server: tiny_genrm served at {model_server['base_url']} (external)" in out.stdout
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 1 and summary["failed_samples"] == 0, summary["failures_by_class"]
