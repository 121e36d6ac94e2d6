"""Sampling parameters of one sequence, and the sampler the decode engine runs on the device.

Logprob convention (the trainer's, and NeMo-RL's): ``log_softmax(logits / temperature)`` over the
full vocabulary, before top-p truncation; greedy rows (temperature 0) report ``log_softmax(logits)``.
``vllm serve --logprobs-mode processed_logprobs`` reports the same numbers when ``top_p`` is 1.

Randomness is counter-based: the uniform draw for a row's ``t``-th token is a hash of (the row's
seed, ``t``), and the token is found by inverse-CDF search over that row's probabilities (in two
levels: blocks, then entries of one block — no vocabulary-wide running sum). So a
sequence's tokens depend on its seed and its logits only — not on which batch it shared, its row,
or how many steps the device ran ahead — which is what makes the captured (CUDA graph) and the
eager decode paths comparable token for token, and a seeded request reproducible. Only one
uniform per row is drawn (no per-vocabulary noise), and the full-vocabulary sort runs only in
batches where some row has ``top_p < 1``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

MAX_TOP_LOGPROBS = 20  # vLLM's default --max-logprobs


@dataclass(frozen=True)
class SamplingParams:
    """What one sequence asks of the engine (the union of what the trainer and the HTTP routes need)."""

    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()  # stop strings: the sequence ends once its text contains one
    stop_token_ids: tuple[int, ...] = ()  # extra end tokens, on top of the model's own (unless ignore_eos)
    ignore_eos: bool = False
    seed: int | None = None  # None: the engine draws one
    top_logprobs: int = 0  # alternatives reported per generated token, beside the sampled one
    prompt_logprobs: int | None = None  # None: none; k: the prompt token's logprob and the top k

    def __post_init__(self) -> None:
        if self.max_new_tokens < 0:
            raise ValueError("max_new_tokens must be >= 0")
        if not 0 < self.top_p <= 1:
            raise ValueError("top_p must be in (0, 1]")
        if self.temperature < 0:
            raise ValueError("temperature must be >= 0")
        if not 0 <= self.top_logprobs <= MAX_TOP_LOGPROBS:
            raise ValueError(f"top_logprobs must be in [0, {MAX_TOP_LOGPROBS}]")


@dataclass
class SequenceOutput:
    """One generated sequence: every sampled token (a stop token or the token that completed a stop
    string included), its logprob and the weight version that sampled it."""

    prompt_ids: list[int]
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[Any] = field(default_factory=list)
    finish_reason: str = "length"  # "stop" | "length" | "abort"
    stop_reason: int | str | None = None  # the stop token id or stop string; None for EOS and length
    top_logprobs: list[list[tuple[int, float]]] | None = None  # per token: (id, logprob), best first
    prompt_logprobs: list[dict[int, tuple[float, int]] | None] | None = None  # per prompt token: {id: (lp, rank)}


# ---- counter-based uniforms ------------------------------------------------------------------
_MASK64 = (1 << 64) - 1


def _signed(value: int) -> int:
    value &= _MASK64
    return value - (1 << 64) if value >= 1 << 63 else value


_GOLDEN, _MIX1, _MIX2 = _signed(0x9E3779B97F4A7C15), _signed(0xBF58476D1CE4E5B9), _signed(0x94D049BB133111EB)


def _shr(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 (torch's >> is arithmetic)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def uniforms(seeds: torch.Tensor, counters: torch.Tensor) -> torch.Tensor:
    """One float64 in (0, 1) per row: splitmix64 of (seed, counter). int64 products wrap mod 2**64."""
    x = seeds * _GOLDEN + (counters + 1) * _MIX2
    x = (x ^ _shr(x, 30)) * _MIX1
    x = (x ^ _shr(x, 27)) * _MIX2
    x = x ^ _shr(x, 31)
    return (_shr(x, 11).to(torch.float64) + 0.5) * (2.0 ** -53)


def seed_for(base: int, index: int) -> int:
    """A well-mixed int64 seed for sequence ``index`` of a request seeded ``base`` (n > 1, groups)."""
    x = (base * 0x9E3779B97F4A7C15 + (index + 1) * 0xD1B54A32D192ED03) & _MASK64
    x ^= x >> 31
    x = (x * 0xBF58476D1CE4E5B9) & _MASK64
    return _signed(x ^ (x >> 29))


# ---- inverse-CDF search in two levels ----------------------------------------------------------
def block_size(vocab: int) -> int:
    """Entries per block of the two-level search: the smallest divisor of ``vocab`` from sqrt(vocab)
    up to 4x that (no padding copy), else the power of two nearest sqrt(vocab) (the last block is
    padded). Qwen2.5's 151,936 = 128 blocks of 1,187."""
    root = max(1, int(vocab ** 0.5))
    for size in range(root, min(vocab, 4 * root) + 1):
        if vocab % size == 0:
            return size
    return 1 << max(0, round(math.log2(root)))


def _first_above(cdf: torch.Tensor, target: torch.Tensor, mass: torch.Tensor) -> torch.Tensor:
    """Per row, the first index whose running sum ``cdf`` exceeds ``target`` [B, 1]: an entry with
    positive mass, since the sum before it is <= target. Where rounding puts the target at or past
    the last sum, the last entry with positive ``mass`` (never a zero-probability entry)."""
    found = (cdf <= target).sum(dim=-1)
    positions = torch.arange(mass.shape[-1], device=mass.device)
    last = torch.where(mass > 0, positions, -1).amax(dim=-1).clamp(min=0)
    return torch.minimum(found, last)


def inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The token whose CDF interval holds ``u`` x the row's total mass, per row ([B, V] probabilities,
    not necessarily normalised; [B] float64 uniforms).

    A vocabulary-wide running sum is a long serial scan on the device (~0.25 ms of a 3.8 ms decode
    step at 128 x 151,936 on an H200). Two levels instead: per-block sums (a reduction), a running
    sum over the blocks, the block holding the target, then a running sum inside that block only —
    the same draw for the same uniform, up to float rounding."""
    B, V = probs.shape
    size = block_size(V)
    blocks = -(-V // size)
    if blocks * size != V:
        probs = torch.nn.functional.pad(probs, (0, blocks * size - V))
    grid = probs.view(B, blocks, size)
    block_mass = grid.sum(dim=-1, dtype=torch.float64)  # [B, blocks]
    block_cdf = block_mass.cumsum(dim=-1)
    target = u.unsqueeze(1) * block_cdf[:, -1:]  # float64, in [0, total)
    block = _first_above(block_cdf, target, block_mass)  # [B]
    inside = target - (block_cdf.gather(1, block.unsqueeze(1)) - block_mass.gather(1, block.unsqueeze(1)))
    entries = grid.gather(1, block.view(B, 1, 1).expand(B, 1, size)).squeeze(1)  # [B, size]
    entry = _first_above(entries.double().cumsum(dim=-1), inside, entries)
    return (block * size + entry).clamp(max=V - 1)


# ---- the sampler -----------------------------------------------------------------------------
@dataclass
class SamplerFlags:
    """What varies the sampler's shape of work (a captured decode step is specialised on these)."""

    any_top_p: bool  # some row has top_p < 1: the sort runs
    all_greedy: bool  # no row samples: argmax only
    top_k: int  # alternatives to report (max over rows)

    @classmethod
    def of(cls, params: list[SamplingParams]) -> "SamplerFlags":
        return cls(any_top_p=any(p.top_p < 1 and p.temperature > 0 for p in params),
                   all_greedy=all(p.temperature <= 0 for p in params),
                   top_k=max((p.top_logprobs for p in params), default=0))

    def key(self) -> tuple[bool, bool, int]:
        return (self.any_top_p, self.all_greedy, self.top_k)


def sample(logits: torch.Tensor, temperature: torch.Tensor, top_p: torch.Tensor, seeds: torch.Tensor,
           counters: torch.Tensor, flags: SamplerFlags
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """(tokens [B], their logprobs [B], top-k ids [B, k] | None, top-k logprobs [B, k] | None).

    Static shapes and no host synchronisation: safe inside a captured CUDA graph."""
    logits = logits.float()
    greedy = temperature <= 0
    scaled = logits / torch.where(greedy, torch.ones_like(temperature), temperature).unsqueeze(1)
    lse = torch.logsumexp(scaled, dim=-1, keepdim=True)
    if flags.all_greedy:
        tokens = logits.argmax(dim=-1)
    else:
        probs = (scaled - lse).exp()
        if flags.any_top_p:
            # Nucleus: keep the smallest prefix of the sorted distribution whose mass reaches top_p.
            sorted_p, order = probs.sort(dim=-1, descending=True)
            drop_sorted = (sorted_p.cumsum(dim=-1) - sorted_p) >= top_p.unsqueeze(1)
            probs = probs.masked_fill(torch.zeros_like(drop_sorted).scatter(1, order, drop_sorted), 0.0)
        drawn = inverse_cdf(probs, uniforms(seeds, counters))
        tokens = torch.where(greedy, logits.argmax(dim=-1), drawn)
    token_lp = scaled.gather(1, tokens.unsqueeze(1)).squeeze(1) - lse.squeeze(1)
    if flags.top_k:
        top_vals, top_ids = scaled.topk(flags.top_k, dim=-1)
        return tokens, token_lp, top_ids, top_vals - lse
    return tokens, token_lp, None, None


def prompt_logprobs(logits: torch.Tensor, prompt: list[int], k: int) -> list[dict[int, tuple[float, int]] | None]:
    """vLLM's prompt_logprobs: None for the first token, then {token: (logprob, rank)} for the prompt
    token and the ``k`` most likely (temperature 1)."""
    logp = torch.log_softmax(logits[:-1].float(), dim=-1)  # position j predicts token j + 1
    target = torch.tensor(prompt[1:], device=logits.device)
    chosen = logp.gather(1, target.unsqueeze(1)).squeeze(1)
    ranks = ((logp > chosen.unsqueeze(1)).sum(dim=1) + 1).tolist()
    top_vals, top_ids = logp.topk(k, dim=-1) if k > 0 else (None, None)
    tops = list(zip(top_ids.tolist(), top_vals.tolist())) if top_ids is not None and top_vals is not None else None
    out: list[dict[int, tuple[float, int]] | None] = [None]
    for j, (tok, lp) in enumerate(zip(prompt[1:], chosen.tolist())):
        entry = {tok: (lp, ranks[j])}
        for rank, (t, v) in enumerate(zip(*tops[j]) if tops else (), start=1):
            entry.setdefault(t, (v, rank))
        out.append(entry)
    return out
