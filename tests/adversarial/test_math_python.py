"""math_python: ``expected_code_contains`` is met only by code that ran — not by a call that never
executed (arguments not JSON, a tool that does not exist, no output recorded, an error), not by a
comment, not by the final message."""

from __future__ import annotations

import json

import pytest

from servers.wire import response_from_text, text_message
from tests.adversarial.conftest import assert_refused, assert_scores

ENV = "math_python"
ROW = {"responses_create_params": {"input": [{"role": "user", "content": "What is 2^10 + 1? Use Python."}]},
       "expected_result": "1025", "expected_code_contains": "2 ** 10"}
ANSWER = "So the answer is \\boxed{1025}."


def recorded(*calls: tuple[str, str, str | None]) -> dict:
    """A recorded rollout: (tool, raw arguments, output or None) per call, then the answer."""
    output: list[dict] = []
    for i, (name, arguments, result) in enumerate(calls):
        output.append({"type": "function_call", "name": name, "arguments": arguments, "call_id": f"c{i}"})
        if result is not None:
            output.append({"type": "function_call_output", "call_id": f"c{i}", "output": result})
    return {**response_from_text(""), "output": output + [text_message(ANSWER)]}


OK = json.dumps({"stdout": "1025\n", "stderr": "", "success": True})
GOOD_ARGS = json.dumps({"code": "print(2 ** 10 + 1)"})
NEVER_RAN = {
    "arguments_not_json": ("execute_python", "{code: print(2 ** 10 + 1)}", OK),
    "arguments_not_an_object": ("execute_python", json.dumps(["print(2 ** 10 + 1)"]), OK),
    "tool_that_does_not_exist": ("run_code", GOOD_ARGS, OK),
    "no_output_recorded": ("execute_python", GOOD_ARGS, None),
    "output_reports_an_error": ("execute_python", GOOD_ARGS, json.dumps({"success": False, "stderr": "boom"})),
    "ns_tools_timeout": ("stateful_python_code_exec", GOOD_ARGS, json.dumps({"process_status": "timeout"})),
    "only_in_a_comment": ("execute_python", json.dumps({"code": "# 2 ** 10\nprint(1025)"}), OK),
}


@pytest.mark.parametrize("name", sorted(NEVER_RAN))
async def test_attack_required_code_that_never_ran_recorded(scorer, name):
    env = await scorer(ENV)
    reply = await env.verify(ROW, recorded(NEVER_RAN[name]))
    assert_refused(reply)
    assert reply["code_requirement_met"] is False


async def test_attack_required_code_only_in_the_answer_text(scorer):
    env = await scorer(ENV)
    assert_refused(await env.verify(ROW, "I computed 2 ** 10 + 1 in my head. " + ANSWER))


async def test_attack_session_cells_that_failed_or_were_sent_as_calls(scorer):
    # With a session, only cells this server ran without an error count: a cell raising before the
    # work, and a call item in the response that was never sent to the tool, do not.
    env = await scorer(ENV, call_timeout_s=4.0)
    session = await env.seed(ROW)
    out = await env.tool("execute_python", {"code": "raise SystemError\n2 ** 10"}, session)
    assert out["success"] is False
    out = await env.tool("execute_python", {"code": "# 2 ** 10 would go here\nprint(1025)"}, session)
    assert out["success"] is True
    response = recorded(("execute_python", GOOD_ARGS, OK))  # claimed in the response, never sent
    assert_refused(await env.verify(ROW, response, session))


async def test_control_session_cell_that_ran(scorer):
    env = await scorer(ENV, call_timeout_s=4.0)
    session = await env.seed(ROW)
    out = await env.tool("execute_python", {"code": "print(2 ** 10 + 1)"}, session)
    assert out["success"] is True
    assert_scores(await env.verify(ROW, ANSWER, session))


@pytest.mark.parametrize("tool", ["execute_python", "stateful_python_code_exec"])
async def test_control_recorded_rollout_that_ran(scorer, tool):
    env = await scorer(ENV)
    assert_scores(await env.verify(ROW, recorded((tool, GOOD_ARGS, OK))))
