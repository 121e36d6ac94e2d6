"""`driver run --backend nemo-rl`: stage presets -> schema-checked NeMo-RL config, Gym config, plan."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from trainer.blends import load_blend
from trainer.config import ConfigError, load_config, load_yaml_with_defaults, resolve_config_path
from trainer.nemo_rl.backend import build_plan, node_roles, split_verigym_keys
from trainer.nemo_rl.gym_config import FleetAddressError, fill_addresses, main as gym_config_main
from trainer.nemo_rl.schema import SchemaError, check_config, load_schema

REPO = Path(__file__).resolve().parents[2]
STAGES = ["rlvr", "swe1", "swe2", "rlhf"]
PRESETS = [f"{s}{v}" for s in STAGES for v in ("", "_small", "_test")]


def driver(*args: str, env: dict[str, str] | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainer.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, **(env or {})}, timeout=300)


def test_schema_is_versioned_against_a_nemo_rl_commit():
    info = load_schema()["nemo_rl"]
    assert info["repo"] == "NVIDIA-NeMo/RL" and len(info["commit"]) == 40
    assert load_schema()["root"].endswith(":MasterConfig")


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_dry_run_writes_a_config_that_passes_the_schema(preset, tmp_path):
    out = tmp_path / "run"
    done = driver("run", "--blend", "rlvr2", "-c", preset, "--backend", "nemo-rl", "--dry-run",
                  f"logger.log_dir={out}", "--data-dir", str(tmp_path / "nodata"),
                  env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")})
    assert done.returncode == 0, done.stderr
    grpo = yaml.safe_load((out / "nemo_rl" / "grpo.yaml").read_text())
    check_config(grpo)  # the file as written, not only the in-memory dict
    assert grpo["data"]["train"]["data_path"] == str((tmp_path / "nodata" / "train.jsonl").resolve())
    assert str((out / "nemo_rl" / "nemo_gym_fleet.yaml").resolve()) in grpo["env"]["nemo_gym"]["config_paths"]
    assert "nodes:" in done.stdout and "environment servers:" in done.stdout and "nothing submitted" in done.stdout


def test_rlvr_preset_carries_the_seed_table():
    cfg = load_yaml_with_defaults(resolve_config_path("rlvr"))
    m, g = cfg["policy"]["megatron_cfg"], cfg["grpo"]
    assert (g["num_prompts_per_step"], g["num_generations_per_prompt"]) == (256, 16)
    assert cfg["policy"]["max_total_sequence_length"] == 65536
    assert (m["tensor_model_parallel_size"], m["pipeline_model_parallel_size"], m["context_parallel_size"],
            m["expert_model_parallel_size"], m["sequence_parallel"]) == (4, 1, 8, 8, True)
    assert (m["optimizer"]["lr"], cfg["loss_fn"]["reference_policy_kl_penalty"], g["overlong_filtering"]) == (3e-6, 0.0, False)
    a = g["async_grpo"]
    assert (a["max_trajectory_age_steps"], a["in_flight_weight_updates"], a["recompute_kv_cache_after_weight_updates"]) == (1, True, False)
    roles = node_roles(cfg, model_server_nodes=5)  # the judges come on top of cluster.num_nodes
    assert (roles.total, roles.cluster_nodes, roles.training, roles.generation) == (109, 104, 32, 72)
    for stage, nodes, pg, seq, lr, kl, overlong in [("swe1", 64, (64, 16), 131072, 1e-6, 0.0, True),
                                                     ("swe2", 64, (16, 32), 196608, 1e-6, 0.0, True),
                                                     ("rlhf", 64, (128, 16), 49152, 1e-6, 1e-4, False)]:
        c = load_yaml_with_defaults(resolve_config_path(stage))
        assert c["cluster"]["num_nodes"] == nodes and node_roles(c).training == 32
        assert (c["grpo"]["num_prompts_per_step"], c["grpo"]["num_generations_per_prompt"]) == pg
        assert c["policy"]["max_total_sequence_length"] == seq
        assert c["policy"]["megatron_cfg"]["optimizer"]["lr"] == lr
        assert c["loss_fn"]["reference_policy_kl_penalty"] == kl and c["grpo"]["overlong_filtering"] is overlong


@pytest.mark.parametrize("override, expected", [
    ("grpo.num_prompt_per_step=4", "did you mean 'grpo.num_prompts_per_step'"),
    ("policy.megatron_cfg.tensor_parallel_size=2", "did you mean 'policy.megatron_cfg.tensor_model_parallel_size'"),
    ("grpo.reference_policy_kl_penalty=0.1", "is a key of loss_fn.reference_policy_kl_penalty"),
    ("trainer.max_steps=3", "trainer: unknown key"),
    ("grpo.num_prompts_per_step=many", "grpo.num_prompts_per_step: expected an integer, got 'many'"),
    ("grpo.async_grpo.in_flight_weight_updates=[1]", "expected true/false"),
    ("policy.megatron_cfg.recompute_granularity=partial", "one of 'full', 'selective'"),
    ("env.nemo_gym.num_gpu_node=3", "did you mean 'env.nemo_gym.num_gpu_nodes'"),
])
def test_perturbed_keys_are_errors_naming_the_fix(override, expected):
    blend = load_blend("tiny")
    with pytest.raises(SchemaError) as info:
        build_plan("rlvr_test", [override], blend, Path("/nonexistent/data"))
    assert expected in str(info.value)


def test_perturbed_config_dict_lists_every_problem():
    cfg = split_verigym_keys(load_yaml_with_defaults(resolve_config_path("rlhf")))[0]
    cfg["grpo"]["penalize_invalid_tool_call"] = True  # in the official Super YAML, read by no code
    cfg["policy"]["max_total_sequence_length"] = "long"
    cfg["checkpointing"]["keep_top_k"] = 2.5
    del cfg["cluster"]
    with pytest.raises(SchemaError) as info:
        check_config(cfg)
    problems = info.value.problems
    assert any(p.startswith("grpo.penalize_invalid_tool_call") for p in problems)
    assert any(p.startswith("policy.max_total_sequence_length: expected an integer") for p in problems)
    assert any(p.startswith("checkpointing.keep_top_k") for p in problems)
    assert "cluster: missing section (NeMo-RL requires it)" in problems


def test_interpolations_and_unknown_gym_instances():
    cfg = split_verigym_keys(load_yaml_with_defaults(resolve_config_path("rlvr")))[0]
    cfg["policy"]["max_total_sequence_length"] = "${oc.env:SEQ}"  # resolved by NeMo-RL's OmegaConf
    cfg["env"]["nemo_gym"]["math_judge"] = {"responses_api_models": {"vllm_model": {"entrypoint": "app.py"}}}
    check_config(cfg)
    cfg["env"]["nemo_gym"]["math_judge"] = 3  # not a Gym instance: a misspelled knob
    with pytest.raises(SchemaError):
        check_config(cfg)


def test_built_in_engine_rejects_nemo_rl_only_keys():
    with pytest.raises(ConfigError, match="NeMo-RL's, and the built-in engine cannot act on it"):
        load_config("rlvr")
    with pytest.raises(ConfigError, match="did you mean 'grpo.num_prompts_per_step'"):
        load_config("tiny", ["grpo.num_prompt_per_step=3"])


def test_gym_config_routes_agent_names_to_fleet_addresses(tmp_path):
    prepared = tmp_path / "data"
    prepared.mkdir()
    (prepared / "manifest.json").write_text(json.dumps({"counts": {"train_per_env": {"math": 3, "mcqa": 2},
                                                                    "val_per_env": {"math": 1}}}))
    plan = build_plan("rlvr_test", [f"logger.log_dir={tmp_path / 'run'}"], load_blend("tiny"), prepared)
    assert [e.name for e in plan.envs] == ["math", "mcqa"]
    template = plan.gym_template
    assert template["math_with_judge_simple_agent"]["responses_api_agents"]["simple_agent"]["resources_server"] == \
        {"type": "resources_servers", "name": "math"}
    assert template["mcqa"]["resources_servers"]["verigym_remote"]["domain"] == "knowledge"
    template_file = tmp_path / "t.yaml"
    template_file.write_text(yaml.safe_dump(template))
    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps({"servers": {"math": "http://10.0.0.5:41001", "mcqa": "http://10.0.0.6:41002"}}))
    assert gym_config_main(["--template", str(template_file), "--fleet", str(fleet), "--output", str(tmp_path / "g.yaml")]) == 0
    filled = yaml.safe_load((tmp_path / "g.yaml").read_text())
    assert filled["mcqa"]["resources_servers"]["verigym_remote"]["host"] == "10.0.0.6"
    assert filled["mcqa"]["resources_servers"]["verigym_remote"]["port"] == 41002
    with pytest.raises(FleetAddressError, match="no address for: mcqa"):
        fill_addresses(template, {"math": "http://h:1"})


def test_plan_shows_the_diff_from_the_preset(tmp_path):
    done = driver("run", "--blend", "tiny", "-c", "rlvr_test", "--backend", "nemo-rl", "--dry-run",
                  f"logger.log_dir={tmp_path}", "grpo.max_num_steps=7", "policy.model_name=/ckpt/sft")
    assert done.returncode == 0, done.stderr
    assert "grpo.max_num_steps: 2 -> 7" in done.stdout
    assert 'policy.model_name: "???" -> "/ckpt/sft"' in done.stdout
    assert "training 1, generation 1" in done.stdout


def test_nemo_rl_backend_needs_a_preset_and_reports_bad_keys_in_one_line(tmp_path):
    done = driver("run", "--blend", "tiny", "--backend", "nemo-rl", "--dry-run")
    assert done.returncode == 2 and "needs a stage preset" in done.stderr
    done = driver("run", "--blend", "tiny", "-c", "rlvr_test", "--backend", "nemo-rl", "--dry-run",
                  f"logger.log_dir={tmp_path}", "grpo.num_prompt_per_step=3")
    assert done.returncode == 2 and "did you mean 'grpo.num_prompts_per_step'" in done.stderr
    assert "Traceback" not in done.stderr


def test_offline_dry_run_needs_no_data_and_a_missing_hub_file_is_one_line(tmp_path):
    offline = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    done = driver("run", "--blend", "rlvr2", "--dry-run", "--data-dir", str(tmp_path / "none"), env=offline)
    assert done.returncode == 0, done.stderr
    assert "is not prepared" in done.stdout and "HF_HUB_OFFLINE" in done.stdout
    done = driver("data", "prep", "--blend", "rlvr2", "--output", str(tmp_path / "out"), env=offline)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr
    assert "--input" in lines[0] and "--data-dir" in lines[0] and "HF_HUB_OFFLINE" in lines[0]


def test_verigym_remote_process_lives_with_the_server_and_exits_when_it_dies(tmp_path, monkeypatch):
    """The process NeMo-Gym starts for a verigym_remote instance, against a real env server."""
    import time

    from trainer.fleet import Fleet
    from trainer.nemo_rl.gym_config import GYM_ROOT, FleetEnv, render_template

    monkeypatch.setenv("VERIGYM_ENV_PATH", str(Path(__file__).parent / "fixture_envs"))
    template = render_template([FleetEnv("answer_match", "other", ("answer_match_simple_agent",))])
    inner = template["answer_match"]["resources_servers"]["verigym_remote"]
    inner.update(health_poll_s=0.2, health_failures_to_exit=3)
    app = GYM_ROOT / "resources_servers" / "verigym_remote" / "app.py"
    fleet = Fleet(["answer_match"], log_dir=tmp_path)
    fleet.start()
    try:
        config = fill_addresses(template, fleet.urls)
        watcher = subprocess.Popen([sys.executable, str(app)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   env={**os.environ, "NEMO_GYM_CONFIG_PATH": "answer_match",
                                        "NEMO_GYM_CONFIG_DICT": yaml.safe_dump(config)})
        time.sleep(1.5)
        assert watcher.poll() is None, watcher.communicate()
    finally:
        fleet.stop()
    try:
        assert watcher.wait(timeout=20) == 1
    finally:
        watcher.kill()
    assert "failed 3 health checks in a row" in watcher.stderr.read()


def test_the_job_is_nemo_rls_ray_sub_with_the_seeds_contract(tmp_path):
    """--dry-run shows the exact sbatch line (super_launch.sh's, for NeMo-RL's ray.sub from the profile's
    checkout) and the environment it exports: the seeds' contract filled from the profile and the data."""
    from trainer.launch.profiles import load_profile
    from trainer.nemo_rl import launch

    nemo_rl = tmp_path / "NeMo-RL"
    nemo_rl.mkdir()
    (nemo_rl / "ray.sub").write_text("#!/bin/bash\n")
    env_toml = tmp_path / "env.toml"
    env_toml.write_text(f'[cl]\nexecutor = "slurm"\naccount = "acct"\npartition = "batch"\ngpus_per_node = 8\n'
                        f'time = "04:00:00"\ncontainer = "/img/nemo-rl.sqsh"\nmounts = ["/lustre:/lustre"]\n'
                        f'nemo_rl_dir = "{nemo_rl}"\nsandbox_container = "/img/sandbox.sqsh"\n'
                        f'persistent_cache = "/lustre/cache"\nfleet_python = "/lustre/venvs/verigym/bin/python"\n')
    profile, wandb, _ = load_profile("cl", env_toml)
    plan = build_plan("rlvr", [f"logger.log_dir={tmp_path / 'run'}", "policy.model_name=/ckpt/sft"], load_blend("tiny"),
                      tmp_path / "data", profile=profile, profile_name="cl")
    assert launch.profile_problems(profile, plan) == []
    job = launch.render(plan, profile, exp_name="rlvr-test", wandb=wandb)
    assert job.sbatch == ["sbatch", "--nodes=109", "--account=acct", "--job-name=rlvr-test", "--partition=batch",
                          "--time=04:00:00", "--gres=gpu:8", "--exclusive", "--dependency=singleton",
                          f"--output={tmp_path / 'run' / 'nemo_rl' / 'job'}/slurm-%j.log", str(nemo_rl / "ray.sub")]
    env = job.env
    assert (env["CONTAINER"], env["SANDBOX_CONTAINER"], env["PERSISTENT_CACHE"], env["EXTRA_MOUNTS"]) == \
        ("/img/nemo-rl.sqsh", "/img/sandbox.sqsh", "/lustre/cache", "/lustre:/lustre")
    assert (env["SLURM_ACCOUNT"], env["SLURM_PARTITION"], env["MODEL_PATH"], env["EXP_NAME"]) == \
        ("acct", "batch", "/ckpt/sft", "rlvr-test")
    assert env["CONFIG_PATH"] == str(plan.files["grpo"]) and env["TRAIN_PATH"].endswith("data/train.jsonl")
    assert env["MOUNTS"].startswith("/lustre:/lustre,") and f"{nemo_rl}:{nemo_rl}" in env["MOUNTS"]
    assert env["COMMAND"] == f"bash {job.driver_path}" and env["SANDBOX_COMMAND"] == "/start-with-nginx.sh"
    runner = next(line for line in job.driver.splitlines() if "run_grpo_nemo_gym.py" in line)
    assert 'python ./examples/nemo_gym/run_grpo_nemo_gym.py --config "$CONFIG_PATH" policy.model_name="$MODEL_PATH"' in runner
    assert f"checkpointing.checkpoint_dir={tmp_path / 'run' / 'checkpoints'}" in runner  # absolute, shared
    assert "NRL_WG_USE_RAY_REF=1" in runner and "NEMO_GYM_VENV_DIR=\"${PERSISTENT_CACHE}\"/gym_venvs" in runner
    assert 'VG_PY=/lustre/venvs/verigym/bin/python' in job.driver  # the fleet runs from verigym's own venv
    assert subprocess.run(["bash", "-n"], input=job.driver, text=True).returncode == 0
    # what a profile lacks is said before anything is submitted
    bare = profile.model_copy(update={"nemo_rl_dir": None, "container_image": None, "fleet_nodes": 1})
    problems = launch.profile_problems(bare, plan)
    assert any("nemo_rl_dir" in p for p in problems) and any("container_image" in p for p in problems)
    assert any("fleet_nodes must be 0" in p for p in problems)


def test_fleet_file_from_the_readiness_gate_uses_the_first_replica(tmp_path):
    from trainer.nemo_rl.gym_config import read_fleet_addresses

    report = tmp_path / "fleet.json"
    report.write_text(json.dumps({"math": ["http://10.0.0.1:4001", "http://10.0.0.2:4002"], "mcqa": "http://h:5"}))
    assert read_fleet_addresses(report) == {"math": "http://10.0.0.1:4001", "mcqa": "http://h:5"}
    report.write_text(json.dumps({"math": [3]}))
    with pytest.raises(FleetAddressError, match="expected a URL"):
        read_fleet_addresses(report)
