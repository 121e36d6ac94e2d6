"""The DPO loss against values computed by hand (trainer/dpo/loss.py)."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.dpo.loss import DPOLossWeights, PairBatch, dpo_loss, sequence_sums


def batch(pc, pr, rc, rr, nc=(1, 1), nr=(1, 1), mask=(1, 1), grad=False) -> PairBatch:
    t = lambda v: torch.tensor(v, dtype=torch.float64, requires_grad=grad)  # noqa: E731
    return PairBatch(t(pc), t(pr), t(rc), t(rr), t(nc), t(nr), t(mask))


# pair 1: r_c = -2 - (-3) = 1,  r_r = -5 - (-4) = -1, margin  2
# pair 2: r_c = -6 - (-5) = -1, r_r = -1 - (-2) = 1,  margin -2
PAIRS = dict(pc=[-2.0, -6.0], pr=[-5.0, -1.0], rc=[-3.0, -5.0], rr=[-4.0, -2.0])


def test_summed_log_probs_by_hand():
    loss, st = dpo_loss(batch(**PAIRS), DPOLossWeights(reference_policy_kl_penalty=0.5, sft_loss_weight=0.1), 2)
    # -log sigmoid(0.5 * 2) = log(1 + e^-1) = 0.3132617; -log sigmoid(-1) = log(1 + e) = 1.3132617
    pref = (0.3132617 + 1.3132617) / 2
    assert st["preference_loss"] == pytest.approx(pref, abs=1e-6)
    assert st["sft_loss"] == pytest.approx((2 + 6) / 2)          # NLL of the chosen completions
    assert float(loss) == pytest.approx(pref + 0.1 * 4, abs=1e-6) == st["loss"]
    assert st["accuracy"] == 0.5
    assert st["rewards_chosen_mean"] == 0.0 and st["rewards_rejected_mean"] == 0.0 and st["reward_margin"] == 0.0
    assert st["num_valid_samples"] == 2


def test_average_log_probs_by_hand():
    # |y_c| = (2, 4), |y_r| = (1, 2): r_c = (0.5, -0.25), r_r = (-1, 0.5), margins (1.5, -0.75)
    w = DPOLossWeights(reference_policy_kl_penalty=0.5, sft_loss_weight=1.0, preference_loss_weight=2.0,
                       preference_average_log_probs=True, sft_average_log_probs=True)
    loss, st = dpo_loss(batch(**PAIRS, nc=(2, 4), nr=(1, 2)), w, 2)
    pref = (math.log(1 + math.exp(-0.75)) + math.log(1 + math.exp(0.375))) / 2
    sft = (2 / 2 + 6 / 4) / 2
    assert st["preference_loss"] == pytest.approx(pref, abs=1e-9)
    assert st["sft_loss"] == pytest.approx(sft)
    assert float(loss) == pytest.approx(2 * pref + sft, abs=1e-9)
    assert st["rewards_chosen_mean"] == pytest.approx(0.125) and st["rewards_rejected_mean"] == pytest.approx(-0.25)
    assert st["reward_margin"] == pytest.approx(0.375) and st["accuracy"] == 0.5


def test_gradient_pushes_chosen_up_and_rejected_down():
    x = batch(pc=[-2.0], pr=[-2.0], rc=[-2.0], rr=[-2.0], nc=(1,), nr=(1,), mask=(1,), grad=True)
    loss, st = dpo_loss(x, DPOLossWeights(reference_policy_kl_penalty=0.1), 1)
    loss.backward()
    # d/dr_c [-log sigmoid(beta m)] = -beta * sigmoid(-beta m) = -0.1 * 0.5 at m = 0
    assert float(x.policy_chosen.grad) == pytest.approx(-0.05)
    assert float(x.policy_rejected.grad) == pytest.approx(0.05)
    assert st["preference_loss"] == pytest.approx(math.log(2))
    assert st["accuracy"] == 0.0  # equal rewards are not a win (strict, as NeMo-RL)


def test_masked_pairs_and_microbatches_sum_to_the_full_batch():
    w = DPOLossWeights(reference_policy_kl_penalty=0.3, sft_loss_weight=0.5)
    full_loss, full = dpo_loss(batch(**PAIRS, mask=(1, 0)), w, 1)
    only_first, first = dpo_loss(batch(pc=[-2.0], pr=[-5.0], rc=[-3.0], rr=[-4.0], nc=(1,), nr=(1,), mask=(1,)), w, 1)
    assert float(full_loss) == pytest.approx(float(only_first)) and full == first
    # two microbatches of one pair each, normalised by the global count, add up to the batch
    parts = [dpo_loss(batch(pc=[a], pr=[b], rc=[c], rr=[d], nc=(1,), nr=(1,), mask=(1,)), w, 2)
             for a, b, c, d in zip(*PAIRS.values())]
    whole_loss, whole = dpo_loss(batch(**PAIRS), w, 2)
    assert sum(float(p[0]) for p in parts) == pytest.approx(float(whole_loss))
    for k in ("preference_loss", "sft_loss", "accuracy", "reward_margin"):
        assert sum(p[1][k] for p in parts) == pytest.approx(whole[k])


def test_sequence_sums_use_the_mask():
    lp = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, -9.0]])
    assert sequence_sums(lp, torch.tensor([[1, 1, 0], [1, 1, 0]])).tolist() == [-3.0, -1.0]
