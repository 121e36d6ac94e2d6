"""Synthetic tool rows for the tool-hallucination DPO demonstration (CPU, tiny policy).

Each row offers one tool (``get_weather`` or ``get_time``; one tool keeps the byte-level prompt
short enough for a CPU run) and a prompt that asks for a call, e.g. "What's the weather in Oslo?" -> ``get_weather({"city": "Oslo"})``. Rows are
NeMo-Gym ``tool_call`` rows (``expected_answers``, routed by ``tool_call_simple_agent``), so
``driver rollout`` scores them on the real ``tool_call`` server.

The warm start teaches a flawed policy on purpose: of its targets, ``hallucinated_share`` call a
tool that does not exist (``fetch_weather`` / ``fetch_time``) and ``bad_arguments_share`` pass an
argument the schema forbids (``location`` instead of ``city``); the rest are correct. DPO on pairs
from that policy's own rollouts should then lower its hallucination rate.

    python -m trainer.dpo.synthetic_tools --rows 96 --seed 7 > blends/data/tool_hallucination.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from typing import Any

AGENT = "tool_call_simple_agent"
CITIES = ["Paris", "Oslo", "Lima", "Cairo", "Tokyo", "Quito", "Rome", "Delhi", "Seoul", "Accra", "Dakar", "Hanoi"]
_CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
         "additionalProperties": False}
TOOLS = {
    "get_weather": {"type": "function", "name": "get_weather", "description": "Weather now in a city.",
                    "parameters": _CITY, "strict": False},
    "get_time": {"type": "function", "name": "get_time", "description": "Local time in a city.",
                 "parameters": _CITY, "strict": False},
}
PHRASES = {
    "get_weather": ["What's the weather in {city}?", "Weather in {city} now?", "Is it raining in {city}?"],
    "get_time": ["What time is it in {city}?", "Local time in {city}?", "Clock in {city} now?"],
}
HALLUCINATED_NAME = {"get_weather": "fetch_weather", "get_time": "fetch_time"}


def tool_rows(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        tool = rng.choice(sorted(TOOLS))
        city = rng.choice(CITIES)
        rows.append({
            "responses_create_params": {"input": [{"role": "user", "content": rng.choice(PHRASES[tool]).format(city=city)}],
                                        "tools": [TOOLS[tool]]},
            "expected_answers": [{"name": tool, "arguments": {"city": city}}],
            "agent_ref": {"type": "responses_api_agents", "name": AGENT}, "uuid": f"tool-halluc-{seed}-{i:04d}",
        })
    return rows


def warm_start_target(row: dict[str, Any], rng: random.Random, hallucinated_share: float,
                      bad_arguments_share: float) -> dict[str, Any]:
    """The assistant message the flawed warm start teaches for ``row`` (drawn per example)."""
    gold = row["expected_answers"][0]
    name, args = gold["name"], dict(gold["arguments"])
    draw = rng.random()
    if draw < hallucinated_share:
        name = HALLUCINATED_NAME[name]
    elif draw < hallucinated_share + bad_arguments_share:
        args = {"location": args["city"]}
    return {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": name, "arguments": args}}]}


def warm_start_examples(policy: Any, rows: list[dict[str, Any]], *, copies: int, hallucinated_share: float,
                        bad_arguments_share: float, seed: int) -> list[tuple[list[int], list[int]]]:
    """``copies`` (prompt ids, target ids) per row, each target drawn independently, tokenised
    through the chat template exactly as DPO pairs are (trainer.dpo.preference_data)."""
    from trainer.dpo.preference_data import PreferencePair, tokenize_pair
    from trainer.responses import chat_tools, to_chat_messages

    rng = random.Random(seed)
    out = []
    for row in rows:
        params = row["responses_create_params"]
        context, tools = to_chat_messages(params), chat_tools(params["tools"])
        for _ in range(copies):
            target = warm_start_target(row, rng, hallucinated_share, bad_arguments_share)
            tok = tokenize_pair(policy, PreferencePair(context=context, chosen=target, rejected=target, tools=tools))
            out.append((tok.prompt_ids, tok.chosen_ids))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="write synthetic tool rows (JSONL) to stdout")
    p.add_argument("--rows", type=int, default=96)
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args(argv)
    for row in tool_rows(args.rows, args.seed):
        sys.stdout.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
