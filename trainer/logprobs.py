"""The one token-logprob computation: what the GRPO loss trains on, what the reference policy
and ``prev_logprobs`` are, what DPO sums and what tests compare the decode loop's recorded
logprobs with.

Convention (the decode loop's, trainer.rollout.decode, and NeMo-RL's): ``log_softmax(logits / temperature)`` over the
full vocabulary; temperature 0 (greedy) scores at temperature 1. Sequences are right-padded,
so positions are the plain 0..n-1 the model saw when it generated them.

Device: the input ids are built on the model's device (or ``device``), so the forward pass runs
where the model lives — one GPU when the engine put it there — and the results stay on that
device; callers move what they keep (``.to(...)``).

Shared prompts: a GRPO group is K samples of one prompt (a DPO pair, two). Run as K full
sequences, the prompt is computed K times — most of the work when prompts are long and answers
short. Samples whose prompts are identical therefore share one prompt pass: the prompt's keys and
values (with their gradient graph) are computed once and indexed out to every sample, and only the
generated tokens run per sample. Same logprobs and gradients (tested against one pass per sample,
``share_prompts=False``), a fraction of the work.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, Sequence

import torch
import torch.nn.functional as F

from servers.model.kv_cache import cache_of, with_cache


class Scored(Protocol):
    """Anything with a prompt and the tokens generated after it (a GRPO ``Sample``, a DPO side)."""

    prompt_ids: Sequence[int]
    gen_ids: Sequence[int]


def model_device(model: Any) -> torch.device:
    return next(model.parameters()).device


def forward_logprobs(model: Any, samples: Sequence[Scored], temperature: float, pad_id: int,
                     with_entropy: bool = False, device: torch.device | str | None = None,
                     share_prompts: bool = True, prompt_of: Sequence[int] | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``[B, T]`` logprobs of each sample's generated tokens (0 past a sample's end; T = the
    longest), and with ``with_entropy`` the ``[B, T]`` entropy of the distribution at each of
    those positions. Gradients flow when the caller has them enabled (the loss). Samples with
    identical prompts share one prompt pass (module doc) unless ``share_prompts`` is False.
    ``prompt_of`` says which samples share a prompt when the caller knows it (a GRPO batch: one
    id per group, trainer.grpo.advantages.group_ids); without it the prompts are compared."""
    device = torch.device(device) if device is not None else model_device(model)
    T = max(len(s.gen_ids) for s in samples)
    gen = torch.full((len(samples), T), pad_id, dtype=torch.long, device=device)
    for i, s in enumerate(samples):
        gen[i, :len(s.gen_ids)] = torch.tensor(list(s.gen_ids), dtype=torch.long, device=device)
    prompts, owner = _distinct_prompts(samples) if prompt_of is None else _shared_prompts(samples, prompt_of)
    sel = None
    if share_prompts and len(prompts) < len(samples) and T > 0:
        sel = _shared_prompt_logits(model, prompts, owner, gen, pad_id, device)
    if sel is None:
        sel = _full_sequence_logits(model, samples, pad_id, T, device)
    sel = sel.float()
    if temperature > 0:
        sel = sel / temperature
    logp_all = F.log_softmax(sel, dim=-1)                                          # [B, T, V]
    lp = logp_all.gather(2, gen[:, :, None]).squeeze(2)
    ended = torch.arange(T, device=device)[None, :] >= torch.tensor([len(s.gen_ids) for s in samples], device=device)[:, None]
    lp = lp.masked_fill(ended, 0.0)
    ent = (-(logp_all.exp() * logp_all).sum(-1)).masked_fill(ended, 0.0) if with_entropy else None
    return lp, ent


def _distinct_prompts(samples: Sequence[Scored]) -> tuple[list[list[int]], list[int]]:
    """The distinct prompts, in first-seen order, and each sample's index into them."""
    index: dict[tuple[int, ...], int] = {}
    owner = [index.setdefault(tuple(s.prompt_ids), len(index)) for s in samples]
    return [list(p) for p in index], owner


def _shared_prompts(samples: Sequence[Scored], prompt_of: Sequence[int]) -> tuple[list[list[int]], list[int]]:
    """The prompts the caller says the samples share, in first-seen order, and each sample's index."""
    index: dict[int, int] = {}
    prompts: list[list[int]] = []
    owner = []
    for s, key in zip(samples, prompt_of):
        if key not in index:
            index[key] = len(prompts)
            prompts.append(list(s.prompt_ids))
        owner.append(index[key])
    return prompts, owner


def _full_sequence_logits(model: Any, samples: Sequence[Scored], pad_id: int, T: int, device: torch.device) -> torch.Tensor:
    """``[B, T, V]`` logits at the positions that predict each generated token: one right-padded
    prompt + generation sequence per sample."""
    seqs = [list(s.prompt_ids) + list(s.gen_ids) for s in samples]
    width = max(len(x) for x in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long, device=device)
    att = torch.zeros_like(ids)
    for i, x in enumerate(seqs):
        ids[i, :len(x)] = torch.tensor(x, dtype=torch.long, device=device)
        att[i, :len(x)] = 1
    logits = model(input_ids=ids, attention_mask=att).logits
    # position p predicts token p+1; generated token t sits at len(prompt) + t
    starts = torch.tensor([len(s.prompt_ids) - 1 for s in samples], device=device)
    pos = (starts[:, None] + torch.arange(T, device=device)[None, :]).clamp(max=width - 2)
    return logits.gather(1, pos[:, :, None].expand(-1, -1, logits.shape[-1]))


def _shared_prompt_logits(model: Any, prompts: list[list[int]], owner: list[int], gen: torch.Tensor, pad_id: int,
                          device: torch.device) -> torch.Tensor | None:
    """The same ``[B, T, V]`` logits with one pass per distinct prompt (left-padded, as the decode
    loop runs it): its cache, indexed out to the samples (``index_select``, so the gradient of every
    sample flows back into its prompt's pass), then the generated tokens of all samples in one pass.
    None when the model returns no key/value cache (then the caller runs full sequences)."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long, device=device)
    att = torch.zeros_like(ids)
    for u, p in enumerate(prompts):
        ids[u, width - len(p):] = torch.tensor(p, dtype=torch.long, device=device)
        att[u, width - len(p):] = 1
    pos = (att.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=True)
    cache = cache_of(out)
    if cache is None or not hasattr(cache, "reorder_cache"):
        return None
    rows = torch.tensor(owner, dtype=torch.long, device=device)
    first = out.logits[:, -1, :].index_select(0, rows)                  # predicts generated token 0
    T = gen.shape[1]
    if T == 1:
        return first[:, None, :]
    cache.reorder_cache(rows)                                           # [U, ...] -> [B, ...]
    lengths = torch.tensor([len(p) for p in prompts], device=device).index_select(0, rows)
    step_pos = lengths[:, None] + torch.arange(T - 1, device=device)[None, :]
    # generated tokens past a sample's end are pads: they only feed positions whose logits are unused
    step_att = torch.cat([att.index_select(0, rows), torch.ones((len(owner), T - 1), dtype=att.dtype, device=device)], 1)
    rest = model(input_ids=gen[:, :-1], attention_mask=step_att, position_ids=step_pos, use_cache=True,
                 **with_cache(model, cache)).logits  # token t predicts token t + 1
    return torch.cat([first[:, None, :], rest], dim=1)


@dataclass
class _Tokens:
    prompt_ids: list[int]
    gen_ids: list[int]


def compute_logprobs(model: Any, prompt_ids: list[list[int]] | list[int], gen_ids: list[list[int]] | list[int], *,
                     temperature: float = 1.0, pad_token_id: int = 0) -> list[torch.Tensor] | torch.Tensor:
    """Logprobs of ``gen_ids`` given ``prompt_ids`` under ``model``: one sequence (lists of ints ->
    1-D tensor) or a batch (lists of lists -> one 1-D tensor per sequence, length ``len(gen)``),
    computed by :func:`forward_logprobs`, the one the loss uses."""
    single = bool(prompt_ids) and isinstance(prompt_ids[0], int)
    prompts = [prompt_ids] if single else prompt_ids
    gens = [gen_ids] if single else gen_ids
    seqs = [_Tokens(list(p), list(g)) for p, g in zip(prompts, gens)]
    lp, _ = forward_logprobs(model, seqs, temperature, pad_token_id)
    out = [lp[i, :len(g)] for i, g in enumerate(gens)]
    return out[0] if single else out
