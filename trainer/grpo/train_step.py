"""One GRPO optimizer step on a batch of finished prompt groups (reference §2.5, steps 2-7).

Filters (failed -> masked, overlong, seq logprob error) -> prev_logprobs -> group advantages ->
microbatched loss normalised by global counts -> optimizer step(s).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import torch

from trainer.config import MasterConfig
from trainer.grpo.advantages import compute_advantages, group_ids, zero_variance_fraction
from trainer.grpo.effort import effort_metrics
from trainer.grpo.loss import LossInputs, clipped_pg_loss, seq_logprob_error_mask
from trainer.grpo.metrics import StepStats, multi_turn_metrics
from trainer.rollout.sample import Group
from trainer.logprobs import forward_logprobs  # noqa: F401 - the one logprob function (re-exported for callers)

if TYPE_CHECKING:
    from trainer.grpo.reference import ReferencePolicy


def _pad(rows: list[list[float]], T: int) -> torch.Tensor:
    out = torch.zeros(len(rows), T)
    for i, r in enumerate(rows):
        out[i, :len(r)] = torch.tensor(r, dtype=torch.float32)
    return out


def mean_reward(rewards: torch.Tensor, weight: torch.Tensor) -> float:
    """Mean reward over the samples ``weight`` selects (0/1); 0.0 when it selects none."""
    return float((rewards * weight).sum() / weight.sum().clamp_min(1))


def grpo_train_step(model: Any, optimizer: torch.optim.Optimizer, groups: list[Group], step: int,
                    cfg: MasterConfig, pad_id: int, reference: ReferencePolicy | None = None,
                    scheduler: Any = None) -> dict[str, Any]:
    """``reference`` is required when ``loss_fn.reference_policy_kl_penalty > 0``: the KL term
    needs reference logprobs, and a penalty that silently does nothing is worse than an error."""
    t0 = time.perf_counter()
    g, lc, pc = cfg.grpo, cfg.loss_fn, cfg.policy
    temp = pc.generation.temperature
    samples = [s for grp in groups for s in grp.samples]
    gid = group_ids(groups)  # each sample's group (groups with identical prompts share one: NeMo-RL)
    prompt_of = gid.tolist()  # samples of one group share one prompt pass in forward_logprobs
    B = len(samples)
    T = max(max(len(s.gen_ids) for s in samples), 1)
    rewards = torch.tensor([s.reward for s in samples], dtype=torch.float32)
    failed = torch.tensor([s.failure is not None for s in samples])
    valid = ~failed if cfg.env.should_mask_flagged_samples else torch.ones(B, dtype=torch.bool)
    truncated = torch.tensor([s.truncated for s in samples])
    # model tokens only: a multi-turn sample's tool outputs (gen_mask 0) are never trained on
    token_mask = _pad([[float(m) for m in s.gen_mask] if s.gen_mask is not None else [1.0] * len(s.gen_ids)
                       for s in samples], T)
    lp_gen = _pad([s.gen_logprobs for s in samples], T)

    # sample mask: failed rollouts (env.should_mask_flagged_samples), overlong filtering (grpo.overlong_filtering;
    # such samples stay in the baseline)
    sample_mask = valid.clone()
    if g.overlong_filtering:
        sample_mask &= ~truncated

    # prev_logprobs (skipped as NeMo-RL does when force_on_policy_ratio and no seq error threshold)
    mb = pc.train_micro_batch_size
    need_old = not lc.force_on_policy_ratio or g.seq_logprob_error_threshold is not None
    model.train()
    lp_old = torch.zeros(B, T)
    if need_old:
        with torch.no_grad():
            for i in range(0, B, mb):
                lp, _ = forward_logprobs(model, samples[i:i + mb], temp, pad_id, prompt_of=prompt_of[i:i + mb])
                lp_old[i:i + mb, :lp.shape[1]] = lp.to(lp_old.device)
    lp_ref = None
    if lc.reference_policy_kl_penalty > 0:
        if reference is None:
            raise ValueError("loss_fn.reference_policy_kl_penalty > 0 needs a reference policy; none was built")
        lp_ref = reference.logprobs(samples, temp, pad_id, mb, T, prompt_of)
    keep, seq_err = seq_logprob_error_mask(lp_old, lp_gen, token_mask, g.seq_logprob_error_threshold)
    masked_by_lp_error = int((sample_mask & ~keep).sum())
    sample_mask &= keep

    # advantages per group (grpo.use_leave_one_out_baseline / normalize_rewards / advantage_clip_*)
    adv = compute_advantages(rewards, gid, valid=valid, leave_one_out=g.use_leave_one_out_baseline,
                             normalize=g.normalize_rewards, clip_low=g.advantage_clip_low, clip_high=g.advantage_clip_high)

    # Samples whose loss terms are all zero are not run through the model: masked ones, and, without a
    # KL term, those with advantage 0 (a group whose rewards are all equal): -A*ratio is 0 whatever the
    # ratio. The loss keeps its global normalisers, so the gradient is the full batch's exactly; only
    # the work shrinks (most groups of a policy that mostly solves or mostly fails its prompts).
    inert = ~sample_mask if lc.reference_policy_kl_penalty > 0 else ~sample_mask | (adv == 0)
    stats = StepStats()
    ent_sum, ent_tok, losses, grad_norms, skipped = 0.0, 0.0, [], [], 0
    params = [p for p in model.parameters() if p.requires_grad]
    gbs = cfg.global_batch_size * B // cfg.rollout_batch_size  # in samples of this batch
    for gs in range(0, B, gbs):
        ge = gs + gbs
        m = token_mask[gs:ge] * sample_mask[gs:ge, None].float()
        toks, seqs = float(m.sum()), float(sample_mask[gs:ge].sum())
        live = [i for i in range(gs, ge) if not inert[i]]
        skipped += (ge - gs) - len(live)
        optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for k in range(0, len(live), mb):
            rows = torch.tensor(live[k:k + mb])
            lp, ent = forward_logprobs(model, [samples[i] for i in rows.tolist()], temp, pad_id, with_entropy=True,
                                       prompt_of=[prompt_of[i] for i in rows.tolist()])
            t, dev = lp.shape[1], lp.device  # the loss runs where the model is (one GPU, or CPU)
            x = LossInputs(lp=lp, lp_old=lp_old[rows, :t].to(dev), lp_gen=lp_gen[rows, :t].to(dev),
                           advantages=adv[rows].to(dev), token_mask=token_mask[rows, :t].to(dev),
                           sample_mask=sample_mask[rows].float().to(dev),
                           lp_ref=None if lp_ref is None else lp_ref[rows, :t].to(dev))
            loss, st = clipped_pg_loss(x, lc, toks, seqs)
            loss.backward()
            total += float(loss.detach())
            stats.add(st)
            ent_sum += float((ent.detach() * x.token_mask).sum())
            ent_tok += float(x.token_mask.sum())
        if not live:  # what the full batch gives: zero gradients, not none, so the optimizer still steps
            for p in params:  # (momentum, Adam's step count) exactly as before
                p.grad = torch.zeros_like(p)
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), pc.max_grad_norm or float("inf"))
        lr = optimizer.param_groups[0]["lr"]
        optimizer.step()
        if scheduler is not None:  # policy.scheduler: one step per optimizer step (NeMo-RL)
            scheduler.step()
        losses.append(total)
        grad_norms.append(float(gn))
    model.eval()

    envs = sorted({s.env for s in samples})
    valid_f = valid.float()
    lags = [step - grp.start_version for grp in groups]
    token_lags = [step - v for s in samples for v in s.versions if v >= 0]  # -1: a tool-output token
    n_tok = float(token_mask.sum())
    out: dict[str, Any] = {
        "train/loss": sum(losses) / len(losses), "train/grad_norm": sum(grad_norms) / len(grad_norms),
        "train/lr": lr,
        # One rule for both: failed samples count only when env.should_mask_flagged_samples is off.
        "train/reward": mean_reward(rewards, valid_f),
        **{f"train/reward/{e}": mean_reward(rewards, valid_f * torch.tensor([float(s.env == e) for s in samples]))
           for e in envs},
        "train/zero_variance_groups_frac": zero_variance_fraction(rewards, gid.tolist()),
        "train/advantages/mean": float(adv.mean()), "train/advantages/min": float(adv.min()),
        "train/advantages/max": float(adv.max()), "train/advantages/abs_mean": float(adv.abs().mean()),
        "train/entropy": ent_sum / max(ent_tok, 1.0),  # over the tokens run through the model
        "train/skipped_inert_frac": skipped / B,  # samples with no loss term (masked, or advantage 0 without KL)
        "train/masked_frac": float(1 - sample_mask.float().mean()),
        "train/failed_frac": float(failed.float().mean()),
        "train/num_masked_seqs_by_logprob_error": masked_by_lp_error,
        "train/max_seq_mult_prob_error": float(seq_err.max()),
        "train/truncation_rate": float(truncated.float().mean()),
        "train/max_total_sequence_length": pc.max_sequence_length_at(step),  # the schedule's limit for this step
        "train/mean_gen_tokens_per_sample": n_tok / B, "train/total_num_tokens": n_tok,
        "train/global_valid_seqs": float(sample_mask.sum()),
        "async/lag_mean": sum(lags) / len(lags), "async/lag_max": max(lags),
        "async/token_lag_mean": sum(token_lags) / max(len(token_lags), 1),
        "async/token_lag_max": max(token_lags, default=0),
        "async/mixed_version_samples_frac": sum(len({v for v in s.versions if v >= 0}) > 1 for s in samples) / B,
        "timing/train/policy_training": time.perf_counter() - t0,
        **effort_metrics(samples),  # prompt kinds (low effort, reasoning off / budget) and effort shaping
        **multi_turn_metrics(samples, "train"),  # tool calls, turns, masked tool-output tokens per sample
        **stats.summary(),
    }
    return out
