"""``driver run --backend nemo-rl``: a stage preset + blend + fleet -> NeMo-RL's GRPO config, the
NeMo-Gym config for the fleet, and the trainer part of the job script.

    driver run --blend rlvr2 -c rlvr --backend nemo-rl --dry-run policy.model_name=/ckpt/sft
    driver run --blend rlvr2 -c rlvr --backend nemo-rl --run PROFILE

Written under ``<logger.log_dir>/nemo_rl/``: ``grpo.yaml`` (passed to NeMo-RL's Gym GRPO runner),
``nemo_gym_fleet.template.yaml`` (filled with the fleet's reported addresses at job time),
``plan.txt``. Every key of ``grpo.yaml`` is checked against NeMo-RL's recorded schema first.
The launch module (trainer/launch) renders the job script from :func:`job_spec`: Ray over the
allocation, the fleet, its readiness gate, then ``prepare`` and ``command`` as the trainer step.
"""

from __future__ import annotations

import copy
import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from trainer.config import ConfigError, apply_overrides, load_yaml_with_defaults, resolve_config_path
from trainer.nemo_rl.gym_config import GYM_ROOT, FleetEnv, fleet_env, render_template
from trainer.nemo_rl.schema import check_config, schema_version

GRPO_FILE = "grpo.yaml"
GYM_TEMPLATE_FILE = "nemo_gym_fleet.template.yaml"
GYM_FILE = "nemo_gym_fleet.yaml"
VLLM_MODEL_CONFIG = "responses_api_models/vllm_model/configs/vllm_model_for_training.yaml"
# NeMo-RL's Gym GRPO entry point, run from the NeMo-RL checkout in its container.
NEMO_RL_WORKDIR = "/opt/nemo-rl"
# The Gym checkout NeMo-RL's containers carry (a uv workspace member, installed editable): its
# version picks the Gym config's form and where verigym's stand-in server goes (gym_install.py).
NEMO_GYM_ROOT = f"{NEMO_RL_WORKDIR}/3rdparty/Gym-workspace/Gym"
NEMO_RL_RUNNER = "examples/nemo_gym/run_grpo_nemo_gym.py"
FLEET_FILE_SLOT = "{fleet_file}"  # the launch module substitutes the fleet's address report
UNSET = "???"  # OmegaConf's mandatory value


@dataclass(frozen=True)
class NodeRoles:
    training: int
    generation: int
    judges: int
    gpus_per_node: int

    @property
    def total(self) -> int:
        return self.training + self.generation + self.judges


@dataclass
class TrainerJob:
    """The trainer half of a job script; the launch module adds Ray, the fleet and the gate."""
    backend: str
    envs: list[str]                   # environment servers the fleet starts (one each)
    prepare: list[list[str]]          # after the fleet reported its addresses ({fleet_file})
    command: list[str]                # the trainer, on the Ray head node
    workdir: str
    env: dict[str, str] = field(default_factory=dict)
    roles: NodeRoles | None = None
    files: dict[str, Path] = field(default_factory=dict)

    def shell_lines(self) -> list[str]:
        lines = [f"export {k}={shlex.quote(v)}" for k, v in self.env.items()]
        lines += [shlex.join(c) for c in self.prepare]
        lines.append(f"cd {shlex.quote(self.workdir)} && {shlex.join(self.command)}")
        return lines


@dataclass
class NemoRLPlan:
    preset: dict[str, Any]
    config: dict[str, Any]
    gym_template: dict[str, Any]
    envs: list[FleetEnv]
    envs_source: str
    roles: NodeRoles
    job: TrainerJob
    out_dir: Path
    data_dir: Path
    warnings: list[str] = field(default_factory=list)


def _get(cfg: dict[str, Any], dotted: str, default: Any = None) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def node_roles(cfg: dict[str, Any]) -> NodeRoles:
    """NeMo-RL's split of ``cluster.num_nodes``: non-colocated generation nodes and Gym GPU nodes
    (judges) come out of the total; the rest train."""
    total = int(_get(cfg, "cluster.num_nodes", 1))
    colocated = bool(_get(cfg, "policy.generation.colocated.enabled", True))
    generation = 0 if colocated else int(_get(cfg, "policy.generation.colocated.resources.num_nodes", 0) or 0)
    judges = int(_get(cfg, "env.nemo_gym.num_gpu_nodes", 0) or 0)
    training = total - generation - judges
    if training < 1:
        raise ConfigError(f"cluster.num_nodes={total} leaves {training} training nodes after {generation} generation "
                          f"(policy.generation.colocated.resources.num_nodes) and {judges} judge nodes "
                          "(env.nemo_gym.num_gpu_nodes)")
    return NodeRoles(training, generation, judges, int(_get(cfg, "cluster.gpus_per_node", 8)))


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


def build_plan(preset_name: str, overrides: list[str], blend: Any, data_dir: Path) -> NemoRLPlan:
    preset = load_yaml_with_defaults(resolve_config_path(preset_name))
    cfg = apply_overrides(copy.deepcopy(preset), overrides)  # apply_overrides shares nested dicts
    out_dir = Path(str(_get(cfg, "logger.log_dir", "runs/nemo_rl"))) / "nemo_rl"
    envs, source = fleet_envs(blend, data_dir)
    gym_file = (out_dir / GYM_FILE).resolve()
    given = {o.split("=", 1)[0] for o in overrides}
    fill = []
    if "data.train.data_path" not in given:
        fill.append(f"data.train.data_path={(data_dir / 'train.jsonl').resolve()}")
    if "data.validation.data_path" not in given:
        fill.append(f"data.validation.data_path={(data_dir / 'val.jsonl').resolve()}")
    cfg = apply_overrides(cfg, fill)
    paths = list(_get(cfg, "env.nemo_gym.config_paths", []) or [])
    if VLLM_MODEL_CONFIG not in paths:
        paths.insert(0, VLLM_MODEL_CONFIG)  # NeMo-RL requires the _for_training model server
    if str(gym_file) not in paths:
        paths.append(str(gym_file))
    cfg.setdefault("env", {}).setdefault("nemo_gym", {})["config_paths"] = paths
    check_config(cfg, f"-c {preset_name}")
    roles = node_roles(cfg)
    warnings = []
    if _get(cfg, "policy.model_name") in (None, UNSET):
        warnings.append("policy.model_name is not set: add policy.model_name=/path/to/checkpoint (needed to submit)")
    if not (data_dir / "train.jsonl").is_file():
        warnings.append(f"{data_dir / 'train.jsonl'} does not exist yet: run `driver data prep --blend {blend.name}` "
                        f"(offline: --input FILE, or HF_HUB_OFFLINE=1 with a cache) before submitting")
    grpo_file = (out_dir / GRPO_FILE).resolve()
    job = TrainerJob(
        backend="nemo-rl", envs=[e.name for e in envs], workdir=NEMO_RL_WORKDIR,
        prepare=[["python3", str(Path(__file__).with_name("gym_config.py")), "--template", str((out_dir / GYM_TEMPLATE_FILE).resolve()),
                  "--fleet", FLEET_FILE_SLOT, "--output", str(gym_file), "--gym-root", NEMO_GYM_ROOT,
                  "--grpo", str(grpo_file)]],
        command=["uv", "run", "python", NEMO_RL_RUNNER, "--config", str(grpo_file)],
        env={"NEMO_GYM_EXTRA_ROOTS": str(GYM_ROOT)}, roles=roles,
        files={"grpo": grpo_file, "gym_template": (out_dir / GYM_TEMPLATE_FILE).resolve(), "gym_config": gym_file})
    return NemoRLPlan(preset, cfg, render_template(envs), envs, source, roles, job, out_dir, data_dir, warnings)


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
    plan.job.files["grpo"].write_text(header + yaml.safe_dump(plan.config, sort_keys=False, width=120))
    plan.job.files["gym_template"].write_text(
        "# NeMo-Gym instances for the verigym fleet; host/port are filled at job time from the fleet's report\n"
        + yaml.safe_dump(plan.gym_template, sort_keys=False))
    (plan.out_dir / "plan.txt").write_text(format_plan(plan, script=None) + "\n")


def job_spec(job: TrainerJob, name: str, job_dir: Path, fleet_nodes: int = 0) -> Any:
    """The launch module's JobSpec (trainer/launch/job_script.py) for this trainer.

    NeMo-RL sizes its cluster from ``cluster.num_nodes``, which must be the Ray nodes: the job asks
    for those plus the profile's ``fleet_nodes`` (environment servers only). The trainer step fills
    the fleet's addresses (``$VERIGYM_FLEET_FILE``, written by the readiness gate) into the Gym
    config, then starts NeMo-RL's Gym GRPO runner."""
    from trainer.launch.job_script import FleetSpec, JobSpec

    script = " && ".join([*(shlex.join(c).replace(shlex.quote(FLEET_FILE_SLOT), '"$VERIGYM_FLEET_FILE"')
                             for c in job.prepare),
                          f"cd {shlex.quote(job.workdir)}", shlex.join(job.command)])
    return JobSpec(name=name, job_dir=job_dir.resolve(), trainer_command=("bash", "-c", script),
                   fleet=FleetSpec(envs=tuple(job.envs)), env=dict(job.env), workdir=Path.cwd(),
                   nodes=(job.roles.total if job.roles else 1) + fleet_nodes, python="python3")


def format_plan(plan: NemoRLPlan, script: str | None) -> str:
    r = plan.roles
    g = plan.config["grpo"]
    lines = [
        f"backend: NeMo-RL async GRPO (keys checked against {schema_version()})",
        f"nodes: {r.total} x {r.gpus_per_node} GPUs = training {r.training}, generation {r.generation} "
        f"(vLLM, {'colocated' if _get(plan.config, 'policy.generation.colocated.enabled') else 'not colocated'}), "
        f"judges {r.judges} (env.nemo_gym.num_gpu_nodes)",
        f"environment servers: {len(plan.envs)} ({', '.join(e.name for e in plan.envs)}), one process each on the "
        "nodes the profile assigns; from " + plan.envs_source,
        "agents -> environments: " + ", ".join(f"{a}->{e.name}" for e in plan.envs for a in e.agent_names),
        f"steps: {g['num_prompts_per_step']} prompts x {g['num_generations_per_prompt']} generations, "
        f"max sequence {plan.config['policy']['max_total_sequence_length']}, "
        f"lag <= {_get(plan.config, 'grpo.async_grpo.max_trajectory_age_steps')}, "
        f"in-flight updates {_get(plan.config, 'grpo.async_grpo.in_flight_weight_updates')}",
        f"data: {_get(plan.config, 'data.train.data_path')}, {_get(plan.config, 'data.validation.data_path')}",
        f"files: {', '.join(str(p) for p in plan.job.files.values())}",
        "config changed from the preset:",
        *(config_diff(plan.preset, plan.config) or ["  (nothing)"]),
        "trainer part of the job (after the fleet's readiness gate):",
        *(f"  {line}" for line in plan.job.shell_lines()),
    ]
    if script is not None:
        lines += ["job script:", script]
    lines += [f"warning: {w}" for w in plan.warnings]
    return "\n".join(lines)
