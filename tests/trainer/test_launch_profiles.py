"""env.toml profiles and the job script text (no scheduler needed): every key checked, the
Nemotron layout (``[wandb]``, ``extends``, run/batch partitions), and what the script asks Slurm for."""
import os
import subprocess
from pathlib import Path

import pytest

from trainer.launch.job_script import FleetSpec, JobSpec, render_job_script
from trainer.launch.profiles import (LocalProfile, ProfileError, SlurmProfile, find_env_file, load_env_file,
                                     load_profile)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "env.toml"


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "env.toml"
    p.write_text(text)
    return p


def test_shipped_example_loads_and_has_the_ci_profiles():
    env = load_env_file(EXAMPLE)
    assert isinstance(env.profile("local"), LocalProfile)
    ci = env.profile("local-slurm")
    assert isinstance(ci, SlurmProfile) and ci.nodes == 1 and ci.container_image is None
    big = env.profile("my-cluster-big")  # extends my-cluster
    assert isinstance(big, SlurmProfile) and big.account == env.profile("my-cluster").account and big.nodes > 1


def test_profile_keys_extends_and_partitions(tmp_path):
    path = _write(tmp_path, """
[wandb]
project = "verigym"
entity = "team"

[base]
executor = "slurm"
account = "acct"
partition = "batch"
run_partition = "interactive"
time = "01:00:00"

[gpu]
extends = "base"
nodes = 4
gpus_per_node = 8
mem = "0"
exclusive = true
container = "/images/rl.sqsh"
mounts = ["/lustre:/lustre"]
fleet_nodes = 1
""")
    env = load_env_file(path)
    assert env.wandb.project == "verigym" and env.wandb.entity == "team"
    gpu = env.profile("gpu")
    assert (gpu.account, gpu.nodes, gpu.time, gpu.container_image, gpu.fleet_nodes) == ("acct", 4, "01:00:00", "/images/rl.sqsh", 1)
    assert gpu.partition_for(attached=True) == "interactive" and gpu.partition_for(attached=False) == "batch"
    with pytest.raises(ProfileError, match=r"no profile \[gpus\]; did you mean 'gpu'"):
        env.profile("gpus")


@pytest.mark.parametrize("table, message", [
    ('executor = "slurm"\npartion = "batch"', r"\[c\]: unknown key 'partion': did you mean 'partition'\?"),
    ('executor = "slurm"\ngpus_per_nod = 8', r"did you mean 'gpus_per_node'"),
    ('executor = "local"\naccount = "a"', r"unknown key 'account'"),
    ('executor = "slurm"\ntunnel = "ssh"', r"'tunnel' is not supported: .*login node"),
    ('executor = "lepton"', r"executor 'lepton' is not supported"),
    ('executor = "slurm"\nmounts = ["/a:/a"]', r"mounts apply to the container: set container_image"),
    ('executor = "slurm"\nnodes = 2\nfleet_nodes = 2', r"leaves no node for Ray"),
    ('executor = "slurm"\nnodes = 0', r"nodes: Input should be greater than or equal to 1"),
    ('extends = "nope"', r"extends unknown profile 'nope'"),
])
def test_bad_profiles_are_errors_that_say_what_to_fix(tmp_path, table, message):
    path = _write(tmp_path, f"[c]\n{table}\n")
    with pytest.raises(ProfileError, match=message):
        load_env_file(path).profile("c")


def test_wandb_and_reserved_sections_are_checked(tmp_path):
    with pytest.raises(ProfileError, match=r"\[wandb\]: unknown key 'projet': did you mean 'project'"):
        load_env_file(_write(tmp_path, '[wandb]\nprojet = "x"\n'))
    with pytest.raises(ProfileError, match=r"\[artifacts\] is a Nemotron system section"):
        load_env_file(_write(tmp_path, '[artifacts]\nbackend = "file"\n'))


def test_extends_loop_is_reported(tmp_path):
    with pytest.raises(ProfileError, match="loop: a -> b -> a"):
        load_env_file(_write(tmp_path, '[a]\nextends = "b"\n[b]\nextends = "a"\n')).profile("a")


def test_a_broken_profile_blocks_only_itself(tmp_path, capsys):
    """One mistyped key in an unrelated profile: the profile asked for loads (with a warning naming
    the other), the broken one is refused with its reason, and a profile extending it is refused too."""
    path = _write(tmp_path, '[good]\nexecutor = "local"\n[bad]\nexecutor = "slurm"\npartion = "x"\n'
                            '[child]\nextends = "bad"\n')
    profile, _, _ = load_profile("good", path)
    assert isinstance(profile, LocalProfile)
    err = capsys.readouterr().err
    assert "warning: ignoring profile [bad]" in err and "did you mean 'partition'" in err
    assert "[good]" not in err
    with pytest.raises(ProfileError, match=r"\[bad\]: unknown key 'partion'"):
        load_profile("bad", path)
    with pytest.raises(ProfileError, match=r"\[child\]: unknown key 'partion'"):
        load_profile("child", path)


def test_env_file_lookup_order(tmp_path, monkeypatch):
    (tmp_path / "sub" / "deeper").mkdir(parents=True)
    found = _write(tmp_path, '[x]\nexecutor = "local"\n')
    monkeypatch.delenv("VERIGYM_ENV_FILE", raising=False)
    assert find_env_file(start=tmp_path / "sub" / "deeper") == found  # walks up
    other = tmp_path / "other.toml"
    other.write_text('[y]\nexecutor = "local"\n')
    monkeypatch.setenv("VERIGYM_ENV_FILE", str(other))
    assert find_env_file(start=tmp_path) == other  # the variable beats the walk
    assert find_env_file(found, start=tmp_path) == found  # --env-file beats the variable
    monkeypatch.setenv("VERIGYM_ENV_FILE", str(tmp_path / "missing.toml"))
    with pytest.raises(ProfileError, match=r"missing.toml does not exist \(from \$VERIGYM_ENV_FILE\)"):
        load_profile("y")
    monkeypatch.delenv("VERIGYM_ENV_FILE")
    with pytest.raises(ProfileError, match="no env.toml in .* or its parents"):
        find_env_file(start=Path("/"))


def _job(tmp_path: Path, **kw) -> JobSpec:
    return JobSpec(name="verigym-test", job_dir=tmp_path / "job", trainer_command=("python3", "-m", "trainer.cli", "run", "a.b=it's"),
                   fleet=FleetSpec(envs=("math", "mcqa"), overrides=("math.x=1",)), workdir=tmp_path, **kw)


def test_slurm_script_asks_for_what_the_profile_says(tmp_path):
    profile = SlurmProfile(executor="slurm", account="acct", partition="batch", batch_partition="backfill", nodes=4,
                           ntasks_per_node=1, gpus_per_node=8, cpus_per_task=16, mem="0", exclusive=True, time="02:00:00",
                           container_image="/img.sqsh", mounts=["/lustre:/lustre"], startup_commands=["module load x"],
                           fleet_nodes=1)
    script = render_job_script(profile, _job(tmp_path), attached=False)
    header = [line for line in script.splitlines() if line.startswith("#SBATCH")]
    assert header == ["#SBATCH --job-name=verigym-test", "#SBATCH --nodes=4", "#SBATCH --ntasks-per-node=1",
                      "#SBATCH --time=02:00:00", f"#SBATCH --output={tmp_path}/job/slurm-%j.log", "#SBATCH --account=acct",
                      "#SBATCH --partition=backfill", "#SBATCH --gpus-per-node=8", "#SBATCH --cpus-per-task=16",
                      "#SBATCH --mem=0", "#SBATCH --exclusive"]
    assert "--container-image=/img.sqsh" in script and "--container-mounts=/lustre:/lustre" in script
    assert "\nmodule load x\n" in script and "N_FLEET=1" in script
    assert "PY=python3" in script  # inside the container: the container's python
    assert "'a.b=it'\"'\"'s'" in script  # the trainer's argv is shell-quoted
    assert "math mcqa math.x=1" in script
    assert render_job_script(profile, _job(tmp_path, nodes=109), attached=True).count("#SBATCH --nodes=109") == 1
    assert "#SBATCH --partition=batch" in render_job_script(profile, _job(tmp_path), attached=True)


@pytest.mark.parametrize("profile", [LocalProfile(executor="local"), SlurmProfile(executor="slurm", nodes=3, fleet_nodes=1)])
def test_rendered_script_is_valid_bash(tmp_path, profile):
    script = tmp_path / "job.sh"
    script.write_text(render_job_script(profile, _job(tmp_path), attached=True))
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True).returncode == 0


def test_the_node_split_in_the_script(tmp_path):
    """The bash that splits the allocation: Ray on the first nodes, the fleet on the last fleet_nodes."""
    profile = SlurmProfile(executor="slurm", nodes=4, fleet_nodes=1)
    script = render_job_script(profile, _job(tmp_path), attached=True)
    split = script[script.index("N_FLEET="):script.index('log "job $JOB_ID')]
    probe = f'NODES=(n1 n2 n3 n4)\n{split}\necho "${{RAY_NODES[*]}}|${{FLEET_NODES[*]}}"\n'
    out = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, env={**os.environ})
    assert out.stdout.strip() == "n1 n2 n3|n4"
    probe0 = probe.replace("N_FLEET=1", "N_FLEET=0")
    assert subprocess.run(["bash", "-c", probe0], capture_output=True, text=True).stdout.strip() == "n1 n2 n3 n4|n1"


def test_steps_share_a_named_container_per_node_and_ray_gets_the_nodes_cpus(tmp_path):
    """Pyxis: a step's unnamed container has a private /tmp, so the trainer step would not see the Ray
    step's sockets; every step is named per job (one container per node). The fleet and model servers
    run in the fleet image when the profile names one. The Ray step asks for all the node's CPUs."""
    profile = SlurmProfile(executor="slurm", nodes=2, container_image="/img/rl.sqsh", fleet_container_image="/img/vg.sqsh",
                           mounts=["/lustre:/lustre"])
    script = render_job_script(profile, _job(tmp_path), attached=True)
    block = script[script.index("  MAIN_CONTAINER="):script.index('  signal_role() {')]
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "srun").write_text('#!/bin/bash\necho "$@"\n')
    (fake / "srun").chmod(0o755)
    probe = f'JOB_ID=77\n{block}\n(step ray n1 python -m x)\n(step fleet n2 python -m y)\n(step trainer n1 python -m z)\n'
    out = subprocess.run(["bash", "-c", probe], capture_output=True, text=True,
                         env={**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "SLURM_CPUS_ON_NODE": "96"})
    ray, fleet, trainer = out.stdout.strip().splitlines()
    assert "--cpus-per-task=96" in ray and "--container-image=/img/rl.sqsh --container-name=verigym-77" in ray
    assert "--container-image=/img/vg.sqsh --container-name=verigym-fleet-77" in fleet and "--cpus-per-task" not in fleet
    assert "--container-name=verigym-77" in trainer and "--container-mounts=/lustre:/lustre" in trainer
    assert trainer.endswith("python -m z")
    with pytest.raises(ValueError, match="fleet_container_image needs container_image"):
        SlurmProfile(executor="slurm", fleet_container_image="/img/vg.sqsh")
