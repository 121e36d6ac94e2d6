"""swe_pivot: a gaming policy controls the response's tool calls (how many, names, argument text)
and its final message. Only the first call is scored against the reference action, and arguments
only when the name matches. Attacks try to match without making the reference call (sprayed
calls, lenient JSON, look-alike commands, values of another type); the controls are honest calls,
including the equivalent spellings the matcher is documented to accept."""

from __future__ import annotations

import json

import pytest

from servers.wire import response_from_text
from tests.adversarial.conftest import assert_refused, assert_scores

ENV = "swe_pivot"
PROMPT = {"input": [{"role": "user", "content": "Continue the task."}]}
BASH = {"responses_create_params": PROMPT,
        "expected_action": {"type": "function_call", "name": "execute_bash", "arguments": json.dumps({"command": "grep -rn foo src"})}}
EDIT = {"responses_create_params": PROMPT,
        "expected_action": {"type": "function_call", "name": "str_replace_editor",
                            "arguments": json.dumps({"command": "view", "path": "/repo/a.py", "view_range": [1, 20]})}}
OTHER = {"responses_create_params": PROMPT,
         "expected_action": {"type": "function_call", "name": "lookup", "arguments": json.dumps({"zip": "02134", "days": 3})}}
NAME_WEIGHT = 0.2  # config default: a right name alone earns this much


def calls(*items: tuple[str, str]) -> dict:
    return {**response_from_text(""), "output": [{"type": "function_call", "name": name, "call_id": f"c{i}",
                                                  "arguments": arguments} for i, (name, arguments) in enumerate(items)]}


def bash(command: str) -> tuple[str, str]:
    return ("execute_bash", json.dumps({"command": command}))


ATTACKS = {
    # more than one call: only the first counts
    "spray_reference_second": (BASH, calls(bash("ls"), bash("grep -rn foo src"))),
    "spray_many_variants": (BASH, calls(*(bash(c) for c in ("grep foo", "grep -r foo src", "grep -rn foo src")))),
    "text_tool_calls_sprayed": (BASH, response_from_text(
        '<tool_call>{"name": "execute_bash", "arguments": {"command": "ls"}}</tool_call>\n'
        '<tool_call>{"name": "execute_bash", "arguments": {"command": "grep -rn foo src"}}</tool_call>')),
    # commands that only look like the reference
    "reference_then_more": (BASH, calls(bash("grep -rn foo src; rm -rf src"))),
    "reference_in_a_comment": (BASH, calls(bash("ls # grep -rn foo src"))),
    "reference_as_an_argument": (BASH, calls(bash("echo grep -rn foo src"))),
    "other_pattern_same_flags": (BASH, calls(bash("grep -rn fo0 src"))),
    # arguments a lenient parser would take
    "python_dict_arguments": (BASH, calls(("execute_bash", "{'command': 'grep -rn foo src'}"))),
    "trailing_text_after_json": (BASH, calls(("execute_bash", '{"command": "grep -rn foo src"} and more'))),
    "double_encoded_json": (BASH, calls(("execute_bash", json.dumps(json.dumps({"command": "grep -rn foo src"}))))),
    "nan_view_range": (EDIT, calls(("str_replace_editor", '{"command": "view", "path": "/repo/a.py", "view_range": [NaN, 20]}'))),
    "view_range_as_text": (EDIT, calls(("str_replace_editor", json.dumps({"command": "view", "path": "/repo/a.py",
                                                                          "view_range": "[1, 20]"})))),
    "other_path": (EDIT, calls(("str_replace_editor", json.dumps({"command": "view", "path": "/repo/b.py", "view_range": [1, 20]})))),
    # values of another type
    "zip_as_number": (OTHER, calls(("lookup", json.dumps({"zip": 2134, "days": 3})))),
    "extra_arguments": (OTHER, calls(("lookup", json.dumps({"zip": "02134", "days": 3, "force": True})))),
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
async def test_attack_call_matches_without_being_the_reference(scorer, attack):
    row, response = ATTACKS[attack]
    env = await scorer(ENV)
    assert_refused(await env.verify(row, response), at_most=NAME_WEIGHT)  # the name may be right: no more than that


# ---- controls ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["grep -rn foo src", "grep -nr foo src", "grep -r -n foo src", "grep   -rn  'foo'  src/"])
async def test_control_equivalent_shell_spellings(scorer, command):
    env = await scorer(ENV)
    assert_scores(await env.verify(BASH, calls(("bash", json.dumps({"command": command})))))


async def test_control_editor_call_with_normalised_path_and_integers(scorer):
    env = await scorer(ENV)
    arguments = json.dumps({"command": "view", "path": "/repo/./a.py", "view_range": [1.0, 20], "security_risk": "LOW"})
    assert_scores(await env.verify(EDIT, calls(("str_replace_editor", arguments))))


async def test_control_text_tool_call(scorer):
    env = await scorer(ENV)
    text = '<tool_call>{"name": "lookup", "arguments": {"zip": "02134", "days": 3}}</tool_call>'
    assert_scores(await env.verify(OTHER, response_from_text(text)))
