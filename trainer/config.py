"""The GRPO run config: NeMo-RL's section and key names, typed and strictly validated.

Sections and keys mean what they mean in NeMo-RL (`MasterConfig`, ../shared/reference/nemo-rl.md
§3) so a YAML moves between backends. Unlike NeMo-RL (pydantic ``extra="allow"``: misspelled keys
are silently ignored), every section here is ``extra="forbid"`` and an unknown key is an error
naming the closest valid key.

Keys that NeMo-RL does not have are ours and are marked ``# verigym`` below. NeMo-RL keys the
built-in engine does not act on are not here, so setting one is an error that says so (and
points at ``--backend nemo-rl``) rather than a setting silently ignored: the async keys
``max_generation_failures`` and ``recompute_kv_cache_after_weight_updates``,
``policy.generation.top_k``, ``data.max_input_seq_length``,
``logger.num_val_samples_to_print``, ``cluster.gpus_per_node`` and ``cluster.num_nodes`` (the
engine runs on one machine: CPU, or its one GPU when present).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from servers.config_loader import ConfigError, apply_overrides, did_you_mean, load_yaml_with_defaults

CONFIG_DIR = Path(__file__).parent / "configs"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class AsyncGRPOConfig(_Section):
    enabled: bool = True
    max_trajectory_age_steps: int = Field(1, ge=0)
    in_flight_weight_updates: bool = True


class GRPOConfig(_Section):
    num_prompts_per_step: int = Field(8, ge=1)
    num_generations_per_prompt: int = Field(8, ge=1)
    max_num_steps: int = Field(40, ge=0)
    max_num_epochs: int = Field(100, ge=1)
    normalize_rewards: bool = True
    use_leave_one_out_baseline: bool = True
    advantage_clip_low: float | None = None
    advantage_clip_high: float | None = None
    overlong_filtering: bool = False
    seq_logprob_error_threshold: float | None = None
    val_period: int = 5  # validate every N steps; <= 0 disables periodic validation
    val_at_start: bool = True
    val_at_end: bool = True
    max_val_samples: int | None = 64
    val_num_generations_per_prompt: int = Field(1, ge=1)
    # model turns of one rollout of a session environment (seed_session -> turn -> tools -> ... -> verify)
    max_rollout_turns: int = Field(8, ge=1)
    seed: int = 42
    async_grpo: AsyncGRPOConfig = Field(default_factory=AsyncGRPOConfig)


_KL_SHAPING_KEYS = ("reference_policy_kl_type", "kl_input_clamp_value", "kl_output_clamp_value",
                    "use_on_policy_kl_approximation")


class LossConfig(_Section):
    reference_policy_kl_penalty: float = Field(0.0, ge=0)
    reference_policy_kl_type: Literal["k1", "k2", "k3"] = "k3"
    kl_input_clamp_value: float | None = 20.0
    kl_output_clamp_value: float | None = 10.0
    ratio_clip_min: float = 0.2
    ratio_clip_max: float = 0.28
    ratio_clip_c: float | None = None
    use_on_policy_kl_approximation: bool = False
    use_importance_sampling_correction: bool = True
    truncated_importance_sampling_type: Literal["tis", "icepop", "seq-mask-tis"] | None = "tis"
    truncated_importance_sampling_ratio: float | None = 2.0
    truncated_importance_sampling_ratio_min: float | None = None
    token_level_loss: bool = True
    force_on_policy_ratio: bool = False

    @model_validator(mode="after")
    def _check(self) -> "LossConfig":
        if self.reference_policy_kl_penalty == 0:
            # These shape the KL term, which exists only with a reference policy (built iff the
            # penalty is > 0): a changed value with no penalty would be accepted and do nothing.
            inert = [k for k in _KL_SHAPING_KEYS if getattr(self, k) != type(self).model_fields[k].default]
            if inert:
                raise ValueError(f"loss_fn.{', loss_fn.'.join(inert)} act only on the KL penalty, and "
                                 "loss_fn.reference_policy_kl_penalty is 0 (no reference policy is built): "
                                 "set the penalty > 0 or leave these keys at their defaults")
        if self.ratio_clip_c is not None and self.ratio_clip_c <= 1:
            raise ValueError("loss_fn.ratio_clip_c must be > 1 (dual clip, NeMo-RL)")
        t = self.truncated_importance_sampling_type
        if t is not None:
            if not self.use_importance_sampling_correction:
                raise ValueError("loss_fn.truncated_importance_sampling_type needs use_importance_sampling_correction=true")
            if not self.truncated_importance_sampling_ratio or self.truncated_importance_sampling_ratio <= 0:
                raise ValueError("loss_fn.truncated_importance_sampling_type needs truncated_importance_sampling_ratio > 0")
            if t in ("icepop", "seq-mask-tis") and self.truncated_importance_sampling_ratio_min is None:
                raise ValueError(f"loss_fn.truncated_importance_sampling_type={t} needs truncated_importance_sampling_ratio_min")
        return self


class OptimizerConfig(_Section):
    name: Literal["torch.optim.AdamW", "torch.optim.Adam", "torch.optim.SGD"] = "torch.optim.AdamW"
    kwargs: dict[str, Any] = Field(default_factory=lambda: {"lr": 3e-3, "weight_decay": 0.0, "betas": [0.9, 0.99]})


class GenerationServerConfig(_Section):  # verigym: policy.generation.backend=server (docs/model-server.md)
    # a generation server speaking vLLM's RL surface (`vllm serve` in dev mode with --weight-transfer-config
    # '{"backend": "disk"}', or `envs model serve --weight-transfer-config ...`); null = the driver starts
    # `envs model serve` on loopback for the run
    url: str | None = None
    # the started server's device: auto = policy.device's; cpu, cuda, cuda:N (another GPU than the trainer's)
    device: str = Field("auto", pattern=r"^(auto|cpu|cuda(:\d+)?)$")
    # the started server's torch CPU threads (--cpu-threads; 0 = torch's choice). On a shared CPU, threads
    # spinning against the trainer's cost more than they give (about 240 ms per tiny step)
    cpu_threads: int = Field(1, ge=0)
    timeout_s: float = Field(300.0, gt=0)  # one completion or control call; no answer = a failure-classed sample
    # where weight pushes are written for the server to read (vLLM's disk backend; the server must see the
    # folder): null = /dev/shm when present (a memory copy), else the system temp dir
    weights_dir: str | None = None


class GenerationConfig(_Section):
    max_new_tokens: int = Field(12, ge=1)
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(1.0, gt=0, le=1)
    val_temperature: float | None = None  # None = greedy validation
    stop_strings: list[str] | None = None
    # verigym: where the engine's generators decode: local (in their own process) or server (through a
    # generation server, policy.generation.server). NeMo-RL's key; its values vllm/megatron are its own.
    backend: str = "local"
    server: GenerationServerConfig = Field(default_factory=GenerationServerConfig)
    # verigym: decode steps through torch.compile (fused kernels; on a GPU, before CUDA-graph capture) in the
    # engine verigym runs: the local generators', or the server the driver starts (`envs model serve --compile`).
    # Each new batch shape compiles first (seconds on CPU, tens of seconds on a GPU).
    compile: bool = False

    @field_validator("backend")
    @classmethod
    def _check_backend(cls, value: str) -> str:
        if value in ("vllm", "megatron"):
            raise ValueError(f"{value!r} is NeMo-RL's generation backend (run NeMo-RL stage presets with --backend "
                             "nemo-rl); the built-in engine takes local or server (server with "
                             "policy.generation.server.url=http://HOST:PORT to generate with a running `vllm serve`)")
        from trainer.rollout.generator import BACKENDS  # the registered backends are the valid values

        if value not in BACKENDS:
            raise ValueError(f"unknown generation backend {value!r}: use {' or '.join(sorted(BACKENDS))}")
        return value

    @model_validator(mode="after")
    def _check_compile(self) -> "GenerationConfig":
        if self.compile and self.backend == "server" and self.server.url:
            raise ValueError("policy.generation.compile sets the engine verigym starts; the server at "
                             "policy.generation.server.url runs with its own flags (`envs model serve --compile`, "
                             "or vLLM's own compilation)")
        return self


class WarmStartConfig(_Section):  # verigym: supervised warm start on gold answers before RL
    enabled: bool = False
    num_steps: int = Field(200, ge=0)  # at most this many steps
    # stop early once the mean loss of the last 10 batches is <= this: a partial warm start that
    # ends at the same point for every seed, leaving the rest of the task for RL (None = all steps)
    target_loss: float | None = Field(None, gt=0)
    # or once the mean exact-match accuracy of the last 10 batches is >= this: the share of examples
    # whose every target token is the model's argmax (teacher-forced, before the batch's update), which
    # is exactly the share a greedy decode would reproduce. Loss mixes confidence with correctness, so
    # seeds stopped at one loss start RL from very different accuracies; one accuracy is one starting
    # point. Both set: whichever is reached first. None = not used.
    target_accuracy: float | None = Field(None, gt=0, le=1)
    batch_size: int = Field(32, ge=1)
    lr: float = 3e-3
    # The answer format the blend's environments parse, ``{answer}`` marking the gold answer (the tiny
    # preset: \\boxed{{{answer}}}). Set by the preset/blend, never assumed by the trainer; required to
    # warm-start on the rows' gold answers (not with ``conversations``).
    answer_template: str | None = None
    # verigym: a JSONL file of gold conversations ({"messages": [chat messages: user, assistant with
    # tool_calls, tool, ...], "tools": [...]}) to train on instead of the rows' gold answers: the loss
    # is on the assistant turns' tokens only, so a multi-turn tool format is taught (tool outputs and
    # prompts are context). A relative path is read from the working directory, else the repo root.
    conversations: str | None = None

    @field_validator("conversations")
    @classmethod
    def _conversations_file(cls, value: str | None) -> str | None:
        if value is None:
            return None
        path = Path(value).expanduser()
        for candidate in ([path] if path.is_absolute() else [Path.cwd() / path, CONFIG_DIR.parent.parent / path]):
            if candidate.is_file():
                return str(candidate.resolve())
        raise ValueError(f"warm-start conversations file {value!r} not found (relative paths are read from the "
                         f"working directory or the repository root)")

    @model_validator(mode="after")
    def _answer_format_given(self) -> "WarmStartConfig":
        if self.answer_template is not None and "{answer}" not in self.answer_template:
            raise ValueError(f"policy.warm_start.answer_template {self.answer_template!r} has no '{{answer}}' "
                             "placeholder for the gold answer")
        if self.enabled and self.conversations is None and self.answer_template is None:
            raise ValueError("policy.warm_start.answer_template is not set: give the answer format your environments "
                             "parse, '{answer}' marking the gold answer (e.g. '\\boxed{{{answer}}}' for math), or "
                             "warm-start on policy.warm_start.conversations")
        return self


class PolicyConfig(_Section):
    model_name: str = "tiny"
    hf_config_overrides: dict[str, Any] = Field(default_factory=dict)
    train_global_batch_size: int | None = None  # None = the whole rollout batch (one optimizer step per GRPO step)
    train_micro_batch_size: int = Field(16, ge=1)
    generation_batch_size: int = Field(4, ge=1)  # prompt groups decoded together by one generator
    max_total_sequence_length: int = Field(128, ge=8)
    # verigym: raise the context during training, as the Super RLVR stage did (49,152 -> 65,536):
    # {from_step: length}; before the first entry and with none, max_total_sequence_length, which
    # stays the ceiling. NeMo-RL has no such key (there the stage is resumed with a larger value).
    max_total_sequence_length_schedule: dict[int, int] = Field(default_factory=dict)
    max_grad_norm: float | None = 1.0
    precision: Literal["float32", "bfloat16"] = "float32"
    # verigym: where the engine's policy runs: auto (CUDA when torch sees a GPU, else CPU), cpu, cuda,
    # cuda:N. The trainer and the generators share that one GPU (trainer.grpo.actors.gpu_share).
    device: str = "auto"
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig)
    # NeMo-RL's list: [{name: torch.optim.lr_scheduler.X, kwargs: {..}}, ..., {milestones: [..]}]
    # (trainer/grpo/lr_schedule.py); stepped once per optimizer step; null = constant lr
    scheduler: list[dict[str, Any]] | None = None
    generation: GenerationConfig = Field(default_factory=GenerationConfig)
    warm_start: WarmStartConfig = Field(default_factory=WarmStartConfig)

    @model_validator(mode="after")
    def _check_schedule(self) -> "PolicyConfig":
        if self.scheduler:
            from trainer.grpo.lr_schedule import check_entries

            check_entries(self.scheduler)
        for step, length in self.max_total_sequence_length_schedule.items():
            if step < 0 or not 8 <= length <= self.max_total_sequence_length:
                raise ValueError(f"policy.max_total_sequence_length_schedule {{{step}: {length}}}: steps must be >= 0 and "
                                 f"lengths between 8 and policy.max_total_sequence_length ({self.max_total_sequence_length})")
        return self

    def max_sequence_length_at(self, step: int) -> int:
        """The context limit for rollouts trained at ``step`` (the schedule's latest entry <= step)."""
        due = [k for k in self.max_total_sequence_length_schedule if k <= step]
        return self.max_total_sequence_length_schedule[max(due)] if due else self.max_total_sequence_length


class DataConfig(_Section):
    blend: str | None = "tiny"  # verigym: blends/<name>.yaml (data prepared by `driver data prep`)
    train_data_path: str | None = None  # verigym: explicit JSONL instead of a blend
    validation_data_path: str | None = None
    shuffle: bool = True


class EffortLevelsConfig(_Section):
    """NeMo-RL's ``env.nemo_gym.effort_levels`` (same keys and defaults: off): the low-effort length
    shaping of trainer/grpo/effort.py. The Super RLVR recipe: low_weight 0.2, low_penalty 1,
    low_ub 3000, low_string "{reasoning effort: low}" (the blend's low_effort.low_string must match)."""
    low_weight: float = 0.0  # 0 = off
    low_penalty: float = 1.0
    low_ub: int = Field(64000, gt=0)  # response length (tokens) where L crosses 0
    low_string: str = ""  # substring of the last user turn that marks a low-effort prompt; "" = off

    @property
    def enabled(self) -> bool:
        return self.low_weight > 0 and bool(self.low_string)


class EnvConfig(_Section):
    should_mask_flagged_samples: bool = True
    urls: dict[str, str | list[str]] = Field(default_factory=dict)  # verigym: use running servers instead of starting them
    verify_timeout_s: float = 60.0  # verigym
    failed_rollout_retries: int = Field(2, ge=0)  # verigym: re-score a failed sample this many times, then mask it
    max_concurrency_per_server: int = Field(64, ge=1)  # verigym
    # NeMo-RL: env.nemo_gym.effort_levels (the NeMo-RL backend's presets set it there)
    effort_levels: EffortLevelsConfig = Field(default_factory=EffortLevelsConfig)
    # verigym: how a group is scored by an environment that serves POST /compare (genrm; it says so
    # on /info): compare = one call per group; verify = every sample through /verify, where the
    # server buffers the group (cohort) and scores it once all K samples have arrived.
    group_scoring: Literal["compare", "verify"] = "compare"
    # verigym: config overrides of the environment servers the driver starts, per environment
    # (what `envs serve NAME key=value` takes), e.g. {genrm: {judges: {genrm: {base_url: ...}}}}.
    server_config: dict[str, dict[str, Any]] = Field(default_factory=dict)


class WandbConfig(_Section):
    project: str = "verigym"
    name: str | None = None
    mode: Literal["online", "offline", "disabled"] = "offline"


class LoggerConfig(_Section):
    log_dir: str = "runs/latest"
    wandb_enabled: bool = False
    tensorboard_enabled: bool = False
    wandb: WandbConfig = Field(default_factory=WandbConfig)
    progress_bar: bool = True  # verigym


class CheckpointingConfig(_Section):
    enabled: bool = True
    checkpoint_dir: str | None = None  # None = <logger.log_dir>/checkpoints
    save_period: int = Field(5, ge=1)
    keep_top_k: int | None = 2  # verigym keeps the newest k (no metric-based ranking)
    save_optimizer: bool = True


class ClusterConfig(_Section):
    ray_address: str | None = None  # verigym: None = start a local Ray; "auto" or host:port = join a cluster
    num_cpus: int | None = None  # verigym: local Ray only
    num_generation_workers: int = Field(1, ge=1)  # verigym: generator actors
    weight_transport: Literal["auto", "shm", "ray"] = "auto"  # verigym: auto = shm locally, ray on a cluster
    control_timeout_s: float = Field(120.0, gt=0)  # verigym: every control call (sync, train, save) is bounded
    torch_threads_per_actor: int = Field(1, ge=1)  # verigym
    # verigym: Ray custom resources each actor asks for, to pin it to the nodes that offer them
    # (`ray start --resources='{"verigym_trainer": 1}'`); empty = anywhere (SPREAD on a cluster)
    trainer_resources: dict[str, float] = Field(default_factory=dict)
    generator_resources: dict[str, float] = Field(default_factory=dict)  # each generator asks for this much


class MasterConfig(_Section):
    grpo: GRPOConfig = Field(default_factory=GRPOConfig)
    loss_fn: LossConfig = Field(default_factory=LossConfig)
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    env: EnvConfig = Field(default_factory=EnvConfig)
    logger: LoggerConfig = Field(default_factory=LoggerConfig)
    checkpointing: CheckpointingConfig = Field(default_factory=CheckpointingConfig)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)

    @model_validator(mode="after")
    def _check(self) -> "MasterConfig":
        g, p = self.grpo, self.policy
        rollout = g.num_prompts_per_step * g.num_generations_per_prompt
        gbs = p.train_global_batch_size or rollout
        if rollout % gbs:
            raise ValueError(f"policy.train_global_batch_size={gbs} must divide the rollout batch "
                             f"num_prompts_per_step*num_generations_per_prompt={rollout}")
        if self.loss_fn.force_on_policy_ratio and gbs != rollout:
            # NeMo-RL asserts exactly one optimizer step per GRPO step here (grpo.py ~L699)
            raise ValueError("loss_fn.force_on_policy_ratio=true needs policy.train_global_batch_size == "
                             f"num_prompts_per_step*num_generations_per_prompt ({rollout})")
        if p.generation.backend == "server" and self.cluster.num_generation_workers != 1:
            # one generator pushes the weights; the server batches whatever its requests hold
            raise ValueError("policy.generation.backend=server takes cluster.num_generation_workers=1 (the server "
                             "batches the requests; raise policy.generation_batch_size for more rows at once)")
        return self

    # ---- derived geometry -------------------------------------------------------------
    @property
    def max_age(self) -> int:
        """The admission/staleness bound; the synchronous baseline is the same engine at 0."""
        a = self.grpo.async_grpo
        return a.max_trajectory_age_steps if a.enabled else 0

    @property
    def in_flight_updates(self) -> bool:
        a = self.grpo.async_grpo
        return a.enabled and a.in_flight_weight_updates

    @property
    def rollout_batch_size(self) -> int:
        return self.grpo.num_prompts_per_step * self.grpo.num_generations_per_prompt

    @property
    def global_batch_size(self) -> int:
        return self.policy.train_global_batch_size or self.rollout_batch_size


def _check_keys(model: type[BaseModel], data: Any, path: str) -> None:
    """Reject unknown keys with the closest valid key; recurse into sub-sections."""
    if not isinstance(data, dict):
        return
    fields = model.model_fields
    for key, value in data.items():
        if key not in fields:
            where = f"{path}.{key}" if path else key
            from trainer.recipe_names import renamed_within

            renamed = renamed_within(where, value, "local")
            if renamed:  # a Nemotron recipe spelling: say the key it is here, not a near spelling
                raise ConfigError(f"unknown config key {where!r}: {renamed}")
            from trainer.nemo_rl.schema import is_nemo_rl_key

            if is_nemo_rl_key(where):  # a real NeMo-RL key (a stage preset's) this engine cannot act on
                raise ConfigError(f"config key {where!r} is NeMo-RL's, and the built-in engine cannot act on it; "
                                  "run NeMo-RL stage presets with --backend nemo-rl")
            hint = did_you_mean(key, fields, cutoff=0.5, prefix=f"{path}." if path else "") or \
                f"valid keys{' of ' + path if path else ''}: {', '.join(fields)}"
            raise ConfigError(f"unknown config key {where!r}: {hint}")
        ann = fields[key].annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            _check_keys(ann, value, f"{path}.{key}" if path else key)


def resolve_config_path(name_or_path: str) -> Path:
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        if not p.exists():
            raise ConfigError(f"config file {p} does not exist")
        return p
    cand = CONFIG_DIR / f"{name_or_path}.yaml"
    if not cand.exists():
        names = sorted(x.stem for x in CONFIG_DIR.glob("*.yaml"))
        close = did_you_mean(name_or_path, names)
        raise ConfigError(f"no config named {name_or_path!r} in {CONFIG_DIR}"
                          + (f"; {close}" if close else f"; available: {', '.join(names)}"))
    return cand


def build_config(data: dict[str, Any]) -> MasterConfig:
    _check_keys(MasterConfig, data, "")
    try:
        return MasterConfig.model_validate(data)
    except ValidationError as exc:
        lines = [f"  {'.'.join(str(x) for x in e['loc']) or '<root>'}: {e['msg']}" for e in exc.errors()]
        raise ConfigError("invalid config:\n" + "\n".join(lines)) from None


def load_config(name_or_path: str | None = None, overrides: list[str] | None = None) -> MasterConfig:
    """``-c NAME|PATH`` plus dotlist overrides -> a validated config."""
    data = load_yaml_with_defaults(resolve_config_path(name_or_path)) if name_or_path else {}
    return build_config(apply_overrides(data, overrides or []))


def to_yaml(cfg: MasterConfig) -> str:
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
