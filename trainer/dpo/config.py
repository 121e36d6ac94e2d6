"""The DPO run config: NeMo-RL's ``examples/configs/dpo.yaml`` sections and keys, strictly validated.

``dpo.*`` keys and defaults are NeMo-RL's ``DPOConfig``; ``policy``, ``logger`` and ``checkpointing``
reuse the GRPO config's sections where NeMo-RL's keys mean the same. Unknown keys are errors naming
the closest valid key (trainer/config.py's checker). Keys NeMo-RL does not have are marked
``# verigym``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from servers.config_loader import ConfigError, apply_overrides, load_yaml_with_defaults
from trainer.config import CheckpointingConfig, GenerationConfig, LoggerConfig, OptimizerConfig, _check_keys

DPO_CONFIG_DIR = Path(__file__).parent / "configs"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class DPOConfig(_Section):
    max_num_epochs: int = Field(1, ge=1)
    max_num_steps: int = Field(150, ge=0)
    val_period: int = 25              # validate every N steps; <= 0 disables periodic validation
    val_batches: int = 8              # validation batches per validation; <= 0 = the whole validation set
    val_global_batch_size: int = Field(8, ge=1)
    val_micro_batch_size: int = Field(1, ge=1)
    val_at_start: bool = True
    val_at_end: bool = False
    seed: int = 42
    reference_policy_kl_penalty: float = Field(0.05, gt=0)   # beta
    preference_average_log_probs: bool = False
    # NeMo-RL's yaml sets this to ${.preference_average_log_probs}; None here means the same
    sft_average_log_probs: bool | None = None
    preference_loss_weight: float = Field(1.0, ge=0)
    sft_loss_weight: float = Field(0.0, ge=0)

    @model_validator(mode="after")
    def _check(self) -> "DPOConfig":
        if self.preference_loss_weight == 0 and self.sft_loss_weight == 0:
            raise ValueError("dpo.preference_loss_weight and dpo.sft_loss_weight are both 0: nothing to train")
        return self


class DPOPolicyConfig(_Section):
    model_name: str = "tiny"
    hf_config_overrides: dict[str, Any] = Field(default_factory=dict)  # tiny only: TinyModelConfig fields
    train_global_batch_size: int = Field(128, ge=1)   # preference pairs per optimizer step
    train_micro_batch_size: int = Field(2, ge=1)      # pairs per forward/backward
    max_total_sequence_length: int = Field(1024, ge=8)
    max_grad_norm: float | None = 1.0
    precision: str = "float32"
    optimizer: OptimizerConfig = Field(default_factory=lambda: OptimizerConfig(
        kwargs={"lr": 5.0e-6, "weight_decay": 0.1, "betas": [0.9, 0.98], "eps": 1e-5}))
    # verigym: sampling for the hallucination validation (data.hallucination_eval); unused without it
    generation: GenerationConfig = Field(default_factory=lambda: GenerationConfig(max_new_tokens=128))


class PreferenceSplitConfig(_Section):
    data_path: str | None = None   # JSONL of pairs (NeMo-RL PreferenceDataset or BinaryPreferenceDataset rows)
    prompt_key: str = "prompt"      # BinaryPreferenceDataset rows only
    chosen_key: str = "chosen"
    rejected_key: str = "rejected"


class HallucinationEvalConfig(_Section):  # verigym
    data_path: str                  # tool rows (NeMo-Gym JSONL with responses_create_params.tools)
    num_generations: int = Field(4, ge=1)   # sampled responses per row
    max_rows: int | None = Field(None, ge=1)


class DPODataConfig(_Section):
    train: PreferenceSplitConfig = Field(default_factory=PreferenceSplitConfig)
    validation: PreferenceSplitConfig | None = None
    shuffle: bool = True
    # verigym: validation also measures the tool hallucination rate of sampled responses on these rows
    hallucination_eval: HallucinationEvalConfig | None = None


class DPOMasterConfig(_Section):
    dpo: DPOConfig = Field(default_factory=DPOConfig)
    policy: DPOPolicyConfig = Field(default_factory=DPOPolicyConfig)
    data: DPODataConfig = Field(default_factory=DPODataConfig)
    logger: LoggerConfig = Field(default_factory=lambda: LoggerConfig(log_dir="runs/dpo"))
    checkpointing: CheckpointingConfig = Field(default_factory=lambda: CheckpointingConfig(save_period=50))

    @model_validator(mode="after")
    def _check(self) -> "DPOMasterConfig":
        p = self.policy
        if p.train_global_batch_size % p.train_micro_batch_size:
            raise ValueError(f"policy.train_micro_batch_size={p.train_micro_batch_size} must divide "
                             f"policy.train_global_batch_size={p.train_global_batch_size}")
        if self.data.hallucination_eval is None and p.generation != GenerationConfig(max_new_tokens=128):
            raise ValueError("policy.generation is used only by data.hallucination_eval, which is not set")
        if self.dpo.val_period > 0 or self.dpo.val_at_start or self.dpo.val_at_end:
            if self.data.validation is None and self.data.hallucination_eval is None:
                raise ValueError("validation is on (dpo.val_period / val_at_start / val_at_end) but there is nothing "
                                 "to validate: set data.validation.data_path or data.hallucination_eval, or turn "
                                 "validation off (dpo.val_period=0 dpo.val_at_start=false dpo.val_at_end=false)")
        return self

    @property
    def sft_average_log_probs(self) -> bool:
        s = self.dpo.sft_average_log_probs
        return self.dpo.preference_average_log_probs if s is None else s


def resolve_dpo_config_path(name_or_path: str) -> Path:
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        if not p.exists():
            raise ConfigError(f"config file {p} does not exist")
        return p
    cand = DPO_CONFIG_DIR / f"{name_or_path}.yaml"
    if not cand.exists():
        names = ", ".join(sorted(x.stem for x in DPO_CONFIG_DIR.glob("*.yaml")))
        raise ConfigError(f"no DPO config named {name_or_path!r} in {DPO_CONFIG_DIR}; available: {names}")
    return cand


def load_dpo_config(name_or_path: str | None = None, overrides: list[str] | None = None) -> DPOMasterConfig:
    data = load_yaml_with_defaults(resolve_dpo_config_path(name_or_path)) if name_or_path else {}
    data = apply_overrides(data, overrides or [])
    try:
        _check_keys(DPOMasterConfig, data, "")
    except ConfigError as exc:  # the shared checker's hint names `driver run`'s NeMo-RL backend
        raise ConfigError(str(exc).replace("; run NeMo-RL stage presets with --backend nemo-rl",
                                           " (driver dpo runs the built-in engine only)")) from None
    try:
        return DPOMasterConfig.model_validate(data)
    except ValidationError as exc:
        lines = [f"  {'.'.join(str(x) for x in e['loc']) or '<root>'}: {e['msg']}" for e in exc.errors()]
        raise ConfigError("invalid DPO config:\n" + "\n".join(lines)) from None


def dpo_config_yaml(cfg: DPOMasterConfig) -> str:
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
