"""The one token-logprob computation: what the GRPO loss trains on, what the reference policy
and ``prev_logprobs`` are, what DPO sums and what tests compare the decode loop's recorded
logprobs with.

Convention (trainer.generation's, NeMo-RL's): ``log_softmax(logits / temperature)`` over the
full vocabulary; temperature 0 (greedy) scores at temperature 1. Sequences are right-padded,
so positions are the plain 0..n-1 the model saw when it generated them.

Device: the input ids are built on the model's device (or ``device``), so the forward pass runs
where the model lives — one GPU when the engine put it there — and the results stay on that
device; callers move what they keep (``.to(...)``).
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence

import torch
import torch.nn.functional as F


class Scored(Protocol):
    """Anything with a prompt and the tokens generated after it (a GRPO ``Sample``, a DPO side)."""

    prompt_ids: Sequence[int]
    gen_ids: Sequence[int]


def model_device(model: Any) -> torch.device:
    return next(model.parameters()).device


def forward_logprobs(model: Any, samples: Sequence[Scored], temperature: float, pad_id: int,
                     with_entropy: bool = False, device: torch.device | str | None = None,
                     ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``[B, T]`` logprobs of each sample's generated tokens (0 past a sample's end; T = the
    longest), and with ``with_entropy`` the ``[B, T]`` entropy of the distribution at each of
    those positions. Gradients flow when the caller has them enabled (the loss)."""
    device = torch.device(device) if device is not None else model_device(model)
    seqs = [list(s.prompt_ids) + list(s.gen_ids) for s in samples]
    width = max(len(x) for x in seqs)
    T = max(len(s.gen_ids) for s in samples)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long, device=device)
    att = torch.zeros_like(ids)
    for i, x in enumerate(seqs):
        ids[i, :len(x)] = torch.tensor(x, dtype=torch.long, device=device)
        att[i, :len(x)] = 1
    logits = model(input_ids=ids, attention_mask=att).logits.float()
    if temperature > 0:
        logits = logits / temperature
    # position p predicts token p+1; generated token t sits at len(prompt) + t
    starts = torch.tensor([len(s.prompt_ids) - 1 for s in samples], device=device)
    pos = (starts[:, None] + torch.arange(T, device=device)[None, :]).clamp(max=width - 2)
    sel = logits.gather(1, pos[:, :, None].expand(-1, -1, logits.shape[-1]))       # [B, T, V]
    logp_all = F.log_softmax(sel, dim=-1)
    lp = logp_all.gather(2, ids.gather(1, pos + 1)[:, :, None]).squeeze(2)
    ended = torch.arange(T, device=device)[None, :] >= torch.tensor([len(s.gen_ids) for s in samples], device=device)[:, None]
    lp = lp.masked_fill(ended, 0.0)
    ent = (-(logp_all.exp() * logp_all).sum(-1)).masked_fill(ended, 0.0) if with_entropy else None
    return lp, ent
