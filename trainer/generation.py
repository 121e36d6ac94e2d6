"""Our own batched decode loop (not ``model.generate``), and ``compute_logprobs``.

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
once and its cache is indexed out to the rows (``reorder_cache``) before the first token is sampled. :class:`BatchedGenerator` gathers concurrent async requests into batches
run on one worker thread, so the event loop keeps scoring while the CPU decodes.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn.functional as F

from trainer.kv_cache import cache_of, with_cache
from trainer.policy import Policy

OnStep = Callable[[int], None]


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 64
    stop: tuple[str, ...] = ()

    @classmethod
    def for_row(cls, create_params: dict[str, Any], default: "SamplingParams") -> "SamplingParams":
        """NeMo-RL's rule: the run's temperature/top_p win; max tokens = min(row, run)."""
        row_max = create_params.get("max_output_tokens")
        max_new = min(default.max_new_tokens, row_max) if row_max else default.max_new_tokens
        return cls(default.temperature, default.top_p, max_new, default.stop)


@dataclass
class Generation:
    prompt_ids: list[int]
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    text: str = ""
    finish_reason: str = "length"  # "stop" (end token or stop string) | "length"

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"


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


def compute_logprobs(model: Any, prompt_ids: list[list[int]] | list[int], gen_ids: list[list[int]] | list[int], *,
                     temperature: float = 1.0, pad_token_id: int = 0) -> list[torch.Tensor] | torch.Tensor:
    """Logprobs of ``gen_ids`` given ``prompt_ids`` under ``model``: one sequence (lists of ints ->
    1-D tensor) or a batch (lists of lists -> one 1-D tensor per sequence, length ``len(gen)``).
    The computation is :func:`trainer.logprobs.forward_logprobs`, the one the loss uses."""
    from trainer.logprobs import forward_logprobs

    single = bool(prompt_ids) and isinstance(prompt_ids[0], int)
    prompts = [prompt_ids] if single else prompt_ids
    gens = [gen_ids] if single else gen_ids
    seqs = [_Tokens(list(p), list(g)) for p, g in zip(prompts, gens)]
    lp, _ = forward_logprobs(model, seqs, temperature, pad_token_id)
    out = [lp[i, :len(g)] for i, g in enumerate(gens)]
    return out[0] if single else out


@dataclass
class _Tokens:
    prompt_ids: list[int]
    gen_ids: list[int]


@dataclass
class _Request:
    prompt_ids: list[int]
    params: SamplingParams
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop


class BatchedGenerator:
    """Async front of :func:`decode_batch`: concurrent ``await generate(...)`` calls are
    gathered into batches (up to ``max_batch``) decoded on one worker thread.

    ``on_step`` is forwarded to every decode step (weight swaps, cancellation checks).
    ``stats`` counts batches, sequences and generated tokens for throughput reports.
    """

    def __init__(self, policy: Policy, *, max_batch: int = 64, seed: int = 0, gather_s: float = 0.01,
                 on_step: OnStep | None = None):
        self.policy, self.max_batch, self.gather_s, self.on_step = policy, max_batch, gather_s, on_step
        self.rng = policy.make_rng(seed)
        self._queue: queue.Queue[_Request | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self.stats = {"batches": 0, "sequences": 0, "generated_tokens": 0, "decode_s": 0.0}

    def start(self) -> "BatchedGenerator":
        if self._thread is None:
            self._thread = threading.Thread(target=self._worker, name="verigym-decode", daemon=True)
            self._thread.start()
        return self

    def close(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None

    async def __aenter__(self) -> "BatchedGenerator":
        return self.start()

    async def __aexit__(self, *_: Any) -> None:
        await asyncio.to_thread(self.close)

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> Generation:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self.start()
        self._queue.put(_Request(list(prompt_ids), params, future, loop))
        return await future

    def _worker(self) -> None:
        import time

        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            deadline = time.monotonic() + self.gather_s
            stop = False
            while len(batch) < self.max_batch:
                try:
                    item = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if item is None:
                    stop = True
                    break
                batch.append(item)
            start = time.perf_counter()
            try:
                results = decode_batch(self.policy, [r.prompt_ids for r in batch], [r.params for r in batch],
                                       rng=self.rng, on_step=self.on_step)
                self.stats["batches"] += 1
                self.stats["sequences"] += len(batch)
                self.stats["generated_tokens"] += sum(len(g.token_ids) for g in results)
                for req, res in zip(batch, results):
                    req.loop.call_soon_threadsafe(_resolve, req.future, res, None)
            except BaseException as exc:  # noqa: BLE001 - surfaced to every waiting caller
                for req in batch:
                    req.loop.call_soon_threadsafe(_resolve, req.future, None, exc)
            self.stats["decode_s"] += time.perf_counter() - start
            if stop:
                return


def _resolve(future: asyncio.Future, result: Any, exc: BaseException | None) -> None:
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)
