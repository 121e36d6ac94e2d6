"""Low-effort reasoning reward and per-prompt tags (NeMo-RL effort levels, reference nemo-rl.md §1.4).

A prompt is *low effort* when its last user turn contains ``env.effort_levels.low_string`` (data
prep appends it to a fraction of prompts: the blend's ``low_effort`` conversion). After the
environment scored such a response, the trainer shapes its reward by the response's length in
tokens ℓ (NeMo-RL ``_apply_effort_shaping``, nemo_rl/experience/rollouts.py)::

    L  = min(1, low_weight * (1 - ℓ / low_ub))
    R' = R + R * max(L, 0) + low_penalty * min(L, 0)

so a correct short answer earns up to ``low_weight`` more, and a response longer than ``low_ub``
tokens is penalised whether it is right or not. The Super RLVR recipe: trigger
"{reasoning effort: low}", low_weight 0.2, low_penalty 1, low_ub 3000. ``low_weight = 0`` or an
empty ``low_string`` turns it off (NeMo-RL's defaults). Only training rewards are shaped:
validation reports what the verifier said.

Data prep also tags rewritten rows for reasoning control (``_verigym_reasoning``,
trainer/reasoning_control.py; the task keeps it in ``task.tags``); :func:`prompt_kind` names each
sample's prompt kind so the step metrics can count them.
"""

from __future__ import annotations

from typing import Any, Sequence

from trainer.config import EffortLevelsConfig
from trainer.reasoning_control import REASONING_KEY  # data prep's reasoning-control tag
from trainer.rollout.task import Task


def length_reward(length: int, low_weight: float, low_ub: int) -> float:
    """L = min(1, w * (1 - length / U))."""
    return min(1.0, low_weight * (1.0 - length / low_ub))


def shape_reward(reward: float, length: int, cfg: EffortLevelsConfig) -> tuple[float, float]:
    """(R', L) for a low-effort response of ``length`` tokens whose environment reward is R."""
    lr = length_reward(length, cfg.low_weight, cfg.low_ub)
    return reward + reward * max(lr, 0.0) + cfg.low_penalty * min(lr, 0.0), lr


def last_user_text(row: dict[str, Any]) -> str:
    """The last user turn's text (a string input counts as one user turn), as NeMo-RL reads it."""
    items = (row.get("responses_create_params") or {}).get("input", "")
    if isinstance(items, str):
        return items
    for item in reversed(items or []):
        if isinstance(item, dict) and item.get("role") == "user":
            content = item.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):  # Responses-API content parts
                return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def is_low_effort(row: dict[str, Any], cfg: EffortLevelsConfig) -> bool:
    return cfg.enabled and cfg.low_string in last_user_text(row)


def prompt_kind(task: Task, cfg: EffortLevelsConfig) -> str:
    """``low_effort``, ``reasoning_off``, ``reasoning_budget`` or ``""`` (a plain prompt)."""
    if is_low_effort(task.row, cfg):
        return "low_effort"
    tag = task.tags.get(REASONING_KEY)
    if isinstance(tag, dict) and tag.get("mode") in ("off", "budget"):
        return "reasoning_off" if tag["mode"] == "off" else "reasoning_budget"
    return ""


def apply_effort_shaping(samples: Sequence[Any], task: Task, cfg: EffortLevelsConfig) -> None:
    """Tag every sample of ``task``'s group with its prompt kind; shape the scored (not failed) samples'
    rewards when the prompt is low effort. ``samples`` have ``reward``, ``failure``, ``gen_ids``,
    ``kind`` and ``length_reward`` (trainer.grpo.replay_buffer.Sample)."""
    kind = prompt_kind(task, cfg)
    for s in samples:
        s.kind = kind
        if kind == "low_effort" and s.failure is None:
            s.reward, s.length_reward = shape_reward(s.reward, len(s.gen_ids), cfg)


def effort_metrics(samples: Sequence[Any]) -> dict[str, float]:
    """Step metrics: share of each prompt kind, and NeMo-RL's effort-shaping means (only when there
    are low-effort samples: an absent metric is not a zero)."""
    n = max(len(samples), 1)
    out: dict[str, float] = {f"train/prompts/{k}_frac": sum(s.kind == k for s in samples) / n
                             for k in ("low_effort", "reasoning_off", "reasoning_budget")}
    low = [s for s in samples if s.kind == "low_effort"]
    if not low:
        return out
    high = [s for s in samples if s.kind != "low_effort"]
    shaped = [s for s in low if s.length_reward is not None]
    if shaped:
        out["train/effort/mean_length_reward_low"] = sum(s.length_reward for s in shaped) / len(shaped)
        out["train/effort/mean_reward_low"] = sum(s.reward for s in shaped) / len(shaped)
    out["train/effort/mean_length_low"] = sum(len(s.gen_ids) for s in low) / len(low)
    if high:
        out["train/effort/mean_length_high"] = sum(len(s.gen_ids) for s in high) / len(high)
    return out
