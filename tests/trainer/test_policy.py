"""The local policy: tiny preset, chat templating, our decode loop, logprobs, responses."""

from __future__ import annotations

import json

import pytest
import torch

from trainer.logprobs import compute_logprobs
from trainer.rollout.decode import decode_batch
from trainer.rollout.episode import environment_tokens
from trainer.rollout.generator import Generation, SamplingParams
from trainer.policy import Policy, PolicyConfig, TinyModelConfig
from trainer.responses import chat_tools, parse_tool_calls, to_chat_messages, turn_items

pytestmark = pytest.mark.train
# One intra-op thread: on a shared 2-core machine, oversubscribed BLAS threads make tiny
# forwards ~50x slower.
torch.set_num_threads(1)


@pytest.fixture(scope="module")
def policy() -> Policy:
    return Policy.load(PolicyConfig(tiny=TinyModelConfig(num_hidden_layers=1, hidden_size=64, intermediate_size=128)))


def test_tiny_is_seeded_and_tokenizer_round_trips(policy):
    again = Policy.load(PolicyConfig(tiny=TinyModelConfig(num_hidden_layers=1, hidden_size=64, intermediate_size=128)))
    for a, b in zip(policy.model.parameters(), again.model.parameters()):
        assert torch.equal(a, b)
    text = "héllo <tool_call>{\"x\": 1}</tool_call> ∑ 😀"
    assert policy.decode(policy.encode(text)) == text
    other_seed = Policy.load(PolicyConfig(seed=1, tiny=TinyModelConfig(num_hidden_layers=1, hidden_size=64,
                                                                      intermediate_size=128)))
    assert not torch.equal(next(policy.model.parameters()), next(other_seed.model.parameters()))


def test_save_and_load_from_local_path(policy, tmp_path):
    policy.save(tmp_path / "m")
    loaded = Policy.load(PolicyConfig(model_name=str(tmp_path / "m")))
    prompt = policy.encode(policy.render([{"role": "user", "content": "hi"}]))
    assert loaded.encode(policy.render([{"role": "user", "content": "hi"}])) == prompt
    a = compute_logprobs(policy.model, prompt[:-3], prompt[-3:])
    b = compute_logprobs(loaded.model, prompt[:-3], prompt[-3:])
    assert torch.allclose(a, b, atol=1e-5)


def test_responses_input_to_chat_messages_and_tools():
    params = {"instructions": "be brief", "input": [
        {"role": "developer", "content": [{"type": "input_text", "text": "sys"}]},
        {"role": "user", "content": "add 1 and 2"},
        {"type": "function_call", "name": "add", "arguments": "{\"a\": 1, \"b\": 2}", "call_id": "c1"},
        {"type": "function_call_output", "call_id": "c1", "output": "3"},
        {"type": "reasoning", "summary": []}],
        "tools": [{"type": "function", "name": "add", "description": "adds", "parameters": {"type": "object"}}]}
    msgs = to_chat_messages(params)
    assert [m["role"] for m in msgs] == ["system", "system", "user", "assistant", "tool"]
    assert msgs[3]["tool_calls"][0]["function"] == {"name": "add", "arguments": {"a": 1, "b": 2}}
    assert chat_tools(params["tools"])[0]["function"]["name"] == "add"
    assert to_chat_messages({"input": "plain"}) == [{"role": "user", "content": "plain"}]


def test_tool_call_parsing_keeps_malformed_calls_as_text():
    text, calls = parse_tool_calls('ok <tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>'
                                   '<tool_call>not json</tool_call>')
    assert calls == [{"name": "f", "arguments": "{\"x\": 1}"}]
    assert text == "ok <tool_call>not json</tool_call>"
    items = turn_items('<tool_call>{"name": "f", "arguments": {}}</tool_call>', prompt_ids=[1], gen_ids=[2, 3],
                       logprobs=[-1.0, -2.0], versions=[0, 1], parse_tools=True)
    assert [i["type"] for i in items] == ["function_call"]
    assert items[-1]["generation_token_ids"] == [2, 3] and items[-1]["generation_policy_versions"] == [0, 1]


def test_decode_batch_logprobs_match_a_fresh_forward(policy):
    prompts = [policy.encode(policy.render([{"role": "user", "content": "x" * n}])) for n in (1, 9, 20)]
    gens = decode_batch(policy, prompts, [SamplingParams(max_new_tokens=12)] * 3, rng=torch.Generator().manual_seed(1))
    assert all(len(g.token_ids) == len(g.logprobs) == len(g.versions) for g in gens)
    recomputed = compute_logprobs(policy.model, [g.prompt_ids for g in gens], [g.token_ids for g in gens])
    for g, lp in zip(gens, recomputed):
        # Left-padded KV-cached decoding vs one right-padded forward: same numbers.
        assert torch.allclose(torch.tensor(g.logprobs), lp, atol=1e-4)


def test_temperature_top_p_and_limits(policy):
    prompt = policy.encode(policy.render([{"role": "user", "content": "q"}]))
    greedy = decode_batch(policy, [prompt, prompt], [SamplingParams(temperature=0, max_new_tokens=8)] * 2)
    assert greedy[0].token_ids == greedy[1].token_ids
    logits = policy.model(torch.tensor([prompt])).logits[0, -1]
    assert greedy[0].token_ids[0] == int(logits.argmax())
    # top_p tiny => always the most likely token, whatever the temperature
    nucleus = decode_batch(policy, [prompt] * 4, [SamplingParams(temperature=1.5, top_p=1e-6, max_new_tokens=1)] * 4)
    assert {g.token_ids[0] for g in nucleus} == {int(logits.argmax())}
    short = decode_batch(policy, [prompt], [SamplingParams(max_new_tokens=5)])[0]
    assert len(short.token_ids) <= 5 and (short.finish_reason == "length") == (len(short.token_ids) == 5 and
                                                                               short.token_ids[-1] not in policy.stop_token_ids)


def test_stop_string_ends_generation(policy):
    prompt = policy.encode(policy.render([{"role": "user", "content": "q"}]))
    free = decode_batch(policy, [prompt], [SamplingParams(temperature=0, max_new_tokens=20)])[0]
    stop = free.text[2:4]  # a string greedy decoding is known to produce
    cut = decode_batch(policy, [prompt], [SamplingParams(temperature=0, max_new_tokens=20, stop=(stop,))])[0]
    assert cut.finish_reason == "stop" and cut.text.endswith(stop) and len(cut.token_ids) < len(free.token_ids) + 1
    assert stop not in cut.text[:-len(stop)]


def test_on_step_hook_swaps_weights_and_stamps_versions(policy):
    prompt = policy.encode(policy.render([{"role": "user", "content": "q"}]))
    original = {k: v.clone() for k, v in policy.model.state_dict().items()}

    def swap(step: int) -> None:
        if step == 3:
            with policy.weights_lock, torch.no_grad():
                for p in policy.model.parameters():
                    p.add_(0.5)
                policy.version += 1

    base = policy.version
    try:
        g = decode_batch(policy, [prompt, prompt], [SamplingParams(max_new_tokens=6)] * 2, on_step=swap)[0]
        assert g.versions == [base] * 3 + [base + 1] * 3
        # Tokens after the swap carry logprobs from the new weights.
        after = compute_logprobs(policy.model, prompt + g.token_ids[:3], g.token_ids[3:])
        assert torch.allclose(torch.tensor(g.logprobs[3:]), after, atol=1e-3)
    finally:
        policy.model.load_state_dict(original)


def test_environment_tokens_keep_multi_turn_contiguity(policy):
    tools = chat_tools([{"type": "function", "name": "inc", "parameters": {"type": "object"}}])
    messages = [{"role": "user", "content": "count"}]
    prompt = policy.encode(policy.render(messages, tools))
    text = '<tool_call>{"name": "inc", "arguments": {"amount": 2}}</tool_call>'
    gen_ids = policy.encode(text + "<|im_end|>")
    gen = Generation(prompt_ids=prompt, token_ids=gen_ids, logprobs=[0.0] * len(gen_ids),
                     versions=[0] * len(gen_ids), text=text, finish_reason="stop")
    tool_msgs = [{"role": "tool", "content": json.dumps({"count": 3})}]
    env_ids = environment_tokens(policy, messages, tools, tool_msgs, gen)
    assistant = {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "inc", "arguments": {"amount": 2}}}]}
    expected = policy.encode(policy.render(messages + [assistant] + tool_msgs, tools))
    assert prompt + gen_ids + env_ids == expected
    # Without a generated end-of-turn token, the environment side supplies it.
    gen.token_ids, gen.finish_reason = policy.encode(text), "length"
    assert prompt + gen.token_ids + environment_tokens(policy, messages, tools, tool_msgs, gen) == expected
