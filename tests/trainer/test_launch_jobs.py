"""Real jobs: the job script under the ``local`` executor (always) and on a real one-machine Slurm
cluster (scripts/ci_slurm.sh; skipped with the reason when it is not up): Ray started by the job,
the environment fleet behind its readiness gate, the trainer, the job's exit status, the logs and
outputs where docs/cluster.md says, and nothing left running afterwards."""
import json
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from trainer.launch.job_script import FleetSpec, JobSpec
from trainer.launch.profiles import LocalProfile, load_profile
from trainer.launch.submit import TERMINAL_STATES, launch, slurm_job_state
from tests.thread_budget import RAY_RUN_THREADS, skip_if_short_of_threads

pytest.importorskip("ray")
REPO = Path(__file__).resolve().parents[2]
EXAMPLE_ENV = REPO / "examples" / "env.toml"


def _leftovers(marker: str) -> list[str]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            cmd = " ".join(p.info["cmdline"] or [])
        except psutil.Error:
            continue
        if marker in cmd:
            found.append(cmd[:200])
    return found


# The trainer of the local job: checks what the job promises it (fleet file with healthy servers,
# the job's own Ray), then exits 7 so that the status has to travel back.
_CHECKER = r"""
import json, os, urllib.request
urls = json.load(open(os.environ["VERIGYM_FLEET_FILE"]))
assert sorted(urls) == ["math", "mcqa"], urls
for env, us in urls.items():
    for u in us:
        assert urllib.request.urlopen(u + "/health", timeout=5).status == 200
import ray
ray.init(address="auto", log_to_driver=False)
print("CHECKED", json.dumps(urls), os.environ["RAY_ADDRESS"], ray.cluster_resources()["CPU"], flush=True)
raise SystemExit(7)
"""


def test_local_executor_runs_ray_fleet_gate_trainer_and_returns_its_status(tmp_path, capsys):
    skip_if_short_of_threads("a local job (Ray, the fleet, the trainer)")
    job = JobSpec(name="verigym-local-test", job_dir=tmp_path / "job", workdir=REPO,
                  trainer_command=(sys.executable, "-c", _CHECKER), fleet=FleetSpec(envs=("math", "mcqa")))
    status = launch(LocalProfile(executor="local"), job, attached=True)
    out = capsys.readouterr().out
    assert status == 7, out[-3000:]
    checked = next(line for line in out.splitlines() if line.startswith("CHECKED"))
    urls = json.JSONDecoder().raw_decode(checked[len("CHECKED "):])[0]
    assert all(u.startswith("http://") for us in urls.values() for u in us)
    assert "fleet gate: 2 server(s) healthy" in out and "job exit status 7" in out
    log = next(job.job_dir.glob("local-*.log"))
    assert "CHECKED" in log.read_text()  # the log holds what was streamed
    assert not job.fleet_file.exists()  # removed with the servers
    run_dir = next(job.job_dir.glob("run-local-*"))
    job_id = run_dir.name[len("run-"):]
    assert _leftovers(f"verigym-ray-{job_id}-") == []  # Ray of the job stopped
    for us in urls.values():  # the servers are gone
        for u in us:
            with pytest.raises(OSError):
                urllib.request.urlopen(u + "/health", timeout=2)


# ---- Slurm -----------------------------------------------------------------------------------
def _slurm_reason() -> str | None:
    if not shutil.which("sbatch"):
        return "Slurm is not installed (CI: scripts/ci_slurm.sh installs and starts it)"
    ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True)
    if "UP" not in ping.stdout:
        return 'Slurm is not up: eval "$(bash scripts/ci_slurm.sh)"'
    return None


slurm = pytest.mark.skipif(_slurm_reason() is not None, reason=_slurm_reason() or "")

SHORT = ["grpo.max_num_steps=2", "grpo.num_prompts_per_step=2", "grpo.num_generations_per_prompt=4",
         "grpo.max_val_samples=4", "grpo.val_period=0", "policy.warm_start.num_steps=2", "checkpointing.save_period=1",
         "logger.progress_bar=false"]


def _driver(tmp_path: Path, mode: str, log_dir: Path, timeout: int) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "trainer.cli", "run", "--blend", "tiny", mode, "local-slurm", "--env-file", str(EXAMPLE_ENV),
           "--data-dir", str(tmp_path / "data"), f"logger.log_dir={log_dir}", *SHORT]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO)


def _job_id(stdout: str) -> str:
    line = next(x for x in stdout.splitlines() if x.startswith("submitted Slurm job "))
    return line.split()[-1]


def _assert_trained(log_dir: Path, job_id: str) -> None:
    log = (log_dir / "job" / f"slurm-{job_id}.log").read_text(errors="replace")
    assert "fleet gate: 2 server(s) healthy: math x1, reasoning_gym x1" in log, log[-3000:]
    assert "run summary" in log and "job exit status 0" in log, log[-3000:]
    assert "srun: error" not in log, log[-3000:]  # every step of a clean job ends with status 0 (Ray's included)
    steps = [json.loads(x)["step"] for x in (log_dir / "metrics.jsonl").read_text().splitlines() if "train/reward" in x]
    assert steps == [1, 2]
    assert json.loads((log_dir / "summary.json").read_text())["steps"] == 2
    assert (log_dir / "checkpoints" / "latest").read_text().strip() == "step_000002"
    assert _leftovers(f"verigym-ray-{job_id}-") == []


@slurm
def test_slurm_tiny_blend_attached_and_detached(tmp_path):
    """`--batch` returns at once with the job id and the log path; `--run` streams the job's log and
    exits with its status. Both jobs run at the same time (each asks Slurm for one CPU)."""
    skip_if_short_of_threads("two Slurm jobs of this user at once (a Ray cluster each)", 2 * RAY_RUN_THREADS)
    t0 = time.monotonic()
    batch_dir, run_dir = tmp_path / "batch", tmp_path / "attached"
    detached = _driver(tmp_path, "--batch", batch_dir, timeout=120)  # also prepares the data both use
    assert detached.returncode == 0, detached.stdout[-3000:] + detached.stderr[-3000:]
    batch_id = _job_id(detached.stdout)
    assert f"log:    {batch_dir}/job/slurm-{batch_id}.log" in detached.stdout
    assert f"follow: squeue -j {batch_id}" in detached.stdout
    assert "run summary" not in detached.stdout  # it did not wait

    attached = _driver(tmp_path, "--run", run_dir, timeout=280)
    assert attached.returncode == 0, attached.stdout[-3000:] + attached.stderr[-3000:]
    run_id = _job_id(attached.stdout)
    assert "run summary" in attached.stdout and "fleet gate: 2 server(s) healthy" in attached.stdout  # streamed
    assert f"job {run_id} finished with exit status 0" in attached.stdout
    _assert_trained(run_dir, run_id)

    deadline = time.monotonic() + 240
    while (state := slurm_job_state(batch_id))[0] not in TERMINAL_STATES:
        assert time.monotonic() < deadline, f"batch job {batch_id} still {state[0]}"
        time.sleep(1)
    assert state == ("COMPLETED", 0), (state, (batch_dir / "job" / f"slurm-{batch_id}.log").read_text()[-3000:])
    _assert_trained(batch_dir, batch_id)
    print(f"both Slurm jobs done in {time.monotonic() - t0:.0f}s")


def _slurm_nodes() -> int:
    if _slurm_reason() is not None:
        return 0
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True).stdout
    return sum(1 for line in out.splitlines() if line.split()[-1] in ("idle", "mixed", "allocated"))


@pytest.mark.skipif(_slurm_nodes() < 3, reason="needs a 3-node Slurm (scripts/ci_slurm.sh starts vg1..vg3 on this machine)")
def test_slurm_three_nodes_ray_spans_two_and_the_fleet_runs_on_the_third(tmp_path, capsys):
    """A real multi-node allocation: the Ray worker joins through srun on the second node, the
    environment servers run on the last node (fleet_nodes = 1), the trainer sees both; [wandb]
    reaches the job, and the trainer's exit status (3) is the job's and the attached command's."""
    skip_if_short_of_threads("a Slurm job of this user (Ray on two nodes)")
    env_file = tmp_path / "env.toml"
    env_file.write_text('[wandb]\nproject = "p3"\n[three]\nexecutor = "slurm"\nnodes = 3\nfleet_nodes = 1\ntime = "00:20:00"\n')
    profile, wandb, _ = load_profile("three", env_file)
    check = ("import json, os, ray; ray.init(address='auto', log_to_driver=False); "
             "print('RAY-NODES', sum(n['Alive'] for n in ray.nodes()), os.environ['WANDB_PROJECT'], "
             "json.dumps(json.load(open(os.environ['VERIGYM_FLEET_FILE'])))); raise SystemExit(3)")
    job = JobSpec(name="verigym-3node-test", job_dir=tmp_path / "job", workdir=REPO,
                  trainer_command=(sys.executable, "-c", check), fleet=FleetSpec(envs=("math",)))
    assert launch(profile, job, attached=True, wandb=wandb) == 3
    out = capsys.readouterr().out
    assert "finished with exit status 3" in out and slurm_job_state(_job_id(out)) == ("FAILED", 3)
    nodes = next(x for x in out.splitlines() if "Ray on" in x)
    ray_nodes, fleet_nodes = nodes.split("Ray on ")[1].split("; environment servers on ")
    assert len(ray_nodes.split()) == 2 and len(fleet_nodes.split()) == 1 and fleet_nodes not in ray_nodes
    assert "RAY-NODES 2 p3 " in out and "fleet gate: 1 server(s) healthy: math x1" in out
    assert _leftovers(f"verigym-ray-{_job_id(out)}-") == []


@slurm
@pytest.mark.train
@pytest.mark.timeout(1200)
def test_slurm_job_starts_the_genrm_model_server_gates_on_it_and_trains_with_no_judge_error(tmp_path, tiny_genrm):
    """`driver run --blend tiny_rlhf -c tiny_rlhf --run PROFILE` where the profile says how to serve the
    GenRM ([P.model_servers.genrm]: `envs model serve` on CPU): the job starts it, gates on /health and
    /v1/models listing tiny_genrm, points the genrm environment at it (env.server_config's other keys
    reach the fleet too) and trains with every sample scored."""
    skip_if_short_of_threads("a Slurm job of this user (Ray, the GenRM server)")
    env_file = tmp_path / "env.toml"
    env_file.write_text('[genrm-slurm]\nexecutor = "slurm"\npartition = "debug"\nnodes = 1\ntime = "00:20:00"\n'
                        f'[genrm-slurm.model_servers.genrm]\nmodel = "tiny_genrm"\nsource = "{tiny_genrm}"\n'
                        'engine = "envs-model"\n')
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "trainer.cli", "run", "--blend", "tiny_rlhf", "-c", "tiny_rlhf", "--run", "genrm-slurm",
           "--env-file", str(env_file), "--data-dir", str(tmp_path / "data"), f"logger.log_dir={run}",
           "grpo.max_num_steps=2", "grpo.val_at_end=false", "logger.progress_bar=false"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1100, cwd=REPO)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "tiny_genrm: started by the job (envs-model" in done.stdout  # the plan
    job_id = _job_id(done.stdout)
    log = (run / "job" / f"slurm-{job_id}.log").read_text(errors="replace")
    ready = next(line for line in log.splitlines() if line.startswith("model server: tiny_genrm ready at "))
    url = ready.rsplit(" ", 1)[-1]
    fleet = next(line for line in log.splitlines() if line.startswith("fleet: ") and "envs serve genrm" in line)
    assert f'genrm.judges.genrm.base_url="{url}"' in fleet and "127.0.0.1:8000" not in fleet  # the job's server, not the default
    assert "genrm.judges.genrm.max_output_tokens=64" in fleet  # env.server_config reached the job's fleet
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["failed_samples"] == 0, summary["failures_by_class"]
    assert "srun: error" not in log and "job exit status 0" in log
    assert _leftovers(f"verigym-ray-{job_id}-") == [] and _leftovers(str(tiny_genrm)) == []  # the model server stopped too
