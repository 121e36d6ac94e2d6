"""The GRPO loss: NeMo-RL's `ClippedPGLossFn` (reference §1.2), in one readable function.

Every tensor is [B, T] over *generated* tokens (already shifted so that position t holds the
logprob of generated token t). Notation:
  lp      current-policy logprob of the sampled token (grad flows)
  lp_old  `prev_logprobs`: the trainer's own logprobs before this step's update (data)
  lp_gen  the generator's logprobs of what it actually sampled (behaviour policy, data)
  lp_ref  reference-policy logprobs (data), only for the KL term
  m       token_mask * sample_mask
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trainer.config import LossConfig


@dataclass
class LossInputs:
    lp: torch.Tensor
    lp_old: torch.Tensor
    lp_gen: torch.Tensor
    advantages: torch.Tensor          # [B] or [B, T]
    token_mask: torch.Tensor          # [B, T] 1 for generated tokens
    sample_mask: torch.Tensor         # [B]   0 masks a whole sample (failed, overlong, logprob error)
    lp_ref: torch.Tensor | None = None


def _masked_sum(v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (v * mask).sum()


def clipped_pg_loss(x: LossInputs, cfg: LossConfig, global_valid_toks: float, global_valid_seqs: float
                    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Returns (loss, stats). Dividing by GLOBAL counts makes summed microbatch losses equal the
    full-batch loss (NeMo-RL docs/design-docs/loss-functions.md). ``stats`` are sums / extrema over
    this microbatch for :class:`trainer.grpo.metrics.StepStats` to combine."""
    tok_mask = x.token_mask.to(x.lp.dtype)
    smask = x.sample_mask.to(x.lp.dtype)
    m = tok_mask * smask[:, None]
    adv = x.advantages if x.advantages.dim() == 2 else x.advantages[:, None].expand_as(x.lp)

    # 1. ratio r = exp(lp - lp_old); force_on_policy_ratio: lp_old := sg(lp) -> value 1, grad intact
    lp_old = x.lp.detach() if cfg.force_on_policy_ratio else x.lp_old
    ratio = torch.exp(x.lp - lp_old)
    # asymmetric clip (DAPO clip-higher): [1 - ratio_clip_min, 1 + ratio_clip_max]
    ratio_c = ratio.clamp(1.0 - cfg.ratio_clip_min, 1.0 + cfg.ratio_clip_max)

    # 2. surrogate L = max(-A r, -A r_c); dual clip (ratio_clip_c, Ye et al. 2020): A<0 -> min(L, -A c)
    loss_tok = torch.maximum(-adv * ratio, -adv * ratio_c)
    if cfg.ratio_clip_c is not None:
        loss_tok = torch.where(adv < 0, torch.minimum(loss_tok, -adv * cfg.ratio_clip_c), loss_tok)

    # 3. train/inference importance weight w = exp(lp_old - lp_gen), detached, NaN/inf -> 0
    log_w = (lp_old - x.lp_gen).detach()
    w_raw = torch.nan_to_num(torch.exp(log_w), nan=0.0, posinf=0.0, neginf=0.0)
    hi, lo = cfg.truncated_importance_sampling_ratio, cfg.truncated_importance_sampling_ratio_min
    t = cfg.truncated_importance_sampling_type
    seq_count = smask.sum()
    if t == "tis":            # truncated IS (Yao et al. 2025): clamp(w, ratio_min or 0, ratio)
        w = w_raw.clamp(min=lo or 0.0, max=hi)
        oob = ((w_raw > hi) | (w_raw < (lo or 0.0))).to(m.dtype)
        oob_frac_num, oob_frac_den = _masked_sum(oob, m), m.sum()
    elif t == "icepop":       # IcePop (Ling team 2025): keep w inside [ratio_min, ratio], else 0
        inside = (w_raw >= lo) & (w_raw <= hi)
        w = torch.where(inside, w_raw, torch.zeros_like(w_raw))
        oob_frac_num, oob_frac_den = _masked_sum((~inside).to(m.dtype), m), m.sum()
    elif t == "seq-mask-tis":  # geometric-mean sequence mask: g_i = exp(mean_t(lp_old - lp_gen))
        g = torch.exp(_masked_sum_rows(log_w, tok_mask) / tok_mask.sum(-1).clamp_min(1))
        keep = ((g >= lo) & (g <= hi)).to(m.dtype)
        w = w_raw * keep[:, None]
        oob_frac_num, oob_frac_den = ((1 - keep) * smask).sum(), seq_count
    else:
        w = w_raw
        oob_frac_num, oob_frac_den = torch.zeros(()), m.sum()
    if not cfg.use_importance_sampling_correction:
        w = torch.ones_like(w)  # metrics above are still reported

    # 4. aggregation normalised by global counts
    if cfg.token_level_loss:
        actor = _masked_sum(w * loss_tok, m) / (global_valid_toks + 1e-8)
    else:
        per_seq = _masked_sum_rows(w * loss_tok, tok_mask) / tok_mask.sum(-1).clamp_min(1)
        actor = (per_seq * smask).sum() / (global_valid_seqs + 1e-8)
    loss = actor

    # 5. KL to the reference policy (k1/k2/k3, Schulman 2020 "Approximating KL divergence")
    kl_sum = torch.zeros(())
    beta = cfg.reference_policy_kl_penalty
    if beta > 0 and x.lp_ref is not None:
        kl = kl_penalty(x.lp, x.lp_ref, x.lp_gen, cfg)
        if cfg.token_level_loss:
            kl_term = _masked_sum(kl, m) / (global_valid_toks + 1e-8)
        else:
            kl_term = ((_masked_sum_rows(kl, tok_mask) / tok_mask.sum(-1).clamp_min(1)) * smask).sum() / (global_valid_seqs + 1e-8)
        loss = loss + beta * kl_term
        kl_sum = _masked_sum(kl.detach(), m)

    with torch.no_grad():
        mb = m.bool()
        r_m = ratio.detach()[mb]
        w_m = w_raw[mb]
        lw = log_w[mb]
        a_m = adv.detach()[mb]
        stats = {
            "tokens": m.sum(),
            "actor_loss": actor.detach(),
            "kl_penalty_sum": kl_sum,
            # clip fractions: the clipped branch is the active one of the max
            "clip_low_sum": ((r_m < 1 - cfg.ratio_clip_min) & (a_m < 0)).sum().to(m.dtype),
            "clip_high_sum": ((r_m > 1 + cfg.ratio_clip_max) & (a_m > 0)).sum().to(m.dtype),
            "ratio_sum": r_m.sum(), "ratio_min": r_m.min() if r_m.numel() else torch.tensor(1.0),
            "ratio_max": r_m.max() if r_m.numel() else torch.tensor(1.0),
            "is_ratio_sum": w_m.sum(), "is_ratio_min": w_m.min() if w_m.numel() else torch.tensor(1.0),
            "is_ratio_max": w_m.max() if w_m.numel() else torch.tensor(1.0),
            # mismatch KL(gen || old) per token, k3 estimator: exp(d) - 1 - d with d = lp_old - lp_gen
            "mismatch_kl_sum": (torch.exp(lw) - 1 - lw).sum(),
            # NeMo-RL token_mult_prob_error = mean exp|lp_gen - lp_old|
            "token_mult_prob_error_sum": torch.exp(lw.abs()).sum(),
            "is_oob_num": oob_frac_num, "is_oob_den": oob_frac_den,
        }
    return loss, stats


def _masked_sum_rows(v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (v * mask).sum(-1)


def kl_penalty(lp: torch.Tensor, lp_ref: torch.Tensor, lp_gen: torch.Tensor, cfg: LossConfig) -> torch.Tensor:
    """Per-token KL(pi || pi_ref) estimate, weighted and clamped as NeMo-RL does (§1.2 step 5)."""
    logr = lp_ref - lp
    if cfg.kl_input_clamp_value is not None:  # kl_input_clamp_value; the weight is detached where active
        c = cfg.kl_input_clamp_value
        logr = torch.where(logr.abs() > c, logr.detach().clamp(-c, c), logr)
    if cfg.reference_policy_kl_type == "k1":
        kl = -logr
    elif cfg.reference_policy_kl_type == "k2":
        kl = logr.pow(2) / 2
    else:  # k3 = exp(logr) - 1 - logr
        kl = torch.exp(logr) - 1 - logr
    if cfg.use_on_policy_kl_approximation:
        weight = torch.exp(lp - lp_gen)          # not detached (NeMo-RL use_on_policy_kl_approximation)
    else:
        weight = torch.exp(lp - lp.detach())     # value 1, keeps the score-function gradient
    kl = weight * kl
    if cfg.kl_output_clamp_value is not None:
        kl = kl.clamp(-cfg.kl_output_clamp_value, cfg.kl_output_clamp_value)
    return kl


# ---- sample-level filters (they act by zeroing sample_mask, reference §1.4) ---------------

def seq_logprob_error_mask(lp_old: torch.Tensor, lp_gen: torch.Tensor, token_mask: torch.Tensor,
                           threshold: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """grpo.seq_logprob_error_threshold: keep a sample iff mean_t exp(|lp_gen - lp_old|) <= threshold.
    Returns (keep [B] bool, per-sequence error [B])."""
    tm = token_mask.to(lp_old.dtype)
    err = _masked_sum_rows(torch.exp((lp_gen - lp_old).abs()), tm) / tm.sum(-1).clamp_min(1)
    keep = torch.ones_like(err, dtype=torch.bool) if threshold is None else err <= threshold
    return keep, err


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the sampling distribution at each position: -sum p log p."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)
