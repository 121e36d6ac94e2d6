"""Stage presets against the official Nemotron 3 Super configs, key by key.

trainer/nemo_rl/super_recipe.json records both official sources (scripts/record_super_recipe.py,
commits inside): Nemotron's ``super3/stage2_rl/<stage>/config`` (what the presets follow) and
NeMo-RL's ``examples/nemo_gym/nemotron-3-super/*.yaml``. A preset must equal the Nemotron config on
every key NeMo-RL's schema accepts, and must equal NeMo-RL's YAML wherever the two official
configs agree; every other difference is a named departure below, with its reason. Keys the
recorded NeMo-RL schema rejects (read by no NeMo-RL code at that commit) are left out and listed.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from trainer.config import load_yaml_with_defaults, resolve_config_path
from trainer.nemo_rl.backend import split_verigym_keys
from trainer.nemo_rl.schema import SchemaError, check_config

RECIPE = json.loads((Path(__file__).resolve().parents[2] / "trainer" / "nemo_rl" / "super_recipe.json").read_text())
FOLLOWS = {"rlvr": "rlvr", "rlvr_small": "rlvr_small", "swe1": "swe1", "swe1_small": "swe1_small", "swe2": "swe2",
           "rlhf": "rlhf", "rlhf_small": "rlhf_small"}
# Gym instances under env.nemo_gym (judge model servers, resources-server settings) are the fleet's
# and the model servers' business (trainer/nemo_rl/gym_config.py, trainer/model_servers.py), not keys.
GYM_KNOBS = {"num_gpu_nodes", "port_range_low", "port_range_high", "invalid_tool_call_patterns", "thinking_tags",
             "uv_venv_dir", "skip_venv_if_present", "use_absolute_ip"}

RUN = "verigym's run: the driver fills it"
# key (or "prefix.*") -> why the preset differs from the official config(s) on purpose.
DEPARTURES: dict[str, str] = {
    "policy.model_name": RUN + " (policy.model_name=/path/to/sft; the recipe's is a placeholder path)",
    "data.train.data_path": RUN + " from the prepared blend",
    "data.validation.data_path": RUN + " from the prepared blend",
    "env.nemo_gym.config_paths": RUN + ": vllm_model_for_training.yaml + the verigym fleet's Gym config",
    "checkpointing.checkpoint_dir": "${logger.log_dir}/checkpoints, made absolute by the driver: NeMo-RL runs in its "
                                    "own folder, where the recipe's relative results/... is node-local (no resume)",
    "logger.log_dir": "runs/<preset>, made absolute by the driver (the recipe's relative logs/ is node-local)",
    "logger.wandb.*": "verigym's W&B project / run name ([wandb] of env.toml, EXP_NAME)",
    "logger.mlflow.*": "verigym's MLflow names",
    "checkpointing.checkpoint_must_save_by": "the recipe's 00:03:30:00 assumes a 4 h allocation (super_launch.sh's "
                                             "SLURM_TIME_LIMIT); a profile's time differs: set it per run",
    "env.nemo_gym.port_range_low": "NeMo-RL's own layout at the schema commit (ray.sub: Gym HTTP 5000-5999); "
                                   "Nemotron's 15001-20000 is the v0.5 container's",
    "env.nemo_gym.port_range_high": "as env.nemo_gym.port_range_low",
    "policy.generation.port_range_low": "NeMo-RL's own layout at the schema commit (ray.sub: generation 3000-4999)",
    "policy.generation.port_range_high": "as policy.generation.port_range_low",
    "env.nemo_gym.uv_venv_dir": "set on the runner's command line from PERSISTENT_CACHE, as super_launch.sh does",
    "env.nemo_gym.skip_venv_if_present": "set on the runner's command line with uv_venv_dir, as super_launch.sh does",
    "policy.dtensor_cfg.*": "dtensor_cfg.enabled is false (Megatron trains): its other keys are unread",
    "policy.dynamic_batching.*": "dynamic_batching.enabled is false (sequence packing on): its other keys are unread",
    "policy.generation.vllm_cfg.http_server_serving_chat_kwargs.reasoning_parser_plugin":
        "NeMo-RL at the schema commit reads policy.generation.vllm_cfg.reasoning_parser_plugin (the preset's, as in "
        "NeMo-RL's YAML); Nemotron's key and path are the v0.5 container's",
    "policy.generation.vllm_cfg.http_server_serving_chat_kwargs.chat_template_kwargs.*":
        "the same values under default_chat_template_kwargs, the key NeMo-RL's YAML passes at the schema commit "
        "(chat_template_kwargs is the v0.5 container's vLLM argument)",
    "policy.draft.*": "draft.enabled is false (no speculative draft model): its other keys are unread",
    "policy.megatron_cfg.mtp_num_layers": "NeMo-RL's Super YAMLs at the schema commit train the MTP heads (5 layers, "
                                          "scale 0.3); Nemotron's v0.5 configs have MTP off",
    "policy.megatron_cfg.mtp_loss_scaling_factor": "as policy.megatron_cfg.mtp_num_layers",
    "policy.make_sequence_length_divisible_by": "NeMo-RL's expression at the schema commit (CP x 2 TP, what sequence "
                                                "parallel with context parallel needs); Nemotron's TP-only value",
    "policy.megatron_cfg.context_parallel_size": "Nemotron's value (the presets follow Nemotron's parallelism; "
                                                 "NeMo-RL's YAML sizes its larger generation pools differently)",
    "policy.generation.colocated.resources.num_nodes": "Nemotron's generation pool (NeMo-RL's Super YAMLs use larger "
                                                       "ones: rlvr 144, rlhf 64)",
    "policy.generation.vllm_cfg.tensor_parallel_size": "Nemotron's generation TP (NeMo-RL's YAML: 8 with EP)",
    "cluster.num_nodes": "NeMo-RL's arithmetic: training + generation only; the judge nodes come on top "
                         "(trainer/nemo_rl/arithmetic.py; Nemotron's totals include them)",
    "env.nemo_gym.num_gpu_nodes": "Nemotron's judge nodes (NeMo-RL's rlvr YAML runs the GenRM at dp 4: 7 nodes)",
    "grpo.val_num_generations_per_prompt": "NeMo-RL's key name for Nemotron's num_val_generations_per_prompt (same value)",
}

V05 = "read by no NeMo-RL code at the schema commit (a v0.5-container key): the schema rejects it"
# Official keys NeMo-RL's recorded schema rejects, and why the presets leave them out.
LEFT_OUT: dict[str, str] = {
    "effort_levels.*": "NeMo-RL reads the recipe's effort_levels under env.nemo_gym.effort_levels (grpo.py): the "
                       "preset has the same values there",
    "env.genrm_agent_names": V05, "env.genrm_compare_server_name": V05, "env.use_genrm_compare": V05,
    "grpo.best_at_k_k": V05, "grpo.best_at_k_m": V05, "grpo.use_best_at_k": V05,
    "grpo.combined_training_best_at_k_weight": V05, "grpo.combined_training_pass_at_1_weight": V05,
    "grpo.combined_training_weight_mode": V05, "grpo.use_combined_training": V05,
    "grpo.dynamic_sampling_oversample_ratio": V05, "grpo.invalid_tool_call_strategy": V05,
    "grpo.num_val_generations_per_prompt": "NeMo-RL's name is grpo.val_num_generations_per_prompt (the preset's)",
    "grpo.penalize_invalid_tool_call": V05, "grpo.penalize_malformed_thinking": V05,
    "policy.megatron_cfg.distributed_data_parallel_config.average_in_collective": V05,
    "policy.megatron_cfg.do_not_average_loss": V05, "policy.megatron_cfg.moe_router_enable_expert_bias": V05,
    "policy.megatron_cfg.scale_loss_by_dp_cp_size": V05, "policy.megatron_cfg.track_moe_metrics": V05,
    "sif_dir": "super_launch.sh's SIF_DIR (SWE-bench Apptainer images for Gym's SWE agents); verigym's swe "
               "environments run their own sandboxes",
}


def _flatten(data, prefix=""):
    if isinstance(data, dict) and data:
        out = {}
        for k, v in data.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: data}


def _set(cfg: dict, dotted: str, value) -> None:
    *parents, last = dotted.split(".")
    for p in parents:
        cfg = cfg.setdefault(p, {})
        if not isinstance(cfg, dict):
            raise KeyError(dotted)
    cfg[last] = value


def accepted(base: dict, key: str, value) -> bool:
    """Whether NeMo-RL's recorded schema accepts ``key = value`` in this config."""
    cfg = copy.deepcopy(base)
    try:
        _set(cfg, key, value)
        check_config(cfg)
    except (SchemaError, KeyError):
        return False
    return True


def departure(key: str, table: dict[str, str] = DEPARTURES) -> str | None:
    if key in table:
        return table[key]
    parts = key.split(".")
    for i in range(len(parts) - 1, 0, -1):
        if ".".join(parts[:i]) + ".*" in table:
            return table[".".join(parts[:i]) + ".*"]
    return None


def _relevant(key: str) -> bool:
    return not key.startswith("env.nemo_gym.") or key.split(".")[2] in GYM_KNOBS


def _diff(preset: str) -> tuple[list[str], list[str]]:
    cfg = split_verigym_keys(load_yaml_with_defaults(resolve_config_path(preset)))[0]
    ours = _flatten(cfg)
    nemotron = RECIPE["nemotron"][FOLLOWS[preset]]["values"]
    nemo_rl = RECIPE["nemo_rl"].get(preset, {}).get("values", {})
    unexplained, rejected = [], []
    for key in sorted(set(nemotron) | set(nemo_rl)):
        if not _relevant(key):
            continue
        mine = ours.get(key, "<absent>")
        official = nemotron.get(key, "<absent>")
        if official != "<absent>" and mine != official:
            if not accepted(cfg, key, official):
                rejected.append(key)
            elif departure(key) is None:
                unexplained.append(f"{key}: preset {mine!r}, Nemotron {official!r}")
        elif official == "<absent>" and key in nemo_rl and mine != nemo_rl[key] and departure(key) is None \
                and accepted(cfg, key, nemo_rl[key]):
            unexplained.append(f"{key}: preset {mine!r}, NeMo-RL's YAML {nemo_rl[key]!r} (Nemotron: none)")
        if key in nemo_rl and official == nemo_rl[key] and mine != official and departure(key) is None \
                and accepted(cfg, key, official):
            unexplained.append(f"{key}: preset {mine!r}, both official configs {official!r}")
    return sorted(set(unexplained)), rejected


@pytest.mark.parametrize("preset", sorted(FOLLOWS))
def test_preset_equals_the_official_config_key_by_key_or_names_why(preset):
    unexplained, rejected = _diff(preset)
    assert not unexplained, f"{preset}: {len(unexplained)} unexplained difference(s):\n  " + "\n  ".join(unexplained)
    unnamed = [k for k in rejected if departure(k, LEFT_OUT) is None]
    assert not unnamed, f"{preset}: official keys the schema rejects, with no reason in LEFT_OUT: {unnamed}"


def test_the_records_name_their_sources():
    assert RECIPE["sources"]["nemotron"]["repo"] == "NVIDIA-NeMo/Nemotron"
    assert RECIPE["sources"]["nemo_rl"]["commit"].startswith("7ea279abfbeb")  # the schema's commit
    assert set(RECIPE["nemotron"]) == set(FOLLOWS.values())
    assert RECIPE["nemotron"]["rlvr"]["values"]["cluster.num_nodes"] == 109  # Nemotron's totals include the judges


def test_every_departure_is_still_a_difference():
    """A departure whose key now matches everywhere is stale: remove it."""
    stale = []
    for key in DEPARTURES:
        differs = False
        for preset, source in FOLLOWS.items():
            cfg = _flatten(split_verigym_keys(load_yaml_with_defaults(resolve_config_path(preset)))[0])
            for values in (RECIPE["nemotron"][source]["values"], RECIPE["nemo_rl"].get(preset, {}).get("values", {})):
                keys = [k for k in set(values) | set(cfg) if k == key or (key.endswith(".*") and k.startswith(key[:-1]))]
                differs |= any(values.get(k, "<absent>") != cfg.get(k, "<absent>") for k in keys if k in values)
        if not differs:
            stale.append(key)
    assert not stale, stale
