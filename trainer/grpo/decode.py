"""What the engine's generators and its trainer share about the policy: loading it, a row's
prompt ids, decoding within the context limit, sampling parameters from the config, and a
decoded sample as a Responses-API ``response``. No Ray, no HTTP here (trainer.grpo.workers
runs these inside its actors)."""

from __future__ import annotations

from typing import Any

import torch

from trainer.config import MasterConfig
from trainer.grpo.replay_buffer import Sample
from trainer.responses import chat_tools, single_turn_response, to_chat_messages


def load_policy(cfg: MasterConfig, threads: int) -> Any:
    from trainer.policy import Policy, PolicyConfig, TinyModelConfig

    torch.set_num_threads(threads)
    p = cfg.policy
    kw: dict[str, Any] = {"model_name": p.model_name, "seed": cfg.grpo.seed, "precision": p.precision}
    if p.model_name == "tiny" and p.hf_config_overrides:
        kw["tiny"] = TinyModelConfig(**p.hf_config_overrides)
    return Policy.load(PolicyConfig(**kw))


def prompt_ids_for(policy: Any, row: dict[str, Any]) -> list[int]:
    """The row's first prompt, rendered by the policy's chat template with the row's tools."""
    params = row.get("responses_create_params", {})
    return policy.encode(policy.render(to_chat_messages(params), chat_tools(params.get("tools"))))


PROMPT_TOO_LONG = "prompt_too_long"  # failure class of a prompt with no room left for one new token


def context_budgets(cfg: MasterConfig, prompts: list[list[int]], max_new_tokens: int, step: int | None = None) -> list[int]:
    """New tokens each prompt may get so that prompt + response <= ``policy.max_total_sequence_length``
    (NeMo-RL's ``max_model_len``: vLLM caps ``max_tokens`` at what is left of the context). 0 means the
    prompt alone fills it: the sample fails with :data:`PROMPT_TOO_LONG` and is masked, as NeMo-RL
    gives such a prompt ``loss_multiplier=0`` instead of training on it. With ``step`` (the step the
    rollouts train at) the limit follows ``policy.max_total_sequence_length_schedule``."""
    limit = cfg.policy.max_total_sequence_length if step is None else cfg.policy.max_sequence_length_at(step)
    return [max(0, min(max_new_tokens, limit - len(p))) for p in prompts]


def too_long_sample(cfg: MasterConfig, prompt: list[int]) -> Sample:
    """A failed sample for a prompt over the limit; the prompt keeps its last tokens so a training
    forward pass over the (masked) sample stays within the context."""
    keep = cfg.policy.max_total_sequence_length - 1
    return Sample(prompt_ids=list(prompt[-keep:]), gen_ids=[], gen_logprobs=[], versions=[], truncated=False,
                  failure=PROMPT_TOO_LONG)


def decode_within_context(policy: Any, cfg: MasterConfig, prompts: list[list[int]], params: Any,
                          rng: torch.Generator, hook: Any = None, step: int | None = None) -> list[Sample]:
    """Decode every prompt that fits the context (each capped to the room it has); the others become
    :func:`too_long_sample` without being decoded."""
    from dataclasses import replace

    from trainer.generation import decode_batch

    budgets = context_budgets(cfg, prompts, params.max_new_tokens, step)
    fit = [i for i, b in enumerate(budgets) if b > 0]
    gens = decode_batch(policy, [prompts[i] for i in fit],
                        [params if budgets[i] == params.max_new_tokens else replace(params, max_new_tokens=budgets[i])
                         for i in fit], rng=rng, on_step=hook) if fit else []
    out = [too_long_sample(cfg, p) for p in prompts]
    for i, x in zip(fit, gens):
        out[i] = Sample(prompt_ids=list(x.prompt_ids), gen_ids=list(x.token_ids), gen_logprobs=list(x.logprobs),
                        versions=list(x.versions), truncated=x.truncated, text=x.text)
    return out


def sampling_params(cfg: MasterConfig, greedy: bool = False) -> Any:
    from trainer.generation import SamplingParams

    gc = cfg.policy.generation
    temp = 0.0 if greedy and gc.val_temperature is None else (gc.val_temperature if greedy else gc.temperature)
    return SamplingParams(temperature=temp, top_p=gc.top_p, max_new_tokens=gc.max_new_tokens,
                          stop=tuple(gc.stop_strings or ()))


def to_response(policy: Any, s: Sample, row: dict[str, Any]) -> dict[str, Any]:
    """The Responses-API ``response`` of one decoded sample; the tool calls it wrote are
    ``function_call`` items when the row offers tools (trainer.responses.single_turn_response)."""
    return single_turn_response(s.text, create_params=row.get("responses_create_params", {}), model=policy.name,
                                prompt_ids=s.prompt_ids, gen_ids=s.gen_ids, logprobs=s.gen_logprobs,
                                versions=s.versions, truncated=s.truncated)
