"""policy.warm_start.target_accuracy: the warm start stops at a share of examples reproduced exactly."""

from __future__ import annotations

import pytest
import torch

from trainer.config import ConfigError, load_config
from trainer.policy import load_policy
from trainer.grpo.warm_start import SupervisedLoop, exact_match, train_supervised


def test_exact_match_needs_every_labelled_token_to_be_the_argmax():
    logits = torch.full((3, 3, 5), -1.0)
    for b, row in enumerate([[0, 2, 3], [0, 2, 4], [1, 1, 1]]):
        for t, tok in enumerate(row):
            logits[b, t, tok] = 1.0
    labels = torch.tensor([[-100, 2, 3], [-100, 2, 3], [-100, -100, 1]])
    assert exact_match(logits, labels).tolist() == [1.0, 0.0, 1.0]


def test_the_warm_start_stops_once_the_target_accuracy_is_reached():
    policy = load_policy(load_config("tiny"), 1)
    pairs = [(policy.encode(f"{a}?"), policy.encode(f"{a % 3}.")) for a in range(12)]
    out = train_supervised(policy, pairs, num_steps=400, batch_size=8, lr=3e-3, target_accuracy=0.6, seed=0)
    assert out["warm_start/steps"] < 400
    assert out["warm_start/final_accuracy"] >= 0.6
    # and what it measured holds for a greedy decode: most targets come back exactly
    from trainer.rollout.decode import decode_batch
    from trainer.rollout.generator import SamplingParams

    got = decode_batch(policy, [p for p, _ in pairs], [SamplingParams(temperature=0.0, max_new_tokens=2)] * len(pairs),
                       rng=policy.make_rng(0))
    exact = sum(g.token_ids == a for g, (_, a) in zip(got, pairs)) / len(pairs)
    assert exact >= 0.4


@pytest.mark.parametrize("value", ["0", "1.5"])
def test_a_target_accuracy_outside_0_1_is_refused(value):
    with pytest.raises(ConfigError, match="target_accuracy"):
        load_config("tiny", [f"policy.warm_start.target_accuracy={value}"])


def test_the_warm_start_in_pieces_is_the_warm_start_in_one_go():
    """The driver runs the warm start a few seconds per trainer call (progress bar, bounded calls):
    one step per piece must give the same steps, losses and weights as one call."""
    def pairs_of(policy):
        return [(policy.encode(f"{a}?"), policy.encode(f"{a % 3}.")) for a in range(12)]

    whole = load_policy(load_config("tiny"), 1)
    out = train_supervised(whole, pairs_of(whole), num_steps=25, batch_size=4, lr=3e-3, seed=3)
    pieces = load_policy(load_config("tiny"), 1)
    examples = [(p + a, [0] * len(p) + [1] * len(a)) for p, a in pairs_of(pieces)]
    loop = SupervisedLoop(pieces, examples, num_steps=25, batch_size=4, lr=3e-3, seed=3)
    calls = 0
    while not loop.done:
        loop.run(max_seconds=0.0)  # at least one step per call
        calls += 1
    assert calls == 25 and loop.progress()["steps"] == 25
    summary = loop.summary()
    assert summary["warm_start/first_loss"] == out["warm_start/first_loss"]
    assert summary["warm_start/final_loss"] == out["warm_start/final_loss"]
    for a, b in zip(whole.model.parameters(), pieces.model.parameters()):
        assert torch.equal(a, b)


def test_a_warm_start_short_of_its_target_is_reported():
    from trainer.config import WarmStartConfig
    from trainer.grpo.warm_start import target_missed as _warm_start_target_missed

    cfg = WarmStartConfig(enabled=True, num_steps=100, target_accuracy=0.3, answer_template="{answer}")
    reached = {"warm_start/steps": 40, "warm_start/final_accuracy": 0.31, "warm_start/final_loss": 0.1}
    assert _warm_start_target_missed(cfg, reached) is None
    short = {"warm_start/steps": 100, "warm_start/final_accuracy": 0.0, "warm_start/final_loss": 0.08}
    msg = _warm_start_target_missed(cfg, short)
    assert "all 100 steps" in msg and "accuracy 0.00 < target 0.3" in msg and "policy.warm_start.num_steps" in msg
    assert "policy.warm_start.lr" in msg
    assert _warm_start_target_missed(WarmStartConfig(enabled=True, num_steps=100, answer_template="{answer}"), short) is None  # no target, nothing missed
