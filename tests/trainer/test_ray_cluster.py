"""The built-in engine on a real two-"node" Ray cluster on one machine, and a local run next to a
Ray cluster it must not join.

The cluster: ``ray start --head`` and a second ``ray start --address`` (through
trainer/launch/ray_node.py, the job script's own steps), each with its own temp dir and custom
resource: ``verigym_trainer`` on the head, ``verigym_generator`` on the worker. Stopped at teardown.
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.thread_budget import skip_if_short_of_threads

ray = pytest.importorskip("ray")
REPO = Path(__file__).resolve().parents[2]
SHORT = ["grpo.max_num_steps=2", "grpo.num_prompts_per_step=2", "grpo.num_generations_per_prompt=4",
         "grpo.max_val_samples=4", "grpo.val_period=0", "grpo.val_at_start=false", "policy.warm_start.num_steps=2",
         "checkpointing.enabled=false", "logger.progress_bar=false"]


@pytest.fixture(scope="module")
def two_node_cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("raycluster")
    token = tmp / "token"
    token.write_text(os.urandom(32).hex() + "\n")
    token.chmod(0o600)
    # A token of its own: a ~/.ray/auth_token left on a shared machine cannot get in the way.
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
    env.pop("RAY_ADDRESS", None)
    short = Path(f"/tmp/vg-rc-{os.getpid()}")  # Ray's socket paths must stay short
    address_file = tmp / "address"
    logs = [open(tmp / f"{n}.log", "wb") for n in ("head", "worker")]
    node = [sys.executable, "-m", "trainer.launch.ray_node"]
    procs = [subprocess.Popen([*node, "head", "--temp-dir", f"{short}-h", "--address-file", str(address_file), "--num-cpus", "2",
                               "--resources", json.dumps({"verigym_trainer": 1})], env=env, cwd=REPO,
                              stdout=logs[0], stderr=subprocess.STDOUT)]
    try:
        deadline = time.monotonic() + 120
        while not address_file.exists():
            assert procs[0].poll() is None and time.monotonic() < deadline, (tmp / "head.log").read_text()[-3000:]
            time.sleep(0.2)
        address = address_file.read_text().strip()
        procs.append(subprocess.Popen([*node, "worker", "--address", address, "--temp-dir", f"{short}-w", "--num-cpus", "2",
                                       "--resources", json.dumps({"verigym_generator": 1})], env=env, cwd=REPO,
                                      stdout=logs[1], stderr=subprocess.STDOUT))
        wait = subprocess.run([*node, "wait", "--nodes", "2", "--timeout", "120"], env={**env, "RAY_ADDRESS": address},
                              cwd=REPO, capture_output=True, text=True, timeout=180)
        assert wait.returncode == 0, wait.stdout + wait.stderr + (tmp / "worker.log").read_text()[-3000:]
        yield address, env
    finally:
        for p in reversed(procs):
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
        for f in logs:
            f.close()


def _actors(address: str, env: dict[str, str]) -> dict[str, list[str]]:
    """{actor class: [node id, ...]} of every actor the cluster has seen, alive or dead."""
    probe = ("import json, ray\nfrom ray._private import state\n"
             f"ray.init(address={address!r}, log_to_driver=False)\n"
             "nodes = {n['NodeID']: n['Resources'] for n in ray.nodes()}\n"
             "out = {}\n"
             "for a in state.actors().values():\n"
             "    out.setdefault(a['ActorClassName'], []).append(sorted(nodes.get(a['Address']['NodeID'], {})))\n"
             "print(json.dumps(out))\n")
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _driver(tmp_path: Path, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "trainer.cli", "run", "--blend", "tiny", "--data-dir", str(tmp_path / "data"),
           f"logger.log_dir={tmp_path / 'run'}", *SHORT, *extra]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=REPO)


def test_local_run_starts_its_own_ray_next_to_a_running_cluster(tmp_path, two_node_cluster):
    """RAY_ADDRESS names another cluster (a shared node often has one): a run without
    cluster.ray_address starts its own Ray instead of joining it (it used to crash there)."""
    address, env = two_node_cluster
    skip_if_short_of_threads("a local run next to a running Ray cluster")
    before = _actors(address, env)
    out = _driver(tmp_path, {**env, "RAY_ADDRESS": address})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "When connecting to an existing cluster" not in out.stderr
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["steps"] == 2
    assert _actors(address, env) == before  # nothing of the run was placed on the other cluster


def test_engine_joins_the_cluster_with_trainer_and_generators_on_different_nodes(tmp_path, two_node_cluster):
    address, env = two_node_cluster
    skip_if_short_of_threads("a run on a two-node Ray cluster of this user")
    out = _driver(tmp_path, env, f"cluster.ray_address={address}", "cluster.num_generation_workers=2",
                  "cluster.trainer_resources={verigym_trainer: 1}", "cluster.generator_resources={verigym_generator: 0.5}")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert f"ray: {address}" in out.stdout
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["generated_tokens"] > 0
    placed = _actors(address, env)
    trainer_node = [r for r in placed["TrainerWorker"]]
    generator_nodes = placed["GeneratorWorker"]
    assert len(trainer_node) == 1 and "verigym_trainer" in trainer_node[0]
    assert len(generator_nodes) == 2 and all("verigym_generator" in n for n in generator_nodes)
