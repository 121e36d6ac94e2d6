"""swe_pivot: shell/path/editor normalisation and the reward components."""

from __future__ import annotations

import json

import pytest

from environments.agent_actions.arguments import compare_arguments
from environments.agent_actions.shell import canonical_command, commands_equivalent
from environments.swe_pivot.verifier import SwePivotConfig, SwePivotEnvironment, SwePivotRow
from servers.wire import ResponseObject


@pytest.mark.parametrize("a,b", [
    ("grep -rn 'def f' /w/proj", "grep -nr 'def f' /w/proj"),
    ("grep -rn 'def f' /w/proj", "grep -r -n \"def f\" /w/proj/"),
    ("grep -rn 'def f' /w/proj", "grep --recursive --line-number 'def f' /w/./proj"),
    ("grep -rn 'def f' /w/proj", "  grep   -rn  def\\ f /w/proj ;"),
    ("egrep -i 'a|b' x", "grep -E -i 'a|b' x"),
    ("head -n 5 f.py", "head -5 f.py"),
    ("head -n 5 f.py", "head --lines=5 f.py"),
    ("head -n 5 f.py", "head -n5 ./f.py"),
    ("ls -la /tmp/", "ls -al /tmp"),
    ("python -m pytest tests/test_a.py -q -x", "python3 -m pytest -xq tests//test_a.py"),
    ("cat a.py | grep -n foo", "cat ./a.py|grep -n foo"),
    ("sed -n '10,20p' src/m.py", "sed -n 10,20p src/m.py"),
    ("grep -rn x . 2>/dev/null", "grep -nr x ./ 2>/dev/null"),
])
def test_equivalent_commands(a, b):
    assert commands_equivalent(a, b), (canonical_command(a), canonical_command(b))


@pytest.mark.parametrize("a,b", [
    ("grep -rn 'def f' /w/proj", "grep -rn 'def g' /w/proj"),
    ("grep -rn 'def f' /w/proj", "grep -Rn 'def f' /w/proj"),  # -R follows symlinks: not merged
    ("grep -rn 'def f' /w/proj", "grep -rn 'def f' /w"),
    ("grep -rn x a b", "grep -rn x b a"),  # positional order kept
    ("pytest tests", "python -m pytest tests"),  # different sys.path
    ("sed -n 's/a/b/' f", "sed -n 's/a/b' f"),  # scripts are not paths
    ("cd /w && pytest", "cd /w || pytest"),
    ("find . -name '*.py' -type f", "find . -type f -name '*.py'"),  # unknown command: order kept
    ("echo 'a  b'", "echo 'a b'"),
])
def test_different_commands(a, b):
    assert not commands_equivalent(a, b)


def test_unbalanced_quotes_compare_raw():
    assert commands_equivalent("echo 'oops", "echo 'oops ")
    assert not commands_equivalent("echo 'oops", "echo oops")


def test_editor_arguments():
    want = {"command": "view", "path": "/w/p/m.py", "view_range": [40, 80]}
    assert compare_arguments("editor", want, {"command": "VIEW", "path": "/w/p//m.py/", "view_range": ["40", 80.0]}).exact
    cmp = compare_arguments("editor", want, {"command": "view", "path": "/w/p/m.py", "view_range": [40, 81], "x": 1})
    assert cmp.mismatched == ["view_range"] and cmp.extra == ["x"] and cmp.matched == ["command", "path"]
    assert cmp.fraction == pytest.approx(2 / 4)
    edit = {"command": "str_replace", "path": "a.py", "old_str": "  x = 1\n", "new_str": "  x = 2"}
    assert compare_arguments("editor", edit, {**edit, "old_str": "  x = 1  \r\n", "insert_line": None}).exact
    assert not compare_arguments("editor", edit, {**edit, "old_str": "x = 1"}).exact  # indentation matters


def _response(name, args):
    return ResponseObject.model_validate({"output": [
        {"type": "function_call", "name": name, "arguments": json.dumps(args), "call_id": "c"}]})


def _row(name, args):
    return SwePivotRow.model_validate({"responses_create_params": {"input": []},
                                       "expected_action": {"name": name, "arguments": json.dumps(args)}})


async def test_components_sum_and_fraction_mode():
    row = _row("execute_bash", {"command": "grep -rn x .", "timeout": 30})
    env = SwePivotEnvironment()
    full = await env.verify(row, _response("bash", {"command": "grep -n -r x ./", "timeout": "30"}), None)
    assert full.reward == 1.0 and full.components == {"tool_name": pytest.approx(0.2), "arguments": pytest.approx(0.8)}
    half = await env.verify(row, _response("execute_bash", {"command": "grep -rn y .", "timeout": 30}), None)
    assert half.reward == pytest.approx(0.2) and half.extras["argument_match"]["mismatched"] == ["command"]
    wrong = await env.verify(row, _response("str_replace_editor", {"command": "grep -rn x ."}), None)
    assert wrong.reward == 0.0 and wrong.extras["name_match"] is False
    frac = SwePivotEnvironment(SwePivotConfig(argument_scoring="fraction", name_weight=1, arguments_weight=1))
    part = await frac.verify(row, _response("execute_bash", {"command": "grep -rn y .", "timeout": 30}), None)
    assert part.reward == pytest.approx(0.5 + 0.5 * 0.5)
    for verdict in (full, half, wrong, part):
        verdict.check()  # components sum to reward


async def test_only_first_call_counts_and_text_calls():
    row = _row("execute_bash", {"command": "ls"})
    two = ResponseObject.model_validate({"output": [
        {"type": "function_call", "name": "execute_bash", "arguments": '{"command": "pwd"}'},
        {"type": "function_call", "name": "execute_bash", "arguments": '{"command": "ls"}'}]})
    verdict = await SwePivotEnvironment().verify(row, two, None)
    assert verdict.reward == pytest.approx(0.2) and verdict.extras["predicted_calls"] == 2
    text = ResponseObject.model_validate({"output": [{"type": "message", "role": "assistant", "content": [
        {"type": "output_text", "text": '<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>'}]}]})
    assert (await SwePivotEnvironment().verify(row, text, None)).reward == 1.0
    off = SwePivotEnvironment(SwePivotConfig(parse_text_tool_calls=False))
    assert (await off.verify(row, text, None)).reward == 0.0
