"""Tool calls the policy writes reach /verify as Responses-API ``function_call`` items.

The tiny policy's chat template (and Qwen/Nemotron's) has the model write Hermes
``<tool_call>{json}</tool_call>`` blocks. Left as message text, a correct call scores as text
(tool_call: 0.0); as ``function_call`` items — what NeMo-Gym's agents send — it scores 1.0.
Scored by the real tool_call server on loopback.
"""

from __future__ import annotations

import json
from pathlib import Path

from servers import registry
from servers.app import start_server
from servers.client import EnvClient
from trainer.responses import build_response, offers_tools, single_turn_response, turn_items

ROOT = Path(__file__).resolve().parents[2]


def _example_with_full_reward() -> dict:
    for line in (ROOT / "environments/tool_call/data/example.jsonl").read_text().splitlines():
        row = json.loads(line)
        if (row.get("_expected") or {}).get("reward") == 1.0 and row.get("expected_answers"):
            return {k: v for k, v in row.items() if k not in ("response", "_expected")}
    raise AssertionError("tool_call has no full-reward example row")


def _as_policy_writes_it(calls: list[dict]) -> str:
    return "".join(f"<tool_call>\n{json.dumps({'name': c['name'], 'arguments': c['arguments']})}\n</tool_call>"
                   for c in calls)


async def test_a_correct_tool_call_scores_full_reward_as_function_call_items():
    row = _example_with_full_reward()
    params = row["responses_create_params"]
    assert offers_tools(params)
    text = _as_policy_writes_it(row["expected_answers"])
    tokens = dict(prompt_ids=[1, 2], gen_ids=[3, 4], logprobs=[-0.1, -0.2], versions=[0, 0])
    response = single_turn_response(text, create_params=params, model="tiny", truncated=False, **tokens)
    calls = [it for it in response["output"] if it["type"] == "function_call"]
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == \
        [(c["name"], c["arguments"]) for c in row["expected_answers"]]
    assert response["output"][-1]["generation_token_ids"] == [3, 4]  # tokens recorded once, on the last item
    as_text = build_response(turn_items(text, parse_tools=False, **tokens), create_params=params, model="tiny",
                             input_tokens=2, output_tokens=2, incomplete=False)

    env = registry.instantiate("tool_call", overrides={"cpu_workers": 1})
    server = await start_server(env)
    try:
        async with EnvClient({"tool_call": server.url}) as client:
            scored = await client.verify("tool_call", row, response)
            scored_as_text = await client.verify("tool_call", row, as_text)
    finally:
        await server.stop(drain_timeout=5)
    assert scored["reward"] == 1.0
    assert scored_as_text["reward"] == 0.0


def test_rows_without_tools_keep_tool_call_text_as_text():
    params = {"input": "hi"}
    assert not offers_tools(params)
    response = single_turn_response('<tool_call>{"name": "x", "arguments": {}}</tool_call>', create_params=params,
                                    model="tiny", prompt_ids=[1], gen_ids=[2], logprobs=[0.0], versions=[0],
                                    truncated=False)
    assert [it["type"] for it in response["output"]] == ["message"]
