"""Our own batched decode loop (not ``model.generate``): the local generation backend's engine.

Why our own loop: the async GRPO engine swaps weights *between decode steps* (in-flight
weight updates, nemo-rl.md §2.6). The loop calls ``on_step(step)`` before every forward
pass and holds ``policy.weights_lock`` during the pass, so a swap lands exactly between
two tokens; each sampled token is stamped with ``policy.version`` as read for the pass
that produced its logits, and keeps the logprob it was sampled with.

Logprob convention: ``log_softmax(logits / temperature)`` over the full vocabulary, before
top-p truncation (what NeMo-RL's trainer recomputes: it divides logits by the generation
temperature). Greedy decoding (temperature 0) records logprobs at temperature 1.

Batching: left padding + attention mask + explicit position ids + a KV cache; per-row
temperature / top_p / max_new_tokens / stop strings, so rows of different environments
share a batch. Rows with identical prompts (a GRPO group) share one prefill: the prompt runs
once and its cache is indexed out to the rows (``reorder_cache``) before the first token is
sampled. Who batches what is trainer.rollout.local_generator's business.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F

from servers.model.kv_cache import cache_of, with_cache
from trainer.policy import Policy
from trainer.rollout.generator import Generation, SamplingParams

OnStep = Callable[[int], None]


def _sample(logits: torch.Tensor, temperature: torch.Tensor, top_p: torch.Tensor,
            rng: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row. Returns (tokens, logprobs of those tokens)."""
    logits = logits.float()
    greedy = temperature <= 0
    scaled = logits / torch.where(greedy, torch.ones_like(temperature), temperature).unsqueeze(1)
    logp = F.log_softmax(scaled, dim=-1)
    probs = logp.exp()
    # Nucleus: keep the smallest prefix of the sorted distribution whose mass reaches top_p.
    sorted_p, order = probs.sort(dim=-1, descending=True)
    cum = sorted_p.cumsum(dim=-1)
    drop_sorted = (cum - sorted_p) >= top_p.unsqueeze(1)
    drop = torch.zeros_like(drop_sorted).scatter(1, order, drop_sorted)
    filtered = probs.masked_fill(drop, 0.0)
    if rng.device != filtered.device:  # a caller's RNG on another device: sample there, same draws
        sampled = torch.multinomial(filtered.to(rng.device), 1, generator=rng).squeeze(1).to(filtered.device)
    else:
        sampled = torch.multinomial(filtered, 1, generator=rng).squeeze(1)
    tokens = torch.where(greedy, logits.argmax(dim=-1), sampled)
    return tokens, logp.gather(1, tokens.unsqueeze(1)).squeeze(1)


@torch.no_grad()
def decode_batch(policy: Policy, prompts: list[list[int]], params: list[SamplingParams], *,
                 rng: torch.Generator | None = None, on_step: OnStep | None = None) -> list[Generation]:
    """Generate one continuation per prompt. See the module docstring for the contract."""
    if not prompts:
        return []
    model, tok = policy.model, policy.tokenizer
    device = next(model.parameters()).device
    rng = rng or torch.Generator(device=device).manual_seed(0)
    batch = len(prompts)
    pad = tok.pad_token_id
    width = max(len(p) for p in prompts)
    limit = getattr(model.config, "max_position_embeddings", 1 << 30)
    max_new = [max(0, min(p.max_new_tokens, limit - len(ids))) for p, ids in zip(params, prompts)]
    ids = torch.full((batch, width), pad, dtype=torch.long)
    mask = torch.zeros((batch, width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
        mask[i, width - len(p):] = 1
    ids, mask = ids.to(device), mask.to(device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    temperature = torch.tensor([p.temperature for p in params], dtype=torch.float32, device=device)
    top_p = torch.tensor([p.top_p for p in params], dtype=torch.float32, device=device)
    stop_ids = policy.stop_token_ids
    stop_tail = max((len(s) for p in params for s in p.stop), default=0)
    out = [Generation(prompt_ids=list(p)) for p in prompts]
    active = [m > 0 for m in max_new]
    for i, a in enumerate(active):
        if not a:
            out[i].finish_reason = "length"

    cache: Any = None
    step_input, step_pos = ids, positions
    step = 0
    while any(active):
        if on_step is not None:
            on_step(step)
        with policy.weights_lock:
            version = policy.version
            if cache is None:
                logits, cache = _prefill(model, prompts, step_input, mask, step_pos)
            else:
                result = model(input_ids=step_input, attention_mask=mask, position_ids=step_pos, use_cache=True,
                               **with_cache(model, cache))
                logits, cache = result.logits[:, -1, :], cache_of(result)
        tokens, logps = _sample(logits, temperature, top_p, rng)
        tokens_l, logps_l = tokens.tolist(), logps.tolist()
        for i in range(batch):
            if not active[i]:
                continue
            g = out[i]
            g.token_ids.append(tokens_l[i])
            g.logprobs.append(logps_l[i])
            g.versions.append(version)
            if tokens_l[i] in stop_ids:
                g.finish_reason, active[i] = "stop", False
            elif params[i].stop and any(s in tok.decode(g.token_ids[-(stop_tail + 8):]) for s in params[i].stop):
                g.finish_reason, active[i] = "stop", False
            elif len(g.token_ids) >= max_new[i]:
                g.finish_reason, active[i] = "length", False
        # Finished rows keep decoding pad tokens (cheaper than re-packing the KV cache).
        feed = torch.tensor([t if a else pad for t, a in zip(tokens_l, active)], dtype=torch.long, device=device)
        step_input = feed.unsqueeze(1)
        step_pos = step_pos[:, -1:] + 1
        mask = torch.cat([mask, torch.ones((batch, 1), dtype=mask.dtype, device=device)], dim=1)
        step += 1
    for g in out:
        g.text = tok.decode(g.token_ids, skip_special_tokens=True)
    return out


def _prefill(model: Any, prompts: list[list[int]], ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor
             ) -> tuple[torch.Tensor, Any]:
    """Last-position logits ``[B, V]`` and the KV cache of the left-padded prompts, running each
    distinct prompt once (identical prompts have identical padded rows)."""
    index: dict[tuple[int, ...], int] = {}
    owner = [index.setdefault(tuple(p), len(index)) for p in prompts]
    if len(index) == len(prompts):
        result = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
        return result.logits[:, -1, :], cache_of(result)
    first: dict[int, int] = {}
    for i, u in enumerate(owner):
        first.setdefault(u, i)
    distinct = torch.tensor([first[u] for u in range(len(index))], device=ids.device)  # a row per distinct prompt
    result = model(input_ids=ids[distinct], attention_mask=mask[distinct], position_ids=positions[distinct],
                   use_cache=True)
    rows = torch.tensor(owner, device=ids.device)
    cache = cache_of(result)
    cache.reorder_cache(rows)
    return result.logits[:, -1, :].index_select(0, rows), cache
