"""NeMo-RL's node arithmetic and start-up checks on every stage preset, the way NeMo-RL does them.

The generated grpo.yaml of each preset is loaded the way NeMo-RL's runner loads its config
(OmegaConf, NeMo-RL's resolvers add/mul/div/max, ``to_container(resolve=True)``: every ``???``
must be filled, every interpolation must resolve), then the checks its code makes are redone here
from the resolved values, independently of trainer/nemo_rl/arithmetic.py: training nodes =
cluster.num_nodes - non-colocated generation nodes (grpo.py setup; the judge/Gym nodes are not
subtracted), training world size divisible by PP x CP x TP (lm_policy.py), the global batch
divisible by data parallel and the step's samples by the global batch (batched_data_dict.py),
force_on_policy_ratio's batch equality (grpo.py).
"""
from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainer.blends import load_blend
from trainer.config import ConfigError, load_yaml_with_defaults, resolve_config_path
from trainer.nemo_rl import arithmetic
from trainer.nemo_rl.backend import build_plan

omegaconf = pytest.importorskip("omegaconf")
REPO = Path(__file__).resolve().parents[2]
STAGES = ["rlvr", "swe1", "swe2", "rlhf"]
PRESETS = [f"{s}{v}" for s in STAGES for v in ("", "_small", "_test", "_1node")]
# Slurm nodes: NeMo-RL's cluster.num_nodes + the judge / GenRM model servers on top (the Nemotron
# recipe's totals: rlvr 109 = 32 + 72 + 5, rlhf 72 = 32 + 32 + 8, small 21 / 24, swe 64 / 8).
SLURM_NODES = {"rlvr": 109, "rlvr_small": 21, "rlvr_test": 5, "rlvr_1node": 1,
               "swe1": 64, "swe1_small": 8, "swe1_test": 2, "swe1_1node": 1,
               "swe2": 64, "swe2_small": 8, "swe2_test": 2, "swe2_1node": 1,
               "rlhf": 72, "rlhf_small": 24, "rlhf_test": 3, "rlhf_1node": 1}


def nemo_rl_load(path: Path) -> dict:
    """NeMo-RL's config loading (nemo_rl/utils/config.py: OmegaConf + register_omegaconf_resolvers)."""
    from omegaconf import OmegaConf

    for name, fn in (("add", lambda a, b: a + b), ("mul", lambda a, b: a * b), ("div", lambda a, b: a / b),
                     ("max", lambda a, b: max(a, b))):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)
    return OmegaConf.to_container(OmegaConf.load(path), resolve=True, throw_on_missing=True)


def nemo_rl_checks(cfg: dict) -> tuple[int, int, int]:
    """(training nodes, training world size, data parallel), asserting NeMo-RL's checks on the way."""
    total, gpus = cfg["cluster"]["num_nodes"], cfg["cluster"]["gpus_per_node"]
    gen = cfg["policy"]["generation"]
    assert gen["colocated"]["enabled"] is False  # async GRPO with vLLM: generation is not colocated
    res = gen["colocated"]["resources"]
    if total == 1:  # one policy node, split
        assert res["num_nodes"] in (None, 1) and 0 < res["gpus_per_node"] < gpus
        train_nodes, world = 1, gpus - res["gpus_per_node"]
        gen_gpus = res["gpus_per_node"]
    else:
        assert res["gpus_per_node"] == gpus and res["num_nodes"] > 0
        train_nodes = total - res["num_nodes"]
        assert train_nodes > 0
        world = train_nodes * gpus
        gen_gpus = res["num_nodes"] * gpus
    m = cfg["policy"]["megatron_cfg"]
    mp = m["tensor_model_parallel_size"] * m["context_parallel_size"] * m["pipeline_model_parallel_size"]
    assert world % mp == 0, f"world {world} not divisible by TP*CP*PP {mp}"
    dp = world // mp
    gbs = cfg["policy"]["train_global_batch_size"]
    samples = cfg["grpo"]["num_prompts_per_step"] * cfg["grpo"]["num_generations_per_prompt"]
    assert gbs % dp == 0 and samples % gbs == 0, (gbs, dp, samples)
    if cfg["loss_fn"]["force_on_policy_ratio"]:
        assert gbs == samples
    assert (world // m["pipeline_model_parallel_size"]) % (m["expert_model_parallel_size"] * m["expert_tensor_parallel_size"]) == 0
    v = gen["vllm_cfg"]
    assert gen_gpus % (v["tensor_parallel_size"] * v["pipeline_parallel_size"]) == 0
    assert cfg["grpo"]["max_val_samples"] is None  # the Gym runner refuses anything else
    return train_nodes, world, dp


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_passes_nemo_rls_arithmetic_as_written_to_grpo_yaml(preset, tmp_path):
    blend = {"swe1": "swe1", "swe2": "swe2", "rlhf": "rlhf"}.get(preset.split("_")[0], "rlvr2")
    plan = build_plan(preset, [f"logger.log_dir={tmp_path / 'run'}", "policy.model_name=/ckpt/sft"], load_blend(blend),
                      tmp_path / "data")
    from trainer.nemo_rl.backend import write_files

    write_files(plan)
    cfg = nemo_rl_load(plan.files["grpo"])
    assert "model_servers" not in cfg and "server_config" not in cfg["env"]  # verigym's keys stay out of grpo.yaml
    train_nodes, world, dp = nemo_rl_checks(cfg)
    assert arithmetic.check(cfg) == []
    assert (plan.roles.training, plan.roles.training_gpus) == (train_nodes, world)
    assert plan.roles.total == SLURM_NODES[preset], plan.roles.describe()
    assert plan.roles.total == cfg["cluster"]["num_nodes"] + plan.models.nodes
    assert Path(cfg["checkpointing"]["checkpoint_dir"]).is_absolute() and Path(cfg["logger"]["log_dir"]).is_absolute()


@pytest.mark.parametrize("stage, judges", [("rlvr", 5), ("rlvr_small", 5), ("rlhf", 8), ("rlhf_small", 8)])
def test_the_judge_nodes_on_top_are_the_recipes_gym_gpu_nodes(stage, judges, tmp_path):
    plan = build_plan(stage, [f"logger.log_dir={tmp_path}"], load_blend("rlvr2" if stage.startswith("rlvr") else "rlhf"),
                      tmp_path / "data")
    assert plan.models.nodes == judges == plan.config["env"]["nemo_gym"]["num_gpu_nodes"]
    assert plan.roles.cluster_nodes == plan.roles.training + plan.roles.generation


@pytest.mark.parametrize("overrides, message", [
    (["cluster.num_nodes=109"], "training world size 296 GPUs is not divisible by PP 1 x CP 8 x TP 4 = 32"),
    (["cluster.num_nodes=112"], "policy.train_global_batch_size=4096 is not divisible by data parallel 10"),
    (["policy.generation.colocated.enabled=true"], "async GRPO with vLLM needs non-colocated generation"),
    (["policy.generation.colocated.resources.num_nodes=104"], "leaves 0 training nodes"),
    (["policy.train_global_batch_size=2048"], "force_on_policy_ratio needs policy.train_global_batch_size (2048)"),
    (["grpo.max_val_samples=8"], "grpo.max_val_samples must be null"),
    (["policy.generation.colocated.resources.gpus_per_node=4"], "must equal cluster.gpus_per_node=8"),
])
def test_configs_nemo_rl_would_reject_are_refused_before_submit_with_the_reason(overrides, message):
    with pytest.raises(ConfigError) as info:
        build_plan("rlvr", overrides, load_blend("tiny"), Path("/nonexistent/data"))
    assert message in str(info.value) and "NeMo-RL's start-up checks" in str(info.value)


def test_the_rlhf_count_the_issue_found_is_rejected_as_nemo_rl_would():
    """rlhf with cluster.num_nodes 72 and the judges subtracted (the old preset): NeMo-RL trains on
    72 - 32 = 40 nodes, data parallel 20, and the global batch 2048 does not divide."""
    cfg = copy.deepcopy(load_yaml_with_defaults(resolve_config_path("rlhf")))
    cfg["cluster"]["num_nodes"] = 72
    problems = arithmetic.check(cfg)
    assert any("policy.train_global_batch_size=2048 is not divisible by data parallel 20" in p for p in problems)


def test_one_node_split_constraints():
    cfg = copy.deepcopy(load_yaml_with_defaults(resolve_config_path("rlvr_1node")))
    assert arithmetic.check(cfg) == []
    cfg["policy"]["generation"]["colocated"]["resources"]["gpus_per_node"] = 8
    assert any("leaves no training GPU" in p for p in arithmetic.check(cfg))
    cfg["policy"]["generation"]["colocated"]["resources"]["gpus_per_node"] = None
    assert any("must be set > 0 when one node trains and generates" in p for p in arithmetic.check(cfg))


def test_dry_run_prints_the_node_split(tmp_path):
    done = subprocess.run([sys.executable, "-m", "trainer.cli", "run", "--blend", "rlvr2", "-c", "rlvr", "--backend",
                           "nemo-rl", "--dry-run", f"logger.log_dir={tmp_path}", "--data-dir", str(tmp_path / "none")],
                          capture_output=True, text=True, cwd=REPO, timeout=300,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr
    assert ("nodes: 109 x 8 GPUs = cluster.num_nodes 104 (training 32, generation 72) + model servers 5 + fleet 0"
            in done.stdout)
    assert "model servers: 3 (5 node(s))" in done.stdout
    assert ("nvidia/Qwen3-Nemotron-235B-A22B-GenRM-2603: started by the job (vllm nvidia/Qwen3-Nemotron-235B-A22B-GenRM-2603, "
            "tensor parallel 8 x 2 replica(s), 2 node(s)) <- genrm.genrm") in done.stdout
