"""math_python answering NeMo-Gym ns_tools rows: expected_answer, the stateful_python_code_exec
tool with NeMo-Skills' process_status, verifier_type, and the routing names."""

from __future__ import annotations

import pytest

from environments.math_python.verifier import MathPythonEnv, MathPythonRow
from servers.client import EnvClientError
from servers.wire import response_from_text

TOOL = {"type": "function", "name": "stateful_python_code_exec",
        "description": "Execute Python code in a stateful Jupyter notebook environment.",
        "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"],
                       "additionalProperties": False}, "strict": False}
ROW = {"id": 3, "question": "What is the square root of 144?", "expected_answer": "12",
       "agent_ref": {"type": "responses_api_agents", "name": "ns_tools_simple_agent"},
       "responses_create_params": {"input": [
           {"role": "system", "content": "Use the Python tool. Put your final answer in \\boxed{}."},
           {"role": "user", "content": "What is the square root of 144? Use Python to calculate this."}],
           "tools": [TOOL]}}


@pytest.fixture
async def client(serve_env):
    return await serve_env("math_python", call_timeout_s=4.0)


async def test_ns_tools_row_with_the_stateful_tool(client):
    c, _ = client
    session = await c.seed_session("math_python", ROW)
    _, out = await c.call_tool(session, "stateful_python_code_exec", {"code": "import math\nr = math.isqrt(144)"})
    assert out["process_status"] == "completed" and out["success"] is True
    _, out = await c.call_tool(session, "stateful_python_code_exec", {"code": "print(r)"})  # state persists
    assert out["stdout"] == "12\n" and out["process_status"] == "completed"
    _, out = await c.call_tool(session, "stateful_python_code_exec", {"code": "undefined_name"})
    assert out["process_status"] == "error" and "NameError" in out["stderr"]
    _, out = await c.call_tool(session, "stateful_python_code_exec", {"code": "while True:\n    pass"})
    assert out["process_status"] == "timeout"
    reply = await c.verify("math_python", ROW, response_from_text("\\boxed{12}"), session=session)
    assert reply["reward"] == 1.0 and reply["tool_calls"] == 4 and reply["expected_answer"] == "12"
    assert reply["question"] == ROW["question"]  # the row's own fields come back unchanged
    wrong = await c.verify("math_python", ROW, response_from_text("\\boxed{14}"))
    assert wrong["reward"] == 0.0


async def test_ns_tools_row_without_tools_is_plain_math(client):
    c, _ = client
    row = {**ROW, "responses_create_params": {"input": ROW["responses_create_params"]["input"]}}
    reply = await c.verify("math_python", row, response_from_text("sqrt(144) = \\boxed{12}"))
    assert reply["reward"] == 1.0


@pytest.mark.parametrize("change, message", [
    ({"verifier_type": "code_gen"}, "verifier_type"),
    ({"expected_answer": None}, "expected_result"),
    ({"expected_result": "13"}, "disagree"),
])
async def test_bad_ns_tools_rows_are_422(client, change, message):
    c, _ = client
    row = {k: v for k, v in {**ROW, **change}.items() if v is not None}
    with pytest.raises(EnvClientError) as err:
        await c.verify("math_python", row, response_from_text("\\boxed{12}"))
    assert err.value.status == 422 and message in str(err.value.body)


def test_gold_answer_fields():
    assert MathPythonRow.model_validate({**ROW, "verifier_type": "math_with_judge"}).gold == "12"
    assert MathPythonRow.model_validate({**ROW, "expected_result": 12}).gold == "12"  # same gold, a number


def test_routing_names():
    assert "ns_tools_simple_agent" in MathPythonEnv.agent_names
    assert "stateful_python_code_exec" in MathPythonEnv.tools()
    assert MathPythonEnv.describe()["agent_names"] == list(MathPythonEnv.agent_names)
