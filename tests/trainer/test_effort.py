"""Low-effort length shaping (NeMo-RL effort levels) on values computed by hand, and the prompt tags."""

from __future__ import annotations

import pytest

from trainer.config import EffortLevelsConfig
from trainer.grpo.effort import (apply_effort_shaping, effort_metrics, is_low_effort, last_user_text, length_reward,
                                 prompt_kind, shape_reward)
from trainer.rollout.sample import Sample
from trainer.rollout.task import Routes, make_task

SUPER = EffortLevelsConfig(low_weight=0.2, low_penalty=1.0, low_ub=3000, low_string="{reasoning effort: low}")


@pytest.mark.parametrize("reward, length, shaped, lr", [
    (1.0, 0, 1.2, 0.2),        # L = 0.2 * (1 - 0) = 0.2 -> 1 + 1 * 0.2
    (1.0, 1500, 1.1, 0.1),     # L = 0.2 * 0.5
    (1.0, 3000, 1.0, 0.0),     # at the bound: no bonus, no penalty
    (1.0, 6000, 0.8, -0.2),    # L = 0.2 * (1 - 2) = -0.2 -> 1 + 0 + 1 * (-0.2)
    (0.0, 6000, -0.2, -0.2),   # a wrong long answer is penalised too
    (0.0, 1500, 0.0, 0.1),     # a wrong short answer gets no bonus (R * max(L, 0) = 0)
    (0.5, 600, 0.58, 0.16),    # L = 0.2 * 0.8 = 0.16 -> 0.5 + 0.08
])
def test_super_recipe_values(reward: float, length: int, shaped: float, lr: float) -> None:
    got, got_lr = shape_reward(reward, length, SUPER)
    assert got == pytest.approx(shaped)
    assert got_lr == pytest.approx(lr)


def test_length_reward_is_capped_at_one_and_penalty_scales() -> None:
    assert length_reward(0, 3.0, 100) == 1.0                       # min(1, 3)
    cfg = EffortLevelsConfig(low_weight=3.0, low_penalty=2.0, low_ub=100, low_string="x")
    assert shape_reward(0.7, 0, cfg)[0] == pytest.approx(1.4)        # R + R * 1
    assert shape_reward(0.7, 200, cfg)[0] == pytest.approx(0.7 - 6.0)  # L = 3 * (1 - 2) = -3; 2 * -3


def _row(text: str, **extra) -> dict:
    return {"responses_create_params": {"input": [{"role": "system", "content": "be brief {reasoning effort: low}"},
                                                   {"role": "user", "content": text}]}, **extra}


def _task(text: str, **extra):
    """The task of a row (data prep's _verigym_* tags go to task.tags)."""
    return make_task(_row(text, **extra), 0, Routes(default_env="math"))


def test_trigger_is_read_from_the_last_user_turn_only() -> None:
    assert is_low_effort(_row("2+2? {reasoning effort: low}"), SUPER)
    assert not is_low_effort(_row("2+2?"), SUPER)  # the system turn carries it, not the user turn
    assert last_user_text({"responses_create_params": {"input": "plain {reasoning effort: low}"}}).endswith("low}")
    parts = {"responses_create_params": {"input": [{"role": "user", "content": [{"type": "input_text", "text": "a"},
                                                                                 {"type": "input_text", "text": "b"}]}]}}
    assert last_user_text(parts) == "ab"
    off = EffortLevelsConfig(low_weight=0.0, low_string="{reasoning effort: low}")
    assert not is_low_effort(_row("x {reasoning effort: low}"), off)  # low_weight 0 = off (NeMo-RL)


def _sample(reward: float, n_tokens: int, failure: str | None = None) -> Sample:
    return Sample(prompt_ids=[1], gen_ids=[7] * n_tokens, gen_logprobs=[0.0] * n_tokens, versions=[0] * n_tokens,
                  truncated=False, reward=reward, failure=failure)


def test_shaping_a_group_skips_failed_samples_and_tags_kinds() -> None:
    group = [_sample(1.0, 1500), _sample(0.0, 6000), _sample(0.0, 10, failure="judge_error")]
    apply_effort_shaping(group, _task("2+2? {reasoning effort: low}"), SUPER)
    assert [s.reward for s in group] == pytest.approx([1.1, -0.2, 0.0])
    assert [s.length_reward for s in group][:2] == pytest.approx([0.1, -0.2])
    assert group[2].length_reward is None and group[2].reward == 0.0  # masked anyway: never shaped
    assert {s.kind for s in group} == {"low_effort"}

    plain = [_sample(1.0, 6000)]
    apply_effort_shaping(plain, _task("2+2?"), SUPER)
    assert plain[0].reward == 1.0 and plain[0].kind == "" and plain[0].length_reward is None

    off = [_sample(1.0, 5)]
    apply_effort_shaping(off, _task("2+2?", _verigym_reasoning={"mode": "off"}), SUPER)
    assert off[0].kind == "reasoning_off" and off[0].reward == 1.0
    assert prompt_kind(_task("q", _verigym_reasoning={"mode": "budget", "budget_words": 64}), SUPER) == "reasoning_budget"


def test_metrics_count_kinds_and_report_effort_means_only_with_low_samples() -> None:
    low, plain = [_sample(1.0, 1500), _sample(1.0, 3000)], [_sample(1.0, 100), _sample(0.0, 300)]
    apply_effort_shaping(low, _task("q {reasoning effort: low}"), SUPER)
    apply_effort_shaping(plain, _task("q"), SUPER)
    m = effort_metrics(low + plain)
    assert m["train/prompts/low_effort_frac"] == 0.5 and m["train/prompts/reasoning_off_frac"] == 0.0
    assert m["train/effort/mean_length_reward_low"] == pytest.approx(0.05)
    assert m["train/effort/mean_reward_low"] == pytest.approx(1.05)
    assert m["train/effort/mean_length_low"] == 2250 and m["train/effort/mean_length_high"] == 200
    assert not [k for k in effort_metrics(plain) if k.startswith("train/effort/")]
