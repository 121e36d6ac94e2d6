"""policy.max_total_sequence_length bounds prompt + response; prompts with no room fail with a class."""
import pytest

from trainer.config import load_config


def test_prompt_plus_response_fits_max_total_sequence_length_and_long_prompts_fail_with_a_class():
    import asyncio

    import torch

    from trainer.rollout.sample import Group, Ticket
    from trainer.grpo.train_step import grpo_train_step
    from trainer.grpo.reward_worker import RewardWorker
    from trainer.policy import load_policy
    from trainer.rollout.batch import BatchSettings, run_batch
    from trainer.rollout.episode import prompt_ids
    from trainer.rollout.generator import SamplingParams, make_generator
    from trainer.rollout.sample import PROMPT_TOO_LONG
    from trainer.rollout.scoring import EnvInfo
    from trainer.rollout.task import Routes, make_tasks

    cfg = load_config("tiny", ["policy.max_total_sequence_length=40", "policy.generation.max_new_tokens=12",
                               "grpo.num_prompts_per_step=3", "grpo.num_generations_per_prompt=2"])
    policy = load_policy(cfg, 1)
    rows = [{"responses_create_params": {"input": [{"role": "user", "content": text}]}}
            for text in ("1+2=", "x" * 10, "y" * 60)]
    tasks = make_tasks(rows, Routes(default_env="math"))
    prompts = [prompt_ids(policy, r) for r in rows]
    short, tight, long_ = (len(p) for p in prompts)
    assert short + 12 <= 40 < tight + 12 and tight < 40 <= long_  # full budget, capped budget, no room
    # the one rollout function, as the generators run it (no servers: one-turn episodes stop before verify)
    per_task = run_batch(make_generator(policy), EnvInfo({}), tasks, 2, SamplingParams.from_config(cfg.policy.generation),
                         BatchSettings.from_config(cfg), seed=0)
    samples = [s for group in per_task for s in group]
    for s in samples[:4]:
        assert s.failure is None and len(s.prompt_ids) + len(s.gen_ids) <= 40 and s.gen_ids
        assert not s.scored and s.response["output"][-1]["generation_token_ids"] == s.gen_ids
    assert all(len(s.gen_ids) == 40 - tight for s in samples[2:4] if s.truncated)
    for s in samples[4:]:
        assert s.failure == PROMPT_TOO_LONG and s.gen_ids == [] and len(s.prompt_ids) == 39 and s.scored

    # the reward worker does not send it to a server (there is none here) and counts its class
    reward = RewardWorker(cfg, {}, None, tasks)
    asyncio.run(reward.scorer.score_group(tasks[2], samples[4:], 2))
    assert reward.get_stats()["failures_by_class"] == {PROMPT_TOO_LONG: 2}
    assert all(s.env == "math" and s.failure == PROMPT_TOO_LONG for s in samples[4:])

    # a training step over the batch masks those samples and trains the rest
    for i, s in enumerate(samples[:4]):
        s.reward = float(i % 2)
    groups = [Group(Ticket(i, i, i), f"p{i}", 0, samples[2 * i:2 * i + 2]) for i in range(3)]
    opt = torch.optim.SGD(policy.model.parameters(), lr=0.0)
    m = grpo_train_step(policy.model, opt, groups, 0, cfg, policy.tokenizer.pad_token_id)
    assert m["train/failed_frac"] == pytest.approx(2 / 6) and m["train/masked_frac"] == pytest.approx(2 / 6)
    assert m["train/global_valid_seqs"] == 4

