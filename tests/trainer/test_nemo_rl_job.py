"""The NeMo-RL backend's job on the one-machine Slurm (scripts/ci_slurm.sh), everything real up to
NeMo-RL's entry point: `driver run --backend nemo-rl --run PROFILE` submits `sbatch ... ray.sub` with
the seeds' contract from the profile's NeMo-RL checkout — here tests/trainer/fixture_nemo_rl, a
stand-in that follows ray.sub's contract (its README says where it differs) — and the job runs
verigym's driver.sh in the Ray head's place: it starts the GenRM model server (`envs model serve`
on CPU, the tiny GenRM served under the real GenRM's name), gates on it, starts the fleet pointed
at it, gates, fills the Gym config, and hands over to the stand-in runner, which checks the
environment, config, overrides, Ray cluster, fleet and judge URLs, and exits."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainer.launch.submit import slurm_job_state

pytest.importorskip("ray")
REPO = Path(__file__).resolve().parents[2]
STAND_IN = Path(__file__).resolve().parent / "fixture_nemo_rl"
GENRM = "nvidia/Qwen3-Nemotron-235B-A22B-GenRM-2603"


def _slurm_nodes() -> int:
    if not os.environ.get("SLURM_CONF") and not Path("/etc/slurm/slurm.conf").exists():
        return 0
    try:
        out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.splitlines() if line.split()[-1] in ("idle", "mixed", "allocated"))


@pytest.mark.train
@pytest.mark.timeout(1200)
@pytest.mark.skipif(_slurm_nodes() < 2, reason='needs the one-machine Slurm with 2+ nodes: eval "$(bash scripts/ci_slurm.sh)"')
def test_nemo_rl_job_runs_ray_sub_and_hands_nemo_rl_its_fleet_and_judges(tmp_path, tiny_genrm):
    data = tmp_path / "data"
    prep = subprocess.run([sys.executable, "-m", "trainer.cli", "data", "prep", "--blend", "tiny_rlhf", "--output", str(data)],
                          capture_output=True, text=True, cwd=REPO, timeout=300)
    assert prep.returncode == 0, prep.stderr
    env_file = tmp_path / "env.toml"
    env_file.write_text(
        '[wandb]\nproject = "p-nemo"\n'
        '[standin]\nexecutor = "slurm"\naccount = "acct"\npartition = "debug"\ntime = "00:20:00"\n'
        f'container = "nvcr.io/nvidia/nemo-rl:v0.7.0"\nnemo_rl_dir = "{STAND_IN}"\nfleet_python = "{sys.executable}"\n'
        f'[standin.model_servers.genrm]\nmodel = "{GENRM}"\nsource = "{tiny_genrm}"\nengine = "envs-model"\n')
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "trainer.cli", "run", "--blend", "tiny_rlhf", "-c", "rlhf_test", "--backend", "nemo-rl",
           "--run", "standin", "--env-file", str(env_file), "--data-dir", str(data), f"logger.log_dir={run}",
           "policy.model_name=/ckpt/tiny-policy", "env.server_config.genrm.judges.genrm.max_output_tokens=64",
           f"env.nemo_gym.uv_venv_dir={tmp_path / 'gym-venvs'}"]
    dry = subprocess.run([*cmd, "--dry-run"], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert dry.returncode == 0, dry.stderr
    assert "nodes: 2 x 8 GPUs = cluster.num_nodes 2 (training 1, generation 1) + model servers 0 + fleet 0" in dry.stdout
    assert f"sbatch --nodes=2 --account=acct --job-name=rlhf --partition=debug --time=00:20:00 --exclusive " \
           f"--dependency=singleton --output={run}/nemo_rl/job/slurm-%j.log {STAND_IN}/ray.sub" in dry.stdout
    assert f"{GENRM}: started by the job (envs-model {tiny_genrm}" in dry.stdout
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=1100, env=env)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    job_id = next(x for x in done.stdout.splitlines() if x.startswith("submitted Slurm job ")).split()[3]
    assert slurm_job_state(job_id) == ("COMPLETED", 0)
    line = next(x for x in done.stdout.splitlines() if x.startswith("STAND-IN NEMO-RL OK "))  # streamed from the driver log
    report = json.loads(line[len("STAND-IN NEMO-RL OK "):])
    assert report["cwd"] == str(STAND_IN)  # ray.sub's SLURM_SUBMIT_DIR: the NeMo-RL checkout
    assert report["ray_nodes"] == 2 and report["worker_units"] == 16  # every node of the job in one Ray cluster
    assert list(report["fleet"]) == ["genrm"] and list(report["judges"]) == [GENRM]
    assert report["gym_globals"]["skip_venv_if_present"] is True  # the stand-in's venv was prebuilt
    assert report["overrides"]["checkpointing.checkpoint_dir"] == str(run / "checkpoints")
    logs = run / "nemo_rl" / "job" / f"{job_id}-logs"
    contract = (logs / "contract.txt").read_text()
    assert "CONTAINER=nvcr.io/nvidia/nemo-rl:v0.7.0" in contract and f"{STAND_IN}:{STAND_IN}" in contract
    driver_log = (logs / "ray-driver.log").read_text()
    fleet = next(x for x in driver_log.splitlines() if x.startswith("fleet: ") and "envs serve genrm" in x)
    judge_url = report["judges"][GENRM]
    assert f'genrm.judges.genrm.base_url="{judge_url}"' in fleet  # the job's model server, not config.yaml's default
    assert "genrm.judges.genrm.max_output_tokens=64" in fleet  # env.server_config reached the NeMo-RL job's fleet
    assert "gym_config: NeMo-Gym 0.7.0: verigym_remote from" in driver_log  # the checkout's Gym version chose the form
    assert (tmp_path / "gym-venvs" / "resources_servers" / "verigym_remote" / ".venv" / "bin" / "python").exists()
    assert "envs serve: all servers stopped cleanly" in driver_log and "exit status 0" in driver_log
