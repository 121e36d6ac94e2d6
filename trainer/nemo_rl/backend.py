"""``driver run --backend nemo-rl``: a stage preset + blend + fleet -> NeMo-RL's GRPO config, the
NeMo-Gym config for the fleet, the judge / GenRM model servers and the node roles.

    driver run --blend rlvr2 -c rlvr --backend nemo-rl --dry-run policy.model_name=/ckpt/sft
    driver run --blend rlvr2 -c rlvr --backend nemo-rl --run PROFILE

Written under ``<logger.log_dir>/nemo_rl/``: ``grpo.yaml`` (passed to NeMo-RL's Gym GRPO runner),
``nemo_gym_fleet.template.yaml`` (filled with the fleet's reported addresses at job time),
``plan.txt``. Every key of ``grpo.yaml`` is checked against NeMo-RL's recorded schema and NeMo-RL's
start-up arithmetic first (trainer/nemo_rl/arithmetic.py). trainer/nemo_rl/launch.py turns the
plan into NeMo-RL's own ``sbatch ... ray.sub`` job.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from servers.config_loader import ConfigError, apply_overrides, load_yaml_with_defaults
from trainer.config import resolve_config_path
from trainer.model_servers import ModelServerError, ModelServerPlan, judge_uses, plan_model_servers
from trainer.nemo_rl import arithmetic
from trainer.nemo_rl.arithmetic import NodeRoles, get_path as _get, node_roles
from trainer.nemo_rl.gym_config import FleetEnv, fleet_env, render_template
from trainer.nemo_rl.schema import check_config, schema_version

GRPO_FILE = "grpo.yaml"
GYM_TEMPLATE_FILE = "nemo_gym_fleet.template.yaml"
GYM_FILE = "nemo_gym_fleet.yaml"
VLLM_MODEL_CONFIG = "responses_api_models/vllm_model/configs/vllm_model_for_training.yaml"
# Where a NeMo-RL checkout keeps its Gym (a uv workspace member, installed editable in NeMo-RL's
# image): its version picks the Gym config's form and where verigym's stand-in server goes
# (gym_install.py). The job mounts the user's checkout at its own path, so this path under it is
# the Gym NeMo-RL runs, inside the container and out.
GYM_IN_NEMO_RL = "3rdparty/Gym-workspace/Gym"
# NeMo-RL's Gym GRPO entry point, relative to the NeMo-RL checkout ray.sub runs the driver in.
NEMO_RL_RUNNER = "examples/nemo_gym/run_grpo_nemo_gym.py"
FLEET_FILE_SLOT = "{fleet_file}"  # the job substitutes the fleet's address report
UNSET = "???"  # OmegaConf's mandatory value
# verigym's keys in a stage preset or on the command line, not NeMo-RL's: taken out before grpo.yaml
# is written. model_servers: the judge / GenRM servers the job starts (trainer/model_servers.py);
# env.server_config: {env: {key: value}} for the fleet's `envs serve`, as in the built-in engine.
VERIGYM_KEYS = ("model_servers", "env.server_config")


@dataclass
class NemoRLPlan:
    preset: dict[str, Any]
    config: dict[str, Any]            # grpo.yaml: NeMo-RL's keys only
    gym_template: dict[str, Any]
    envs: list[FleetEnv]
    envs_source: str
    roles: NodeRoles
    models: ModelServerPlan
    server_config: dict[str, dict[str, Any]]
    out_dir: Path
    data_dir: Path
    files: dict[str, Path]
    warnings: list[str] = field(default_factory=list)

    def gym_config_command(self, python: str, nemo_rl_dir: Path) -> list[str]:
        """Fill the fleet's reported addresses into the Gym config (after the readiness gate), in the
        form the Gym of the NeMo-RL checkout at ``nemo_rl_dir`` accepts."""
        return [python, str(Path(__file__).with_name("gym_config.py")), "--template", str(self.files["gym_template"]),
                "--fleet", FLEET_FILE_SLOT, "--output", str(self.files["gym_config"]),
                "--gym-root", str(nemo_rl_dir / GYM_IN_NEMO_RL), "--grpo", str(self.files["grpo"])]


def _pop(cfg: dict[str, Any], dotted: str) -> Any:
    *parents, last = dotted.split(".")
    node: Any = cfg
    for part in parents:
        node = node.get(part) if isinstance(node, dict) else None
    return node.pop(last, None) if isinstance(node, dict) else None


def fleet_envs(blend: Any, data_dir: Path) -> tuple[list[FleetEnv], str]:
    """The environments the fleet serves and the agent names each answers.

    From the prepared data's manifest when there is one (the envs its rows route to); otherwise
    (a dry run before the data exists) every installed environment the blend's agent map reaches.
    Agent names: the environment's declared ``agent_names`` plus the blend's map entries to it.
    Domain and agent names come from what each environment publishes (``envs info --json`` in a
    child process, trainer.env_catalog): the trainer imports no environment module.
    """
    from trainer.env_catalog import installed as installed_catalog

    manifest = data_dir / "manifest.json"
    catalog = installed_catalog()
    if manifest.is_file():
        counts = json.loads(manifest.read_text()).get("counts", {})
        names = sorted(set(counts.get("train_per_env", {})) | set(counts.get("val_per_env", {})))
        source = f"the rows of {manifest}"
    else:
        names = sorted({env for env in blend.agents.values() if env in catalog.described})
        source = (f"data not prepared ({data_dir} has no manifest.json): every installed environment the "
                  f"blend's agent map reaches")
    envs = []
    for name in names:
        if name not in catalog.described:
            raise ConfigError(f"environment {name!r} (from {source}) is not installed")
        error = catalog.error_of(name)
        if error:
            raise ConfigError(f"environment {name!r} (from {source}) does not load: {error}")
        info = catalog.described[name]
        agents = list(info.get("agent_names", ())) + [a for a, e in blend.agents.items() if e == name and a != name]
        envs.append(fleet_env(name, info, tuple(dict.fromkeys(agents or [name])), blend.agent_settings))
    return envs, source


def split_verigym_keys(cfg: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, dict[str, Any]]]:
    """``(NeMo-RL's config, model_servers, env.server_config)``: verigym's keys out of a preset (a copy)."""
    cfg = copy.deepcopy(cfg)
    return cfg, _pop(cfg, "model_servers") or {}, _pop(cfg, "env.server_config") or {}


def build_plan(preset_name: str, overrides: list[str], blend: Any, data_dir: Path, *,
               profile: Any = None, profile_name: str = "PROFILE") -> NemoRLPlan:
    """Preset + overrides + blend -> grpo.yaml (schema-checked, NeMo-RL's start-up checks passed),
    the Gym fleet template, the judge / GenRM model servers and the node roles. ``profile``: the
    env.toml profile the job goes to (its model servers and fleet nodes), when there is one."""
    preset = load_yaml_with_defaults(resolve_config_path(preset_name))
    cfg = apply_overrides(copy.deepcopy(preset), overrides)  # apply_overrides shares nested dicts
    cfg, model_defaults, server_config = split_verigym_keys(cfg)
    out_dir = Path(str(_get(cfg, "logger.log_dir", "runs/nemo_rl"))).resolve() / "nemo_rl"
    envs, source = fleet_envs(blend, data_dir)
    gym_file = (out_dir / GYM_FILE).resolve()
    given = {o.split("=", 1)[0] for o in overrides}
    fill = []
    if "data.train.data_path" not in given:
        fill.append(f"data.train.data_path={(data_dir / 'train.jsonl').resolve()}")
    if "data.validation.data_path" not in given:
        fill.append(f"data.validation.data_path={(data_dir / 'val.jsonl').resolve()}")
    # NeMo-RL runs in its own folder inside its container: relative folders would land there, node-local
    # (no resume from another node, logs lost with the container). Absolute, on the shared filesystem.
    log_dir = Path(str(_get(cfg, "logger.log_dir", "runs/nemo_rl"))).resolve()
    fill.append(f"logger.log_dir={log_dir}")
    checkpoints = _get(cfg, "checkpointing.checkpoint_dir")
    if isinstance(checkpoints, str) and checkpoints:
        checkpoints = checkpoints.replace("${logger.log_dir}", str(log_dir))
        if not checkpoints.startswith("${"):
            fill.append(f"checkpointing.checkpoint_dir={Path(checkpoints).resolve()}")
    cfg = apply_overrides(cfg, fill)
    paths = list(_get(cfg, "env.nemo_gym.config_paths", []) or [])
    if VLLM_MODEL_CONFIG not in paths:
        paths.insert(0, VLLM_MODEL_CONFIG)  # NeMo-RL requires the _for_training model server
    if str(gym_file) not in paths:
        paths.append(str(gym_file))
    cfg.setdefault("env", {}).setdefault("nemo_gym", {})["config_paths"] = paths
    check_config(cfg, f"-c {preset_name}")
    problems = arithmetic.check(cfg)
    if problems:
        raise ConfigError(f"-c {preset_name}: {len(problems)} problem(s) NeMo-RL's start-up checks would raise "
                          "(trainer/nemo_rl/arithmetic.py):\n  " + "\n  ".join(problems))
    try:
        models = plan_model_servers(
            judge_uses([e.name for e in envs], server_config), preset=model_defaults,
            profile=getattr(profile, "model_servers", None) or {}, where=profile_name,
            gpus_per_node=getattr(profile, "gpus_per_node", None) or _get(cfg, "cluster.gpus_per_node", 8))
    except ModelServerError as exc:
        raise ConfigError(str(exc)) from None
    roles = node_roles(cfg, models.nodes, getattr(profile, "fleet_nodes", 0) or 0)
    warnings = []
    if _get(cfg, "policy.model_name") in (None, UNSET):
        warnings.append("policy.model_name is not set: add policy.model_name=/path/to/checkpoint (needed to submit)")
    if not (data_dir / "train.jsonl").is_file():
        warnings.append(f"{data_dir / 'train.jsonl'} does not exist yet: run `driver data prep --blend {blend.name}` "
                        f"(offline: --input FILE, or HF_HUB_OFFLINE=1 with a cache) before submitting")
    warnings += [f"model server missing: {m}" for m in models.missing]
    files = {"grpo": (out_dir / GRPO_FILE).resolve(), "gym_template": (out_dir / GYM_TEMPLATE_FILE).resolve(),
             "gym_config": gym_file}
    return NemoRLPlan(split_verigym_keys(preset)[0], cfg, render_template(envs), envs, source, roles, models, server_config, out_dir, data_dir,
                      files, warnings)


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict) and data:
        out: dict[str, Any] = {}
        for k, v in data.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: data}


def config_diff(preset: dict[str, Any], resolved: dict[str, Any]) -> list[str]:
    """``key: preset value -> resolved value`` for every key the overrides and the driver changed."""
    before, after = _flatten(preset), _flatten(resolved)
    lines = []
    for key in sorted(set(before) | set(after)):
        if before.get(key, "<absent>") != after.get(key, "<absent>"):
            lines.append(f"  {key}: {json.dumps(before.get(key, '<absent>'))} -> {json.dumps(after.get(key, '<absent>'))}")
    return lines


def write_files(plan: NemoRLPlan) -> None:
    plan.out_dir.mkdir(parents=True, exist_ok=True)
    header = f"# NeMo-RL GRPO config written by `driver run --backend nemo-rl`; keys checked against {schema_version()}\n"
    plan.files["grpo"].write_text(header + yaml.safe_dump(plan.config, sort_keys=False, width=120))
    plan.files["gym_template"].write_text(
        "# NeMo-Gym instances for the verigym fleet; host/port are filled at job time from the fleet's report\n"
        + yaml.safe_dump(plan.gym_template, sort_keys=False))
    (plan.out_dir / "plan.txt").write_text(format_plan(plan) + "\n")


def format_plan(plan: NemoRLPlan, job: str | None = None) -> str:
    g = plan.config["grpo"]
    lines = [
        f"backend: NeMo-RL async GRPO (keys checked against {schema_version()}; node arithmetic and start-up checks "
        "as NeMo-RL makes them: trainer/nemo_rl/arithmetic.py)",
        f"nodes: {plan.roles.describe()}",
        f"environment servers: {len(plan.envs)} ({', '.join(e.name for e in plan.envs)}), one process each on the "
        "Ray head node; from " + plan.envs_source,
        "agents -> environments: " + ", ".join(f"{a}->{e.name}" for e in plan.envs for a in e.agent_names),
        *plan.models.lines(),
        f"steps: {g['num_prompts_per_step']} prompts x {g['num_generations_per_prompt']} generations, "
        f"max sequence {plan.config['policy']['max_total_sequence_length']}, "
        f"lag <= {_get(plan.config, 'grpo.async_grpo.max_trajectory_age_steps')}, "
        f"in-flight updates {_get(plan.config, 'grpo.async_grpo.in_flight_weight_updates')}",
        f"data: {_get(plan.config, 'data.train.data_path')}, {_get(plan.config, 'data.validation.data_path')}",
        f"checkpoints: {_get(plan.config, 'checkpointing.checkpoint_dir')}; logs: {_get(plan.config, 'logger.log_dir')}",
        f"files: {', '.join(str(p) for p in plan.files.values())}",
        "config changed from the preset:",
        *(config_diff(plan.preset, plan.config) or ["  (nothing)"]),
    ]
    if job is not None:
        lines.append(job)
    lines += [f"warning: {w}" for w in plan.warnings]
    return "\n".join(lines)
