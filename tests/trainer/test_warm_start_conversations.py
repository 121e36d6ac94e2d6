"""Warm start on gold conversations (policy.warm_start.conversations): the tokens and loss mask are
the ones a multi-turn rollout builds (trainer.rollout.episode), the loss falls on the assistant turns
only, and a bad file fails with its line number."""
import json

import pytest
import torch

from trainer.rollout.episode import environment_tokens
from trainer.config import WarmStartConfig, load_config
from trainer.rollout.generator import Generation
from trainer.grpo.warm_start import conversation_tokens, supervised_warm_start
from trainer.policy import Policy, PolicyConfig, TinyModelConfig
from trainer.responses import chat_tools

torch.set_num_threads(1)
TOOLS = [{"type": "function", "name": "execute_python",
          "parameters": {"type": "object", "properties": {"code": {"type": "string"}}}}]
REPLY = json.dumps({"stdout": "230\n", "stderr": "", "truncated": False, "success": True})
CALL = '<tool_call>{"name": "execute_python", "arguments": {"code": "print(46*5)"}}</tool_call>'


def convo() -> dict:
    return {"tools": TOOLS, "messages": [
        {"role": "user", "content": "What is 46*5?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "execute_python", "arguments": {"code": "print(46*5)"}}}]},
        {"role": "tool", "content": REPLY},
        {"role": "assistant", "content": "\\boxed{230}"}]}


@pytest.fixture(scope="module")
def policy() -> Policy:
    return Policy.load(PolicyConfig(tiny=TinyModelConfig(num_hidden_layers=1, hidden_size=64, intermediate_size=128)))


def test_tokens_and_mask_are_the_rollouts(policy):
    from trainer.policy import IM_END

    ids, mask = conversation_tokens(policy, convo())
    tools = chat_tools(TOOLS)
    messages = convo()["messages"]
    prompt = policy.encode(policy.render(messages[:1], tools))
    turn1 = policy.encode(CALL + IM_END)
    gen = Generation(prompt_ids=prompt, token_ids=turn1, text=CALL, finish_reason="stop")
    env = environment_tokens(policy, messages[:1], tools, [{"role": "tool", "content": REPLY}], gen)
    turn2 = policy.encode("\\boxed{230}" + IM_END)
    assert ids == prompt + turn1 + env + turn2  # the token sequence a two-turn rollout builds
    assert mask == [0] * len(prompt) + [1] * len(turn1) + [0] * len(env) + [1] * len(turn2)
    assert REPLY in policy.decode([i for i, m in zip(ids, mask) if m == 0])  # the tool output is context only


def test_warm_start_trains_on_the_conversations_file(policy, tmp_path):
    path = tmp_path / "convos.jsonl"
    path.write_text(json.dumps(convo()) + "\n")
    cfg = WarmStartConfig(enabled=True, conversations=str(path), num_steps=30, batch_size=1, lr=3e-3)
    out = supervised_warm_start(policy, [], cfg)
    assert out["warm_start/examples"] == 1 and out["warm_start/steps"] == 30
    assert out["warm_start/final_loss"] < out["warm_start/first_loss"] / 2


def test_bad_conversations_fail_clearly(policy, tmp_path):
    path = tmp_path / "convos.jsonl"
    path.write_text(json.dumps(convo()) + "\n" + json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    with pytest.raises(ValueError, match=r"convos.jsonl:2: .*at least one assistant message"):
        supervised_warm_start(policy, [], WarmStartConfig(enabled=True, conversations=str(path), num_steps=1))
    with pytest.raises(ValueError, match="warm-start conversations file 'missing.jsonl' not found"):
        load_config("tiny_tools", ["policy.warm_start.conversations=missing.jsonl"])
