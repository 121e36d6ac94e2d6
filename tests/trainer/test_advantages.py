"""Group advantages against hand-computed values (NeMo-RL §1.3 rules)."""
import math

import torch

from trainer.grpo.advantages import baseline_and_std, compute_advantages, group_ids, zero_variance_fraction
from trainer.rollout.sample import Group, Sample, Ticket

S3 = math.sqrt(1 / 3)  # sample std of [0, 0, 1] and of [1, 0, 1]


def t(*x):
    return torch.tensor(x, dtype=torch.float64)


def test_leave_one_out_normalised():
    adv = compute_advantages(t(1, 0, 0, 1), torch.zeros(4, dtype=torch.long))
    # i=0: others [0,0,1] -> b=1/3, std=sqrt(1/3); A=(2/3)/sqrt(1/3)
    want = (2 / 3) / (S3 + 1e-6)
    assert torch.allclose(adv, t(want, -want, -want, want), atol=1e-9)


def test_leave_one_out_std_zero_keeps_raw_difference():
    adv = compute_advantages(t(1, 0, 0), torch.zeros(3, dtype=torch.long))
    # i=0: others [0,0] -> std 0 -> A = 1 - 0 = 1 (not zeroed, not normalised)
    # i=1: others [1,0] -> b=0.5, std=sqrt(0.5) -> A = -0.5/sqrt(0.5)
    w = -0.5 / (math.sqrt(0.5) + 1e-6)
    assert torch.allclose(adv, t(1.0, w, w), atol=1e-9)


def test_group_of_two_loo_has_nan_std_replaced_by_zero():
    b, sd = baseline_and_std(t(1, 0), torch.zeros(2, dtype=torch.long))
    assert torch.allclose(b, t(0, 1)) and torch.allclose(sd, t(0, 0))
    assert torch.allclose(compute_advantages(t(1, 0), torch.zeros(2, dtype=torch.long)), t(1, -1))


def test_plain_mean_and_sample_std():
    adv = compute_advantages(t(1, 0, 0, 1), torch.zeros(4, dtype=torch.long), leave_one_out=False)
    w = 0.5 / (S3 + 1e-6)  # mean .5, sample std sqrt(1/3)
    assert torch.allclose(adv, t(w, -w, -w, w), atol=1e-9)


def test_dr_grpo_no_std():
    adv = compute_advantages(t(1, 0, 0, 1), torch.zeros(4, dtype=torch.long), normalize=False)
    assert torch.allclose(adv, t(2 / 3, -2 / 3, -2 / 3, 2 / 3), atol=1e-12)
    adv = compute_advantages(t(1, 0, 0, 1), torch.zeros(4, dtype=torch.long), normalize=False, leave_one_out=False)
    assert torch.allclose(adv, t(.5, -.5, -.5, .5))


def test_single_sample_group_and_masked_samples():
    gid = torch.tensor([0, 1, 1, 1, 1])
    valid = torch.tensor([True, True, True, False, True])
    adv = compute_advantages(t(1, 1, 0, 1, 0), gid, valid=valid)
    # group 0 has one sample -> 0; group 1 valid rewards [1,0,0] as in the std=0 test; masked -> 0
    w = -0.5 / (math.sqrt(0.5) + 1e-6)
    assert torch.allclose(adv, t(0, 1, w, 0, w), atol=1e-9)


def test_all_equal_group_gives_zero_and_clipping():
    assert torch.allclose(compute_advantages(t(1, 1, 1), torch.zeros(3, dtype=torch.long)), t(0, 0, 0))
    adv = compute_advantages(t(1, 0, 0), torch.zeros(3, dtype=torch.long), clip_low=-0.5, clip_high=0.8)
    assert torch.allclose(adv, t(0.8, -0.5, -0.5))


def _group(slot: int, prompt: list[int], k: int) -> Group:
    return Group(Ticket(slot, slot, slot), f"t{slot}", 0, [Sample(list(prompt), [7], [0.0], [0], False) for _ in range(k)])


def test_grouping_by_prompt_tokens_not_row_id():
    """A batch's groups keep their identity to the advantages; two tasks whose prompts are the same
    tokens share one baseline (NeMo-RL groups by prompt, not by row id)."""
    gid = group_ids([_group(0, [1, 2], 2), _group(1, [3], 1), _group(2, [1, 2], 1), _group(3, [1, 2, 0], 1)])
    assert gid.tolist() == [0, 0, 1, 0, 2]
    assert zero_variance_fraction(t(1, 0, 0, 0, 1), gid.tolist()) == 2 / 3
