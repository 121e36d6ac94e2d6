"""The GRPO loss against hand-computed values (NeMo-RL ClippedPGLossFn semantics)."""
import math

import pytest
import torch

from trainer.config import LossConfig
from trainer.grpo.loss import LossInputs, clipped_pg_loss, kl_penalty, seq_logprob_error_mask

LN = math.log


def cfg(**kw):
    base = dict(ratio_clip_min=0.2, ratio_clip_max=0.28, truncated_importance_sampling_type=None,
                use_importance_sampling_correction=False)
    base.update(kw)
    return LossConfig(**base)


def inputs(ratio, adv, w=None, mask=None, smask=None, lp_ref=None):
    r = torch.tensor([ratio], dtype=torch.float64)
    lp = torch.log(r).requires_grad_(True)
    lp_old = torch.zeros_like(r)
    lp_gen = torch.zeros_like(r) if w is None else -torch.log(torch.tensor([w], dtype=torch.float64))
    n = r.shape[1]
    return LossInputs(lp=lp, lp_old=lp_old, lp_gen=lp_gen, advantages=torch.tensor([adv], dtype=torch.float64),
                      token_mask=torch.ones(1, n) if mask is None else torch.tensor([mask], dtype=torch.float64),
                      sample_mask=torch.ones(1) if smask is None else torch.tensor(smask, dtype=torch.float64),
                      lp_ref=lp_ref)


def test_asymmetric_clip_positive_advantage():
    # r = [0.5, 1, 2], A=+1: max(-r, -clip(r, .8, 1.28)) = [-0.5, -1, -1.28]
    loss, st = clipped_pg_loss(inputs([0.5, 1, 2], 1.0), cfg(), 3, 1)
    assert loss.item() == pytest.approx((-0.5 - 1 - 1.28) / 3, rel=1e-6)
    assert st["clip_high_sum"].item() == 1 and st["clip_low_sum"].item() == 0


def test_asymmetric_clip_negative_advantage_and_dual_clip():
    # A=-1: max(r, clip(r)) = [0.8, 1, 2]
    loss, st = clipped_pg_loss(inputs([0.5, 1, 2], -1.0), cfg(), 3, 1)
    assert loss.item() == pytest.approx((0.8 + 1 + 2) / 3, rel=1e-6)
    assert st["clip_low_sum"].item() == 1
    # dual clip c=1.5: where A<0, min(L, -A*c) -> [0.8, 1, 1.5]
    loss, _ = clipped_pg_loss(inputs([0.5, 1, 2], -1.0), cfg(ratio_clip_c=1.5), 3, 1)
    assert loss.item() == pytest.approx((0.8 + 1 + 1.5) / 3, rel=1e-6)


def test_gradient_zero_where_clipped():
    x = inputs([0.5, 1, 2], 1.0)
    loss, _ = clipped_pg_loss(x, cfg(), 3, 1)
    loss.backward()
    # d/dlp of -A*r = -r/3 on unclipped tokens, 0 on the clipped one (r=2 > 1.28)
    assert torch.allclose(x.lp.grad, torch.tensor([[-0.5 / 3, -1 / 3, 0.0]], dtype=torch.float64))


def test_force_on_policy_ratio_value_one_grad_kept():
    x = inputs([0.5, 1, 2], 2.0)
    loss, st = clipped_pg_loss(x, cfg(force_on_policy_ratio=True), 3, 1)
    loss.backward()
    assert loss.item() == pytest.approx(-2.0)
    assert torch.allclose(x.lp.grad, torch.full((1, 3), -2 / 3, dtype=torch.float64))
    assert st["ratio_sum"].item() == pytest.approx(3.0)


def test_tis_icepop_seq_mask_tis_weights():
    # r = 1 everywhere, A=+1 -> L_tok = -1; w = exp(lp_old - lp_gen) = [0.25, 1, 4]
    tis = cfg(use_importance_sampling_correction=True, truncated_importance_sampling_type="tis",
              truncated_importance_sampling_ratio=2.0)
    loss, st = clipped_pg_loss(inputs([1, 1, 1], 1.0, w=[0.25, 1, 4]), tis, 3, 1)
    assert loss.item() == pytest.approx(-(0.25 + 1 + 2) / 3, rel=1e-6)  # clamp(w, 0, 2)
    assert st["is_oob_num"].item() / st["is_oob_den"].item() == pytest.approx(1 / 3)
    ice = cfg(use_importance_sampling_correction=True, truncated_importance_sampling_type="icepop",
              truncated_importance_sampling_ratio=2.0, truncated_importance_sampling_ratio_min=0.5)
    loss, _ = clipped_pg_loss(inputs([1, 1, 1], 1.0, w=[0.25, 1, 4]), ice, 3, 1)
    assert loss.item() == pytest.approx(-1 / 3, rel=1e-6)  # only w=1 is inside [0.5, 2]
    smt = cfg(use_importance_sampling_correction=True, truncated_importance_sampling_type="seq-mask-tis",
              truncated_importance_sampling_ratio=1.002, truncated_importance_sampling_ratio_min=0.999)
    # geometric mean of [0.25, 1, 4] is 1 -> kept with the weights untruncated
    loss, _ = clipped_pg_loss(inputs([1, 1, 1], 1.0, w=[0.25, 1, 4]), smt, 3, 1)
    assert loss.item() == pytest.approx(-(0.25 + 1 + 4) / 3, rel=1e-6)
    loss, st = clipped_pg_loss(inputs([1, 1, 1], 1.0, w=[2, 2, 2]), smt, 3, 1)
    assert loss.item() == 0.0 and st["is_oob_num"].item() == 1
    # correction off: w = 1 but IS stats still reported
    loss, st = clipped_pg_loss(inputs([1, 1, 1], 1.0, w=[0.25, 1, 4]), cfg(), 3, 1)
    assert loss.item() == pytest.approx(-1.0) and st["is_ratio_max"].item() == pytest.approx(4.0)


def test_nan_inf_is_weight_replaced_by_zero():
    tis = cfg(use_importance_sampling_correction=True)
    x = inputs([1, 1], 1.0)
    x.lp_gen = torch.tensor([[-float("inf"), 0.0]], dtype=torch.float64)  # w = inf -> 0
    loss, _ = clipped_pg_loss(x, tis, 2, 1)
    assert loss.item() == pytest.approx(-0.5)


def test_sequence_level_aggregation():
    # two samples: lengths 2 and 1, A = +1 and -1, r = 1 -> per-token [-1,-1] and [1]
    lp = torch.zeros(2, 2, dtype=torch.float64, requires_grad=True)
    x = LossInputs(lp=lp, lp_old=torch.zeros(2, 2), lp_gen=torch.zeros(2, 2), advantages=torch.tensor([1.0, -1.0]),
                   token_mask=torch.tensor([[1.0, 1.0], [1.0, 0.0]]), sample_mask=torch.ones(2))
    seq, _ = clipped_pg_loss(x, cfg(token_level_loss=False), 3, 2)
    assert seq.item() == pytest.approx((-1 + 1) / 2)
    tok, _ = clipped_pg_loss(x, cfg(), 3, 2)
    assert tok.item() == pytest.approx((-1 - 1 + 1) / 3)


def test_sample_mask_and_all_masked_is_zero_not_nan():
    loss, _ = clipped_pg_loss(inputs([1, 1], 1.0, smask=[0.0]), cfg(), 0, 0)
    assert loss.item() == 0.0 and not math.isnan(loss.item())


@pytest.mark.parametrize("token_level", [True, False])
def test_microbatch_accumulation_equals_full_batch(token_level):
    g = torch.Generator().manual_seed(0)
    B, T = 8, 5
    lp0 = -torch.rand(B, T, generator=g, dtype=torch.float64)
    mk = lambda sl: LossInputs(lp=lp[sl], lp_old=old[sl], lp_gen=gen[sl], advantages=adv[sl], token_mask=tm[sl],
                               sample_mask=sm[sl])
    old = lp0 + 0.1 * torch.randn(B, T, generator=g, dtype=torch.float64)
    gen = lp0 + 0.1 * torch.randn(B, T, generator=g, dtype=torch.float64)
    adv = torch.randn(B, generator=g, dtype=torch.float64)
    tm = (torch.rand(B, T, generator=g) > 0.3).double()
    tm[:, 0] = 1
    sm = torch.tensor([1, 1, 0, 1, 1, 1, 1, 0], dtype=torch.float64)
    c = cfg(use_importance_sampling_correction=True, truncated_importance_sampling_type="tis",
            truncated_importance_sampling_ratio=1.05, token_level_loss=token_level)
    toks, seqs = (tm * sm[:, None]).sum().item(), sm.sum().item()
    lp = lp0.clone().requires_grad_(True)
    full, _ = clipped_pg_loss(mk(slice(None)), c, toks, seqs)
    full.backward()
    g_full = lp.grad.clone()
    lp = lp0.clone().requires_grad_(True)
    total = sum(clipped_pg_loss(mk(slice(i, i + 3)), c, toks, seqs)[0] for i in range(0, B, 3))
    total.backward()
    assert total.item() == pytest.approx(full.item(), rel=1e-12)
    assert torch.allclose(lp.grad, g_full)


def test_kl_estimators_by_hand():
    lp = torch.zeros(1, 1, dtype=torch.float64)
    ref = torch.full((1, 1), LN(2), dtype=torch.float64)  # logr = log 2
    k = lambda t: kl_penalty(lp, ref, lp, LossConfig(reference_policy_kl_penalty=1.0, reference_policy_kl_type=t)).item()
    assert k("k1") == pytest.approx(-LN(2))
    assert k("k2") == pytest.approx(LN(2) ** 2 / 2)
    assert k("k3") == pytest.approx(2 - 1 - LN(2))
    # kl in the loss: beta * k3, added to the actor term (A = 0 -> actor = 0)
    x = inputs([1.0], 0.0, lp_ref=ref)
    loss, _ = clipped_pg_loss(x, cfg(reference_policy_kl_penalty=0.5), 1, 1)
    assert loss.item() == pytest.approx(0.5 * (1 - LN(2)))
    # output clamp
    assert kl_penalty(lp, torch.full((1, 1), 5.0, dtype=torch.float64), lp,
                      LossConfig(reference_policy_kl_penalty=1.0, kl_output_clamp_value=10.0)).item() == pytest.approx(10.0)


def test_seq_logprob_error_threshold():
    old = torch.zeros(2, 2, dtype=torch.float64)
    gen = torch.tensor([[LN(3), LN(3)], [0.1, -0.1]], dtype=torch.float64)  # errors: exp|.| = 3 and e^0.1
    keep, err = seq_logprob_error_mask(old, gen, torch.ones(2, 2), threshold=2.0)
    assert keep.tolist() == [False, True]
    assert err[0].item() == pytest.approx(3.0) and err[1].item() == pytest.approx(math.exp(0.1))


def test_kl_penalty_changes_the_gradient_as_the_loss_file_says():
    """k3 with the default weight exp(lp - sg(lp)): d/dlp [w * (e^r - 1 - r)] = (e^r - 1 - r) + (1 - e^r)
    = -r = lp - lp_ref per token, so the penalty adds beta * (lp - lp_ref) / N to each token's gradient."""
    lp_vals, ref_vals, adv = [[-0.5, -1.0, -2.0]], [[-0.7, -0.2, -2.0]], [0.3]

    def grad(beta):
        lp = torch.tensor(lp_vals, dtype=torch.float64, requires_grad=True)
        x = LossInputs(lp=lp, lp_old=lp.detach().clone(), lp_gen=lp.detach().clone(),
                       advantages=torch.tensor(adv, dtype=torch.float64), token_mask=torch.ones(1, 3),
                       sample_mask=torch.ones(1), lp_ref=torch.tensor(ref_vals, dtype=torch.float64))
        loss, _ = clipped_pg_loss(x, cfg(reference_policy_kl_penalty=beta), 3, 1)
        loss.backward()
        return lp.grad

    beta = 0.1
    diff = grad(beta) - grad(0.0)
    expected = beta * (torch.tensor(lp_vals, dtype=torch.float64) - torch.tensor(ref_vals, dtype=torch.float64)) / 3
    assert torch.allclose(diff, expected)
    assert diff[0, 2].item() == 0.0 and diff[0, 0].item() > 0  # equal to the reference: no pull


def test_kl_shaping_keys_without_a_penalty_are_errors():
    with pytest.raises(ValueError, match="reference_policy_kl_type.*reference_policy_kl_penalty is 0"):
        LossConfig(reference_policy_kl_type="k1")
    with pytest.raises(ValueError, match="use_on_policy_kl_approximation"):
        LossConfig(use_on_policy_kl_approximation=True)
    LossConfig(reference_policy_kl_type="k3")  # the default value is harmless
    LossConfig(reference_policy_kl_penalty=0.1, reference_policy_kl_type="k1")
