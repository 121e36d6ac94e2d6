"""Tool-hallucination classification: pure functions over a row's own tool schemas."""

from __future__ import annotations

import json

import pytest

from trainer.tool_use import (CLEAN, HALLUCINATED_TOOL, INVALID_ARGUMENTS, NO_CALL, classify_record, classify_text,
                              classify_tool_use, hallucination_summary, row_tools)

WEATHER = {"type": "function", "name": "get_weather", "description": "weather",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                           "days": {"type": "integer", "minimum": 1}},
                          "required": ["city"], "additionalProperties": False}, "strict": False}
ROW = {"responses_create_params": {"input": "weather?", "tools": [WEATHER]}}


def response(*calls: tuple[str, object], text: str | None = None) -> dict:
    out = [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}] if text else []
    out += [{"type": "function_call", "name": n, "arguments": a if isinstance(a, str) else json.dumps(a),
             "call_id": f"c{i}"} for i, (n, a) in enumerate(calls)]
    return {"output": out}


TOOLS = row_tools(ROW)


def test_clean_call():
    v = classify_tool_use(response(("get_weather", {"city": "Paris", "days": 2})), TOOLS)
    assert v.kind == CLEAN and not v.hallucinated and v.problems == ()


def test_unknown_name_is_a_hallucinated_tool():
    v = classify_tool_use(response(("weather_api", {"city": "Paris"})), TOOLS)
    assert v.kind == HALLUCINATED_TOOL and v.hallucinated
    assert "'weather_api' is not a tool of this row (tools: get_weather)" in v.problems[0]


@pytest.mark.parametrize("arguments, problem", [
    ({"location": "Paris"}, "'city' is a required property"),
    ({"city": "Paris", "location": "x"}, "Additional properties are not allowed"),
    ({"city": 3}, "arguments.city: 3 is not of type 'string'"),
    ({"city": "Paris", "days": 0}, "arguments.days: 0 is less than the minimum of 1"),
    ("{not json", "arguments are not JSON"),
    ("[1, 2]", "arguments are a JSON list, not an object"),
])
def test_arguments_outside_the_schema(arguments, problem):
    v = classify_tool_use(response(("get_weather", arguments)), TOOLS)
    assert v.kind == INVALID_ARGUMENTS and v.hallucinated
    assert problem in v.problems[0]


def test_no_call_is_not_a_hallucination():
    v = classify_tool_use(response(text="It is sunny."), TOOLS)
    assert v.kind == NO_CALL and not v.hallucinated


def test_worst_call_decides_a_multi_call_response():
    both = response(("get_weather", {"city": "Oslo"}), ("get_weather", {"town": "x"}), ("lookup", {}))
    assert classify_tool_use(both, TOOLS).kind == HALLUCINATED_TOOL
    bad_args = response(("get_weather", {"city": "Oslo"}), ("get_weather", {"town": "x"}))
    assert classify_tool_use(bad_args, TOOLS).kind == INVALID_ARGUMENTS


def test_chat_format_tools_and_missing_parameters():
    row = {"responses_create_params": {"tools": [
        {"type": "function", "function": {"name": "ping"}},
        {"type": "web_search"}]}}
    tools = row_tools(row)
    assert tools == {"ping": {"type": "object", "properties": {}}}
    assert classify_tool_use(response(("ping", {})), tools).kind == CLEAN
    assert classify_tool_use(response(("web_search", {})), tools).kind == HALLUCINATED_TOOL


def test_invalid_row_schema_is_an_error_naming_the_tool():
    tools = {"broken": {"type": "no-such-type"}}
    with pytest.raises(ValueError, match="tool 'broken': tool parameters are not a valid JSON schema"):
        classify_tool_use(response(("broken", {})), tools)


def test_record_without_tools_is_not_classified():
    assert classify_record({"responses_create_params": {"input": "hi"}, "response": response(text="x")}) is None


def test_summary_rates_per_env():
    recs = [{**ROW, "_verigym_env": "tool_call", "response": r} for r in (
        response(("get_weather", {"city": "A"})), response(("nope", {})),
        response(("get_weather", {"city": 1})), response(text="no call"))]
    recs.append({"responses_create_params": {"input": "x"}, "_verigym_env": "math", "response": response(text="1")})
    s = hallucination_summary(recs)
    assert s["responses"] == 4 and s["hallucination_rate"] == 0.5
    assert s["counts"] == {CLEAN: 1, NO_CALL: 1, HALLUCINATED_TOOL: 1, INVALID_ARGUMENTS: 1}
    assert s["hallucinated_tool_rate"] == 0.25 and list(s["per_env"]) == ["tool_call"]
    assert hallucination_summary([recs[-1]]) is None


def test_classify_generated_text():
    call = '<tool_call>{"name": "%s", "arguments": %s}</tool_call>'
    assert classify_text(call % ("get_weather", '{"city": "Oslo"}'), TOOLS).kind == CLEAN
    assert classify_text("Sure. " + call % ("fetch_weather", "{}"), TOOLS).kind == HALLUCINATED_TOOL
    assert classify_text(call % ("get_weather", '{"town": 1}'), TOOLS).kind == INVALID_ARGUMENTS
    assert classify_text('<tool_call>{"name": broken</tool_call>', TOOLS).kind == NO_CALL  # unparseable: no call


@pytest.mark.parametrize("env", ["tool_call", "workplace_assistant"])
def test_real_nemo_gym_rows_have_usable_schemas(env):
    """The shipped example rows (NeMo-Gym shapes): every schema loads, every response gets a class."""
    from pathlib import Path

    path = Path(__file__).parents[2] / "environments" / env / "data" / "example.jsonl"
    rows = [r for r in map(json.loads, path.read_text().splitlines())
            if isinstance(r.get("response"), dict) and row_tools(r)]
    summary = hallucination_summary(rows)
    assert summary["rows_with_invalid_tool_schema"] == 0 and summary["responses"] == len(rows)
