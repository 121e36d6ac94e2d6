"""Group advantages (NeMo-RL `calculate_baseline_and_std_per_prompt`, reference §1.3).

Samples are grouped by the exact token ids of their prompt (NeMo-RL groups with
``torch.unique(prompt_ids, dim=0)``, not by row id). A batch arrives as its groups
(trainer.rollout.sample.Group: one task's K samples, one prompt by construction), so
:func:`group_ids` numbers the groups, giving groups whose prompts are identical one id (two tasks
with the same prompt share a baseline, as in NeMo-RL). Within a group of n valid samples:

* leave-one-out (``grpo.use_leave_one_out_baseline``): b_i = mean_{j!=i} r_j and
  std_i = Bessel-corrected std of the n-1 other rewards:
  sqrt((E_{-i}[r^2] - E_{-i}[r]^2) * (n-1)/(n-2)), NaN -> 0;
* otherwise: b = group mean, std = sample std (factor n/(n-1));
* a group with <= 1 valid sample gets b = r, so A = 0.

A_i = r_i - b_i; if ``normalize_rewards`` and std_i > 0: A_i /= (std_i + 1e-6). Entries with
std = 0 keep the raw difference (not zeroed). Dr.GRPO = ``normalize_rewards=false``.
Then clamp to [advantage_clip_low, advantage_clip_high].

Masked samples (failed rollouts) are not valid: they neither get an advantage nor enter
the baseline of the others. Overlong-filtered samples DO stay in the baseline (NeMo-RL).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

from trainer.rollout.sample import Group


def group_ids(groups: Sequence[Group]) -> torch.Tensor:
    """One integer id per sample of the flattened batch (groups in order, samples in order): the
    index of its group, groups with identical prompts sharing one."""
    index: dict[tuple[int, ...], int] = {}
    ids: list[int] = []
    for g in groups:
        ids += [index.setdefault(tuple(g.prompt_ids), len(index))] * len(g.samples)
    return torch.tensor(ids, dtype=torch.long)


def baseline_and_std(rewards: torch.Tensor, group_ids: torch.Tensor, valid: torch.Tensor | None = None,
                     leave_one_out: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample baseline and std (NeMo-RL's exact rules, see module doc)."""
    r = rewards.double()
    valid = torch.ones_like(r, dtype=torch.bool) if valid is None else valid.bool()
    baseline = r.clone()
    std = torch.zeros_like(r)
    for g in torch.unique(group_ids):
        idx = (group_ids == g) & valid
        n = int(idx.sum())
        if n <= 1:
            continue  # b = r -> A = 0
        rg = r[idx]
        s1, s2 = rg.sum(), (rg * rg).sum()
        if leave_one_out:
            m = (s1 - rg) / (n - 1)                      # E_{-i}[r]
            m2 = (s2 - rg * rg) / (n - 1)                # E_{-i}[r^2]
            var = (m2 - m * m) * (n - 1) / (n - 2) if n > 2 else torch.full_like(rg, float("nan"))
            sd = torch.nan_to_num(var.clamp_min(0).sqrt(), nan=0.0)
            baseline[idx], std[idx] = m, sd
        else:
            mean = s1 / n
            var = (s2 / n - mean * mean) * n / (n - 1)
            baseline[idx], std[idx] = mean, var.clamp_min(0).sqrt()
    return baseline.to(rewards.dtype), std.to(rewards.dtype)


def compute_advantages(rewards: torch.Tensor, group_ids: torch.Tensor, *, valid: torch.Tensor | None = None,
                       leave_one_out: bool = True, normalize: bool = True, clip_low: float | None = None,
                       clip_high: float | None = None) -> torch.Tensor:
    """Per-sample advantages [B]; invalid samples get 0."""
    b, sd = baseline_and_std(rewards, group_ids, valid, leave_one_out)
    adv = rewards - b
    if normalize:
        adv = torch.where(sd > 0, adv / (sd + 1e-6), adv)  # grpo.normalize_rewards; std=0 keeps raw diff
    if clip_low is not None or clip_high is not None:         # grpo.advantage_clip_low/high
        adv = adv.clamp(min=clip_low, max=clip_high)
    if valid is not None:
        adv = torch.where(valid.bool(), adv, torch.zeros_like(adv))
    return adv


def zero_variance_fraction(rewards: torch.Tensor, group_keys: Sequence[Hashable]) -> float:
    """Fraction of groups whose rewards are all equal (they carry no GRPO signal)."""
    groups: dict[Hashable, list[float]] = {}
    for k, r in zip(group_keys, rewards.tolist()):
        groups.setdefault(k, []).append(r)
    return sum(max(v) == min(v) for v in groups.values()) / max(len(groups), 1)
