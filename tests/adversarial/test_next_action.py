"""next_action: NeMo-Gym's single_step rules pay for a spray of parallel calls (an expected single
call is met if any call matches) and for a keyword-stuffed query (word overlap >= 0.1). By default
both are refused; nemo_gym_parity keeps NeMo-Gym's rules."""

from __future__ import annotations

import json

import pytest

from servers.wire import response_from_text
from tests.adversarial.conftest import assert_refused, assert_scores

ENV = "next_action"
SEARCH = {"type": "function_call", "name": "web_search", "arguments": json.dumps({"query": "weather in paris tomorrow"})}
SHELL = {"type": "function_call", "name": "exec_command", "arguments": json.dumps({"cmd": "pytest tests/test_io.py"})}


def row(expected: dict, agent: str = "single_step_tool_use_with_argument_comparison_agent") -> dict:
    return {"responses_create_params": {"input": [{"role": "user", "content": "What will the weather be in Paris?"}]},
            "expected_action": expected, "agent_ref": {"type": "responses_api_agents", "name": agent}}


def calls(*items: tuple[str, dict]) -> dict:
    return {**response_from_text(""), "output": [{"type": "function_call", "name": name, "call_id": f"c{i}",
                                                  "arguments": json.dumps(arguments)} for i, (name, arguments) in enumerate(items)]}


STUFFED = ("weather forecast paris france tomorrow today week rain sun temperature humidity wind news live "
           "radar hourly map europe travel climate outlook")
SPRAYS = {
    "query_variants": [("web_search", {"query": q}) for q in ("paris", "weather", "paris weather", "forecast france",
                                                              "weather in paris tomorrow", "tomorrow")],
    "one_call_per_tool": [("web_search", {"query": "weather in paris tomorrow"}), ("open_url", {"url": "x"}),
                          ("exec_command", {"cmd": "ls"}), ("read_file", {"path": "a"})],
    "shell_variants": [("exec_command", {"cmd": c}) for c in ("pytest", "pytest tests", "pytest tests/test_io.py",
                                                               "python -m pytest", "make test")],
}


@pytest.mark.parametrize("name", sorted(SPRAYS))
async def test_attack_sprayed_parallel_calls(scorer, name):
    env = await scorer(ENV)
    expected = SHELL if name == "shell_variants" else SEARCH
    assert_refused(await env.verify(row(expected), calls(*SPRAYS[name])))


@pytest.mark.parametrize("agent", ["single_step_tool_use_with_argument_comparison_agent",
                                   "toolcall_schema_single_step_tool_use_with_argument_comparison_agent"])
async def test_attack_keyword_stuffed_query(scorer, agent):
    env = await scorer(ENV)
    assert_refused(await env.verify(row(SEARCH, agent), calls(("web_search", {"query": STUFFED}))))


async def test_attack_stuffed_query_repeating_the_expected_words(scorer):
    env = await scorer(ENV)
    text = " ".join(["weather in paris tomorrow"] + ["forecast rain sun wind hourly radar map"] * 3)
    assert_refused(await env.verify(row(SEARCH), calls(("web_search", {"query": text}))))


async def test_attack_parallel_batch_spray_scores_below_the_answer(scorer):
    # parallel_tool_calls scores batches by F1: spraying can only lower it
    batch = {"type": "function_call_batch", "calls": [SEARCH]}
    env = await scorer(ENV)
    reply = await env.verify(row(batch, "parallel_tool_calls_single_step_tool_use_with_argument_comparison_agent"),
                             calls(*SPRAYS["query_variants"]))
    assert_refused(reply, at_most=0.3)


@pytest.mark.parametrize("query", ["weather in paris tomorrow", "paris weather tomorrow",
                                   "what will the weather be in paris tomorrow", "Weather in Paris tomorrow?"])
async def test_control_honest_queries(scorer, query):
    env = await scorer(ENV)
    assert_scores(await env.verify(row(SEARCH), calls(("web_search", {"query": query}))))


async def test_control_expected_call_with_one_call_to_another_tool(scorer):
    env = await scorer(ENV)
    assert_scores(await env.verify(row(SHELL), calls(("exec_command", {"cmd": "pytest tests/test_io.py"}),
                                                     ("read_file", {"path": "tests/test_io.py"}))))


async def test_nemo_gym_parity_pays_for_spray_and_stuffing(scorer):
    """Why the attacks above can fail: NeMo-Gym's documented single_step rules."""
    env = await scorer(ENV, nemo_gym_parity=True)
    assert (await env.verify(row(SEARCH), calls(*SPRAYS["query_variants"])))["reward"] == 1.0
    assert (await env.verify(row(SEARCH), calls(("web_search", {"query": STUFFED}))))["reward"] == 1.0
