"""The Nemotron recipe's spellings, and what they are here.

A Nemotron user types ``nemotron super3 rl rlvr -c rlvr2`` (the recipe's config names:
``default``/``rlvr1``, ``rlvr2``, ``rlvr3``, ``small``, ``test`` under
``super3/stage2_rl/stage1_rlvr/config/``; ``small`` also for swe1 and rlhf) and overrides from
the recipes' READMEs (``grpo.num_iterations=200``, ``grpo.learning_rate=5e-7``). Here a stage
is a preset (``-c rlvr``) and the data a blend (``--blend rlvr2``); :func:`recipe_config`
maps one onto the other, and :func:`renamed_key` says what a recipe key is called here, per
backend, so the error names the key instead of a near spelling that means something else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Backend = Literal["local", "nemo-rl"]

# The blends of each stage preset (blends/), the first being the stage's default (the recipe's
# default.yaml trains rlvr1; small.yaml and test.yaml use rlvr1's data too).
STAGE_BLENDS: dict[str, tuple[str, ...]] = {"rlvr": ("rlvr1", "rlvr2", "rlvr3"), "swe1": ("swe1",),
                                            "swe2": ("swe2",), "rlhf": ("rlhf",)}
# Recipe variants -> the preset suffix here (the recipe's small.yaml: a 21-node run; test.yaml: one node).
VARIANTS = {"small": "_small", "test": "_test"}


@dataclass(frozen=True)
class RecipeConfig:
    name: str  # as typed
    preset: str  # trainer/configs/<preset>.yaml
    blend: str

    def said(self) -> str:
        return (f"config: -c {self.name} is the Nemotron recipe's name; here it is the stage preset "
                f"-c {self.preset} with --blend {self.blend}")


def _stage_of(blend: str | None) -> str | None:
    return next((stage for stage, blends in STAGE_BLENDS.items() if blend in blends), None)


def recipe_config(name: str, blend: str | None) -> RecipeConfig | None:
    """The preset + blend a recipe config name stands for (None: not a recipe name). ``blend`` is
    the ``--blend`` given, if any: it picks the stage of ``small``/``test`` and must agree with
    ``rlvrN``. Raises ValueError when it does not."""
    if name in STAGE_BLENDS["rlvr"]:  # rlvr1, rlvr2, rlvr3: one stage, three data sets
        if blend is not None and blend != name:
            raise ValueError(f"-c {name} (the Nemotron recipe's name) means -c rlvr --blend {name}, but --blend {blend} "
                             f"was given: use -c rlvr --blend {blend}")
        return RecipeConfig(name, "rlvr", name)
    if name in VARIANTS:
        stage = _stage_of(blend) or "rlvr"
        if blend is not None and _stage_of(blend) is None:
            raise ValueError(f"-c {name} (the Nemotron recipe's name) is a stage preset's {name} variant; --blend "
                             f"{blend} is no stage's blend ({', '.join(b for bs in STAGE_BLENDS.values() for b in bs)})")
        return RecipeConfig(name, stage + VARIANTS[name], blend or STAGE_BLENDS[stage][0])
    return None


def stage_default_blend(preset: str) -> str | None:
    """The blend a stage preset (``rlvr``, ``swe1_small``, ...) trains on when none is given."""
    stage = preset
    for suffix in VARIANTS.values():
        stage = stage.removesuffix(suffix)
    return STAGE_BLENDS[stage][0] if stage in STAGE_BLENDS else None


# Keys the Nemotron recipes' READMEs use (nano3/super3 stage2_rl) that are named differently
# here, per backend: the built-in engine's config (trainer/config.py), NeMo-RL's schema.
RENAMED_KEYS: dict[str, dict[Backend, str]] = {
    "grpo.num_iterations": {"local": "grpo.max_num_steps", "nemo-rl": "grpo.max_num_steps"},
    "grpo.learning_rate": {"local": "policy.optimizer.kwargs.lr",
                           "nemo-rl": "policy.megatron_cfg.optimizer.lr (the recipe keeps "
                                      "policy.megatron_cfg.optimizer.min_lr equal to it)"},
    "grpo.batch_size": {"local": "grpo.num_prompts_per_step (prompts per step; policy.train_global_batch_size "
                                 "is samples per optimizer step)",
                        "nemo-rl": "grpo.num_prompts_per_step (prompts per step; policy.train_global_batch_size "
                                   "is samples per optimizer step)"},
    "grpo.num_val_generations_per_prompt": {"local": "grpo.val_num_generations_per_prompt",
                                            "nemo-rl": "grpo.val_num_generations_per_prompt"},
    "data.train_jsonl_fpath": {"local": "data.train_data_path (or --blend with --data-dir)",
                               "nemo-rl": "data.train.data_path (the driver fills it from --blend/--data-dir)"},
    "data.validation_jsonl_fpath": {"local": "data.validation_data_path",
                                    "nemo-rl": "data.validation.data_path (the driver fills it from --blend/--data-dir)"},
    "policy.megatron_cfg.optimizer.lr": {"local": "policy.optimizer.kwargs.lr"},
}


def renamed_key(dotted: str, backend: Backend) -> str | None:
    """``'grpo.num_iterations' is grpo.max_num_steps here`` — or None when ``dotted`` is no recipe key."""
    target = RENAMED_KEYS.get(dotted, {}).get(backend)
    if target is None:
        return None
    where = "the built-in engine" if backend == "local" else "NeMo-RL's config (--backend nemo-rl)"
    return f"{dotted!r} (the Nemotron recipe's key) is {target} in {where}"


def renamed_within(dotted: str, value: object, backend: Backend) -> str | None:
    """:func:`renamed_key` for ``dotted`` or any key under it when it is a section given as a
    mapping (``policy.megatron_cfg: {optimizer: {lr: ...}}`` holds a recipe key)."""
    said = renamed_key(dotted, backend)
    if said is None and isinstance(value, dict):
        for key, inner in value.items():
            said = renamed_within(f"{dotted}.{key}", inner, backend)
            if said:
                break
    return said
