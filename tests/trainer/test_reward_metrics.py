"""train/reward and train/reward/{env} count failed samples the same way."""

from __future__ import annotations

import pytest
import torch

from trainer.config import load_config
from trainer.rollout.sample import Group, Sample, Ticket
from trainer.grpo.train_step import grpo_train_step


def _sample(env: str, reward: float, failure: str | None = None) -> Sample:
    return Sample(prompt_ids=[5, 6], gen_ids=[7, 8], gen_logprobs=[-1.0, -1.0], versions=[0, 0], truncated=False,
                  reward=reward, failure=failure, env=env)


@pytest.mark.parametrize("mask_flagged, expect_a", [(True, 1.0), (False, 0.5)])
def test_per_env_reward_agrees_with_overall_reward_on_failed_samples(mask_flagged, expect_a):
    from trainer.policy import load_policy

    cfg = load_config("tiny", ["grpo.num_prompts_per_step=2", "grpo.num_generations_per_prompt=2",
                               f"env.should_mask_flagged_samples={str(mask_flagged).lower()}"])
    policy = load_policy(cfg, 1)
    groups = [Group(Ticket(0, 0, 0), "a", 0, [_sample("a", 1.0), _sample("a", 0.0, failure="connection_error")]),
              Group(Ticket(1, 1, 1), "b", 0, [_sample("b", 1.0), _sample("b", 0.0)])]
    m = grpo_train_step(policy.model, torch.optim.SGD(policy.model.parameters(), lr=0.0), groups, 0, cfg,
                        policy.tokenizer.pad_token_id)
    assert m["train/reward/a"] == pytest.approx(expect_a)  # the failed sample: left out when masked
    assert m["train/reward/b"] == pytest.approx(0.5)
    overall = (2.0 / 3) if mask_flagged else 0.5
    assert m["train/reward"] == pytest.approx(overall)
