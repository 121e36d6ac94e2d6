"""The in-process decode: a batch of prompts through the repo's one decode engine
(:class:`servers.model.engine.DecodeEngine`, the engine ``envs model serve`` runs) on the policy's
own model. The local generation backend (trainer.rollout.local_generator), validation and the DPO
evaluation decode here.

The engine shares the policy's ``weights_lock`` and reads ``policy.version`` when it launches each
decode step, so a weight swap under that lock (the engine's in-flight update, called from
``on_step(step)`` before every step) lands exactly between two tokens, and each token is stamped
with the version of the weights that produced its logits and keeps the logprob it was sampled with.
Its KV cache is kept across a swap, as vLLM keeps it with ``/pause?mode=keep``.

Logprob convention: ``log_softmax(logits / temperature)`` over the full vocabulary, before top-p
truncation (what NeMo-RL's trainer recomputes: it divides logits by the generation temperature).
Greedy decoding (temperature 0) records logprobs at temperature 1.

Sampling is the engine's: each row draws from a counter-based stream of its own seed, so a row's
tokens depend on its seed and logits only, not on its batch mates. The seeds come from ``rng``:
the same ``rng`` state and prompts give the same tokens. Per-row temperature / top_p /
max_new_tokens / stop strings, so rows of different environments share a batch; rows with the same
prompt (a GRPO group) share one prefill. Who batches what is trainer.rollout.local_generator's
business.
"""

from __future__ import annotations

import torch

from servers.model.engine import DecodeEngine, EngineRequest, OnStep
from servers.model.sampling import SamplingParams as EngineParams
from trainer.policy import Policy
from trainer.rollout.generator import Generation, SamplingParams

__all__ = ["OnStep", "decode_batch", "engine_of"]


def engine_of(policy: Policy) -> DecodeEngine:
    """The policy's decode engine, built on first use (its KV cache grows to the largest batch seen)."""
    engine = policy.decode_engine
    if engine is None or engine.model is not policy.model:
        engine = policy.decode_engine = DecodeEngine(policy.model, policy.tokenizer, lock=policy.weights_lock,
                                                     version=lambda: policy.version, compile=policy.compile_decode,
                                                     stop_token_ids=sorted(policy.stop_token_ids))
    return engine


@torch.no_grad()
def decode_batch(policy: Policy, prompts: list[list[int]], params: list[SamplingParams], *,
                 rng: torch.Generator | None = None, on_step: OnStep | None = None) -> list[Generation]:
    """Generate one continuation per prompt. See the module docstring for the contract."""
    if not prompts:
        return []
    engine = engine_of(policy)
    rng = rng or torch.Generator(device=policy.device).manual_seed(0)
    seeds = torch.randint(0, 1 << 62, (len(prompts),), generator=rng, device=rng.device).tolist()
    requests = [EngineRequest(list(ids), EngineParams(max_new_tokens=p.max_new_tokens, temperature=p.temperature,
                                                      top_p=p.top_p, stop=tuple(p.stop), seed=seed))
                for ids, p, seed in zip(prompts, params, seeds)]
    outputs = engine.run(requests, on_step=on_step)
    return [Generation(prompt_ids=list(o.prompt_ids), token_ids=o.token_ids, logprobs=o.logprobs, versions=o.versions,
                       text=policy.decode(o.token_ids, skip_special_tokens=True), finish_reason=o.finish_reason)
            for o in outputs]
