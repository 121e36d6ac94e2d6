"""policy.max_total_sequence_length_schedule: the context limit rises during training (Super RLVR 49,152 -> 65,536)."""

import pytest

from trainer.config import ConfigError, load_config


def test_schedule_picks_the_latest_entry_and_is_bounded_by_the_ceiling():
    cfg = load_config("tiny", ["policy.max_total_sequence_length=65536",
                               "policy.max_total_sequence_length_schedule={0: 49152, 300: 65536}"])
    assert [cfg.policy.max_sequence_length_at(s) for s in (0, 299, 300, 10_000)] == [49152, 49152, 65536, 65536]
    late = load_config("tiny", ["policy.max_total_sequence_length_schedule={10: 64}"])
    assert [late.policy.max_sequence_length_at(s) for s in (0, 9, 10)] == [128, 128, 64]  # ceiling before the first entry
    with pytest.raises(ConfigError, match="max_total_sequence_length_schedule"):
        load_config("tiny", ["policy.max_total_sequence_length_schedule={0: 256}"])  # above the ceiling
    with pytest.raises(ConfigError, match="max_total_sequence_length_schedule"):
        load_config("tiny", ["policy.max_total_sequence_length_schedule={-1: 64}"])


def test_rollouts_follow_the_limit_of_the_step_they_train_at():
    import torch

    from trainer.policy import load_policy
    from trainer.rollout.batch import BatchSettings, run_batch
    from trainer.rollout.episode import prompt_ids
    from trainer.rollout.generator import SamplingParams, make_generator
    from trainer.rollout.sample import PROMPT_TOO_LONG
    from trainer.rollout.scoring import EnvInfo
    from trainer.rollout.task import Routes, make_tasks

    cfg = load_config("tiny", ["policy.max_total_sequence_length=128", "policy.generation.max_new_tokens=12",
                               "policy.max_total_sequence_length_schedule={0: 40, 5: 128}"])
    policy = load_policy(cfg, 1)
    rows = [{"responses_create_params": {"input": [{"role": "user", "content": t}]}} for t in ("x" * 10, "y" * 60)]
    prompts = [prompt_ids(policy, r) for r in rows]
    tight, long_ = (len(p) for p in prompts)
    assert tight < 40 < tight + 12 and 40 <= long_ < 116
    tasks = make_tasks(rows, Routes(default_env="math"))
    def rollouts(step: int) -> list:
        return [g[0] for g in run_batch(make_generator(policy), EnvInfo({}), tasks, 1,
                                        SamplingParams.from_config(cfg.policy.generation),
                                        BatchSettings.from_config(cfg, step), seed=0)]

    early, late = rollouts(0), rollouts(7)
    assert len(early[0].gen_ids) <= 40 - tight and (len(early[0].gen_ids) == 40 - tight or not early[0].truncated)
    assert early[1].failure == PROMPT_TOO_LONG and len(early[0].prompt_ids) + len(early[0].gen_ids) <= 40
    assert late[1].failure is None and late[1].gen_ids
