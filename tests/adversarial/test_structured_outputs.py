"""structured_outputs: NaN and Infinity must not satisfy a numeric schema in any format (they
compare false with every bound); unclosed reasoning and invisible characters are no answer."""

from __future__ import annotations

import json

import pytest

from servers.wire import response_from_text
from tests.adversarial.conftest import assert_refused, assert_scores

ENV = "structured_outputs"
SCHEMA = {"type": "object", "properties": {"age": {"type": "number", "minimum": 0, "maximum": 120},
                                           "name": {"type": "string"}}, "required": ["age", "name"]}
ROWS_SCHEMA = {"type": "array", "items": {"type": "object", "properties": {"age": {"type": "number", "minimum": 0},
                                                                              "name": {"type": "string"}}}}


def row(fmt: str, schema: dict = SCHEMA, **extra) -> dict:
    return {"responses_create_params": {"input": [{"role": "user", "content": "Describe Ada."}]},
            "schema_str": json.dumps(ROWS_SCHEMA if fmt == "csv" else schema), "schema_type": fmt, **extra}


NON_NUMBERS = {
    "json_nan": ("json", '{"age": NaN, "name": "Ada"}'),
    "json_infinity": ("json", '{"age": -Infinity, "name": "Ada"}'),
    "json_overflow": ("json", '{"age": -1e999, "name": "Ada"}'),
    "json_nan_fenced_after_prose": ("json", 'Here it is:\n```json\n{"age": NaN, "name": "Ada"}\n```'),
    "yaml_nan": ("yaml", "age: .nan\nname: Ada"),
    "yaml_nan_capitals": ("yaml", "age: .NaN\nname: Ada"),
    "yaml_negative_infinity": ("yaml", "age: -.inf\nname: Ada"),
    "toml_nan": ("toml", 'age = nan\nname = "Ada"'),
    "toml_signed_nan": ("toml", 'age = -nan\nname = "Ada"'),
    "toml_infinity": ("toml", 'age = -inf\nname = "Ada"'),
    "xml_nan": ("xml", "<person><age>NaN</age><name>Ada</name></person>"),
    "xml_infinity": ("xml", "<person><age>-Infinity</age><name>Ada</name></person>"),
    "xml_overflow": ("xml", "<person><age>-1e999</age><name>Ada</name></person>"),
    "csv_nan": ("csv", "age,name\nnan,Ada"),
    "csv_infinity": ("csv", "age,name\n-inf,Ada"),
}


@pytest.mark.parametrize("name", sorted(NON_NUMBERS))
async def test_attack_nan_or_infinity_for_a_bounded_number(scorer, name):
    fmt, text = NON_NUMBERS[name]
    env = await scorer(ENV)
    reply = await env.verify(row(fmt), text)
    assert_refused(reply, at_most=env.env.config.parse_weight)  # what any parsed wrong output gets, never more
    assert reply["schema_valid"] is False


@pytest.mark.parametrize("arguments", ['{"age": NaN, "name": "Ada"}', '{"age": -Infinity, "name": "Ada"}',
                                       '{"age": -1e400, "name": "Ada"}'])
async def test_attack_nan_in_tool_call_arguments(scorer, arguments):
    env = await scorer(ENV)
    response = {**response_from_text(""), "output": [{"type": "function_call", "name": "record", "call_id": "c1",
                                                      "arguments": arguments}]}
    reply = await env.verify(row("json", response_mode="tool_call", tool_name="record"), response)
    assert_refused(reply)


@pytest.mark.parametrize("text", ["<think>{\"age\": 36, \"name\": \"Ada\"}", "\u200b\ufeff", "<think>plan</think>\n<think>"])
async def test_attack_no_answer(scorer, text):
    env = await scorer(ENV)
    assert_refused(await env.verify(row("json"), text))


@pytest.mark.parametrize("fmt,text", [
    ("json", '{"age": 36, "name": "Ada"}'), ("json", '<think>draft</think>\n```json\n{"age": 36.5, "name": "Ada"}\n```'),
    ("yaml", "age: 36\nname: Ada"), ("toml", 'age = 36\nname = "Ada"'),
    ("xml", "<person><age>36</age><name>Ada</name></person>"), ("csv", "age,name\n36,Ada"),
    ("xml", "<person><age>1e2</age><name>Nan</name></person>"),  # "Nan" is a name, 1e2 a number
])
async def test_control_honest_output_scores(scorer, fmt, text):
    env = await scorer(ENV)
    assert_scores(await env.verify(row(fmt), text))


async def test_control_tool_call_arguments_score(scorer):
    env = await scorer(ENV)
    response = {**response_from_text(""), "output": [{"type": "function_call", "name": "record", "call_id": "c1",
                                                      "arguments": '{"age": 36, "name": "Ada"}'}]}
    assert_scores(await env.verify(row("json", response_mode="tool_call", tool_name="record"), response))


def alias_bomb(levels: int = 12) -> str:
    lines = ["a0: &a0 [1, 2, 3, 4, 5, 6, 7, 8, 9]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "\n".join(lines)


# Outputs built to crash or stall the parser: libyaml crashed the whole server process (SIGSEGV) on
# 100,000 nested brackets; a backtick wall and a brace wall were quadratic; a YAML alias bomb made
# the NaN walk visit 9^11 nodes. pytest's timeout is the hang guard.
HUGE = {
    "yaml_nested_brackets": ("yaml", "[" * 100_000),
    "yaml_nested_braces": ("yaml", "{" * 100_000),
    "toml_nested_brackets": ("toml", "a = " + "[" * 100_000),
    "json_backtick_wall": ("json", "`" * 150_000),
    "json_brace_wall": ("json", "{" * 150_000),
    "json_key_wall": ("json", '{"' * 100_000),
    "json_deep_objects": ("json", '{"a":' * 50_000),
    "yaml_backtick_wall": ("yaml", "`" * 150_000),
    "yaml_alias_bomb": ("yaml", alias_bomb()),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", sorted(HUGE))
async def test_attack_output_built_to_crash_or_stall_the_parser(scorer, name):
    fmt, text = HUGE[name]
    env = await scorer(ENV)
    assert_refused(await env.verify(row(fmt), text), at_most=env.env.config.parse_weight)
