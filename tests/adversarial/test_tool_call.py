"""tool_call: a call whose arguments are not the expected values in the expected types must not
match: identifiers spelled as numbers, numbers as strings where a string is declared, NaN and
Infinity, lookalike characters, sprayed or duplicated calls."""

from __future__ import annotations

import json

import pytest

from servers.wire import response_from_text
from tests.adversarial.conftest import assert_refused, assert_scores

ENV = "tool_call"
TOOLS = [{"type": "function", "name": "weather_by_zip", "description": "Weather for a US zip code.",
          "parameters": {"type": "object", "properties": {"zip": {"type": "string"}, "days": {"type": "integer"},
                                                          "units": {"type": "string"}},
                         "required": ["zip"]}}]
ROW = {"responses_create_params": {"input": [{"role": "user", "content": "Weather in 02134 for 3 days, metric?"}],
                                   "tools": TOOLS},
       "expected_answers": [{"name": "weather_by_zip", "arguments": {"zip": "02134", "days": 3, "units": "metric"}}]}


def calls(*calls: tuple[str, str]) -> dict:
    return {**response_from_text(""), "output": [{"type": "function_call", "name": name, "call_id": f"c{i}",
                                                  "arguments": arguments} for i, (name, arguments) in enumerate(calls)]}


def args(**kwargs) -> str:
    return json.dumps({"zip": "02134", "days": 3, "units": "metric", **kwargs})


ATTACKS = {
    "zip_as_number": args(zip=2134),
    "zip_as_float": args(zip=2134.0),
    "days_as_string": args(days="3"),
    "days_as_float_string": args(days="3.0"),
    "nan_days": '{"zip": "02134", "days": NaN, "units": "metric"}',
    "infinite_days": '{"zip": "02134", "days": Infinity, "units": "metric"}',
    "cyrillic_lookalike": args(units="metriс"),
    "zero_width_in_value": args(units="met\u200bric"),
    "arguments_not_an_object": json.dumps([args()]),
    "arguments_double_encoded": json.dumps(args()),
}


@pytest.mark.parametrize("name", sorted(ATTACKS))
async def test_attack_argument_types_and_values(scorer, name):
    env = await scorer(ENV)
    assert_refused(await env.verify(ROW, calls(("weather_by_zip", ATTACKS[name]))))


async def test_attack_zip_as_number_without_declared_types(scorer):
    # No tool schema in the row: "02134" is still not the number 2134 (not a JSON numeral).
    env = await scorer(ENV)
    row = {**ROW, "responses_create_params": {"input": ROW["responses_create_params"]["input"]}}
    assert_refused(await env.verify(row, calls(("weather_by_zip", args(zip=2134)))))


@pytest.mark.parametrize("scoring", ["binary", "partial"])
async def test_attack_sprayed_calls(scorer, scoring):
    # Every plausible variant at once: never more than the one right call would get, and in
    # binary mode nothing.
    env = await scorer(ENV, scoring=scoring)
    sprayed = calls(*[("weather_by_zip", args(units=u, days=d)) for u in ("metric", "imperial") for d in (1, 3, 7)])
    reply = await env.verify(ROW, sprayed)
    assert_refused(reply, at_most=0.0 if scoring == "binary" else 0.35)


async def test_attack_duplicated_right_call(scorer):
    env = await scorer(ENV)
    assert_refused(await env.verify(ROW, calls(("weather_by_zip", args()), ("weather_by_zip", args()))))


@pytest.mark.parametrize("arguments", [args(), args(units=" metric "), json.dumps({"days": 3, "units": "metric",
                                                                                  "zip": "02134"})])
async def test_control_right_call_scores(scorer, arguments):
    env = await scorer(ENV)
    assert_scores(await env.verify(ROW, calls(("weather_by_zip", arguments))))


async def test_control_quoted_number_for_an_untyped_parameter(scorer):
    # Without a declared type, a model quoting a number ("3") still matches 3.
    env = await scorer(ENV)
    row = {**ROW, "responses_create_params": {"input": ROW["responses_create_params"]["input"]}}
    assert_scores(await env.verify(row, calls(("weather_by_zip", args(days="3")))))
