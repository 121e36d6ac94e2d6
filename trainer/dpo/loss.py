"""The DPO loss: NeMo-RL's ``DPOLossFn`` (Rafailov et al. 2023, arXiv 2305.18290) in one function.

For a pair (x, y_c, y_r) — prompt, chosen and rejected completion — with completion tokens t and
their logprobs under the policy (lp, gradient flows) and the frozen reference (lp_ref, data):

  implicit reward   r(y)   = sum_t (lp_t - lp_ref_t)                       dpo.preference_average_log_probs=false
                    r(y)   = sum_t (lp_t - lp_ref_t) / |y|                  dpo.preference_average_log_probs=true
  preference loss   L_pref = -log sigmoid(beta * (r(y_c) - r(y_r)))         beta = dpo.reference_policy_kl_penalty
  SFT loss          L_sft  = -sum_t lp_t(y_c)   (/ |y_c| with dpo.sft_average_log_probs=true), chosen only
  total             L      = dpo.preference_loss_weight * L_pref + dpo.sft_loss_weight * L_sft

each averaged over the valid pairs of the batch. Because sum_t (lp_t - lp_ref_t) = sum_t lp_t -
sum_t lp_ref_t, the reference enters only as one number per completion: the trainer computes
those sums once per pair and caches them (:mod:`trainer.dpo.train`).

Metrics as NeMo-RL names them (``sft_loss`` is reported even at weight 0, as the chosen NLL): ``accuracy`` = share of pairs with r(y_c) > r(y_r) (strict, so an
untrained policy equal to its reference scores 0); ``rewards_chosen_mean`` / ``rewards_rejected_mean``
are r averaged over pairs, *not* multiplied by beta (NeMo-RL reports them unscaled; TRL scales);
``reward_margin`` (ours) = mean of r(y_c) - r(y_r).

Microbatches: every term is divided by the GLOBAL number of valid pairs, so the losses and stats
of a batch's microbatches sum to the full-batch values (as trainer/grpo/loss.py does).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class DPOLossWeights:
    """The ``dpo.*`` keys the loss reads (see :class:`trainer.dpo.config.DPOConfig`)."""

    reference_policy_kl_penalty: float = 0.05
    preference_loss_weight: float = 1.0
    sft_loss_weight: float = 0.0
    preference_average_log_probs: bool = False
    sft_average_log_probs: bool = False


@dataclass
class PairBatch:
    """One microbatch of P pairs. Per-completion sums over completion tokens, shape [P]."""

    policy_chosen: torch.Tensor      # sum_t lp_t(y_c) under the policy (grad flows)
    policy_rejected: torch.Tensor    # sum_t lp_t(y_r) under the policy (grad flows)
    reference_chosen: torch.Tensor   # sum_t lp_ref_t(y_c), cached
    reference_rejected: torch.Tensor
    tokens_chosen: torch.Tensor      # |y_c| (completion tokens in the loss)
    tokens_rejected: torch.Tensor
    pair_mask: torch.Tensor          # 1 = valid pair, 0 = masked (over the length limit)


def sequence_sums(token_logprobs: torch.Tensor, token_mask: torch.Tensor) -> torch.Tensor:
    """[B, T] per-token logprobs -> [B] sums over the masked (completion) tokens."""
    return (token_logprobs * token_mask.to(token_logprobs.dtype)).sum(-1)


def dpo_loss(x: PairBatch, w: DPOLossWeights, global_valid_pairs: float) -> tuple[torch.Tensor, dict[str, float]]:
    """Returns (loss, stats); both are this microbatch's share of the batch mean."""
    mask = x.pair_mask.to(x.policy_chosen.dtype)
    norm = global_valid_pairs if global_valid_pairs > 0 else 1.0

    def share(per_pair: torch.Tensor) -> torch.Tensor:   # masked sum / global pair count
        return (per_pair * mask).sum() / norm

    # implicit rewards r(y) = log pi(y|x) - log pi_ref(y|x), optionally per token
    r_c = x.policy_chosen - x.reference_chosen
    r_r = x.policy_rejected - x.reference_rejected
    if w.preference_average_log_probs:
        r_c = r_c / x.tokens_chosen.clamp(min=1)
        r_r = r_r / x.tokens_rejected.clamp(min=1)
    margin = r_c - r_r

    # L_pref = -log sigmoid(beta * margin)   (logsigmoid: stable for large |margin|)
    pref = share(-F.logsigmoid(w.reference_policy_kl_penalty * margin))

    # L_sft = NLL of the chosen completion (summed, or per token)
    nll = -x.policy_chosen
    if w.sft_average_log_probs:
        nll = nll / x.tokens_chosen.clamp(min=1)
    sft = share(nll)

    loss = w.preference_loss_weight * pref + w.sft_loss_weight * sft
    with torch.no_grad():
        stats = {
            "loss": float(loss), "preference_loss": float(pref), "sft_loss": float(sft),
            "accuracy": float(share((r_c > r_r).to(mask.dtype))),
            "rewards_chosen_mean": float(share(r_c)), "rewards_rejected_mean": float(share(r_r)),
            "reward_margin": float(share(margin)), "num_valid_samples": float(mask.sum()),
        }
    return loss, stats
