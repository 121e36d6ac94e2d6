"""What the engine's generators, trainer and reward actor share about the policy: loading it, a
row's prompt ids, sampling parameters from the config, and a sample as a Responses-API
``response``. No Ray, no HTTP here. Decoding is trainer.generation's; rollouts (context limit
included) are trainer.agent_loop.run_episode's, through trainer.grpo.episodes."""

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
    kw: dict[str, Any] = {"model_name": p.model_name, "seed": cfg.grpo.seed, "precision": p.precision,
                          "device": p.device}
    if p.model_name == "tiny" and p.hf_config_overrides:
        kw["tiny"] = TinyModelConfig(**p.hf_config_overrides)
    return Policy.load(PolicyConfig(**kw))


def prompt_ids_for(policy: Any, row: dict[str, Any]) -> list[int]:
    """The row's first prompt, rendered by the policy's chat template with the row's tools."""
    params = row.get("responses_create_params", {})
    return policy.encode(policy.render(to_chat_messages(params), chat_tools(params.get("tools"))))


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
