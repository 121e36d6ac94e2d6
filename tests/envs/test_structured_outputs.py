"""structured_outputs: extraction, formats, OpenAPI subset, tool calls, weights, schema cache."""

from __future__ import annotations

import json

import pytest

from environments.structured_outputs.parsing import ParseFailure, parse_json, parse_text
from environments.structured_outputs.schema import InvalidSchema, compile_schema
from environments.structured_outputs.verifier import StructuredOutputs, StructuredOutputsConfig, StructuredOutputsRow
from servers.wire import ResponseObject, response_from_text

SCHEMA = json.dumps({"type": "object", "properties": {"n": {"type": "integer"}, "s": {"type": "string", "nullable": True}}})


def test_json_is_found_after_reasoning_and_in_fences_last_wins():
    assert parse_json('thinking {"n": 1} then {"n": 2, "inner": {"x": 1}} done') == {"n": 2, "inner": {"x": 1}}
    assert parse_json('```json\n{"n": 1}\n```\nand\n```\n{"n": 3}\n```') == {"n": 3}
    assert parse_json("[1, 2]") == [1, 2]
    with pytest.raises(ParseFailure):
        parse_json("no data {here")


@pytest.mark.parametrize("fmt, text, expected", [
    ("yaml", "```yaml\nwhen: 2024-01-02\nn: 3\n```", {"when": "2024-01-02", "n": 3}),
    ("toml", 'when = 2024-01-02\nn = 3', {"when": "2024-01-02", "n": 3}),
    ("xml", "<r><n>3</n></r>", {"r": {"n": "3"}}),
    ("csv", "a,b\n1,x\n", [{"a": "1", "b": "x"}]),
])
def test_text_formats_parse(fmt, text, expected):
    assert parse_text(fmt, text) == expected


def test_schema_compiles_once_and_rejects_bad_schemas():
    compile_schema.cache_clear()
    first = compile_schema(SCHEMA, True)
    assert compile_schema(SCHEMA, True) is first and compile_schema.cache_info().hits == 1
    assert first.first_error({"n": 1, "s": None}) is None  # nullable honoured
    assert "required" in first.first_error({"n": 1})  # strict_objects: every property required
    assert compile_schema(SCHEMA, False).first_error({"n": 1}) is None
    for bad in ("{", "[1]", json.dumps({"type": "strng"})):
        with pytest.raises(InvalidSchema):
            compile_schema(bad, True)


def _row(**fields):
    return StructuredOutputsRow.model_validate({"responses_create_params": {"input": "x"}, "schema_str": SCHEMA,
                                                **fields})


def _env(**cfg):
    return StructuredOutputs(StructuredOutputsConfig(**cfg))


async def test_partial_credit_weights_and_components():
    env = _env(parse_weight=0.25, schema_weight=0.75)
    bad = await env.verify(_row(), ResponseObject.model_validate(response_from_text('{"n": "one", "s": null}')), None)
    assert bad.reward == 0.25 and bad.components == {"parse": 0.25, "schema": 0.0}
    assert bad.extras["error_type"] == "validation_error" and "n" in bad.extras["error_message"]
    good = await env.verify(_row(), ResponseObject.model_validate(response_from_text('<think>{}</think>{"n": 1, "s": "a"}')), None)
    assert good.reward == 1.0 and good.components == {"parse": 0.25, "schema": 0.75}
    with pytest.raises(ValueError):
        StructuredOutputsConfig(parse_weight=0.5, schema_weight=0.6)


async def test_tool_call_payload_is_unwrapped_and_last_matching_call_counts():
    row = _row(response_mode="tool_call", tool_name="submit", tool_payload_key="result")
    response = response_from_text("")
    response["output"] = [
        {"type": "function_call", "name": "submit", "arguments": json.dumps({"result": {"n": "bad"}}), "call_id": "1"},
        {"type": "function_call", "name": "other", "arguments": "{}", "call_id": "2"},
        {"type": "function_call", "name": "submit", "arguments": json.dumps({"result": {"n": 2, "s": None}}), "call_id": "3"},
    ]
    verdict = await _env().verify(row, ResponseObject.model_validate(response), None)
    assert verdict.reward == 1.0, verdict.extras


def test_rows_with_broken_schema_or_format_are_rejected():
    with pytest.raises(ValueError, match="not valid JSON"):
        _row(schema_str="{oops")
    with pytest.raises(ValueError, match="schema_type"):
        _row(schema_type="protobuf")
    with pytest.raises(ValueError, match="tool_name"):
        _row(response_mode="tool_call")
    assert _row(schema_type="YAML").schema_type == "yaml"


def test_fences_finds_what_the_fence_regex_finds():
    """parsing.fences replaces a regex that is quadratic on a backtick wall; on random text they agree."""
    import random
    import re

    from environments.structured_outputs.parsing import fences

    fence = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)
    rng = random.Random(26)
    for _ in range(5000):
        text = "".join(rng.choice("`\nay \tj") for _ in range(rng.randint(0, 20)))
        assert fences(text) == fence.findall(text)
