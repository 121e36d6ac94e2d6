"""The sandboxed environments where users deploy them (issue 13): real ``envs serve``
processes, over HTTP, started (a) from a venv under /tmp, (b) under ``prlimit --nproc=512
--nofile=1024``, (c) as an unprivileged uid with its own HOME. In each, a correct answer
scores 1 and a wrong one 0 in code, math_python and terminal, ``/info`` reports the
sandbox's interpreter, inherited limits and canary, and the security suite passes.

Before the fix, (a) failed every code verification ("setpriv: failed to execute
/tmp/.../venv/bin/python3: No such file or directory": the sandbox's private /tmp hid the
venv) and (b) every one ("prlimit: failed to set the NPROC resource limit": the zygote
asked for 4,096 processes above the inherited 512), while /health said ok.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator

import pytest

from servers.client import EnvClient
from servers.wire import response_from_text

from tests.deploy.deployments import Deployment, limited, served, unprivileged, venv_under_tmp

PROMPT = {"input": [{"role": "user", "content": "deployment check"}]}


@contextlib.contextmanager
def deployment_of(kind: str, tmp: Path) -> Iterator[Deployment]:
    if kind == "venv_under_tmp":
        yield venv_under_tmp(tmp)
    elif kind == "prlimit":
        yield limited()
    else:
        with unprivileged(tmp) as dep:
            yield dep


@pytest.fixture(params=["venv_under_tmp", "prlimit", "unprivileged"])
def deployment(request, tmp_path) -> Iterator[Deployment]:
    with deployment_of(request.param, tmp_path) as dep:
        dep.name = request.param
        yield dep


def code_row(answer: str) -> dict:
    return {"responses_create_params": PROMPT,
            "verifier_metadata": {"unit_tests": {"inputs": ["2 3\n", "10 -4\n"], "outputs": ["5", "6"]}},
            "response": response_from_text(f"```python\n{answer}\n```")}


async def check_code(client: EnvClient) -> None:
    right = await client.verify("code", code_row("a, b = map(int, input().split())\nprint(a + b)"))
    wrong = await client.verify("code", code_row("print(5)"))
    assert "_ng_failure_class" not in right, right.get("_ng_failure_detail")
    assert "_ng_failure_class" not in wrong, wrong.get("_ng_failure_detail")
    assert (right["reward"], wrong["reward"]) == (1.0, 0.0), (right["verdicts"], wrong["verdicts"])
    assert wrong["verdicts"] == ["AC", "WA"]


async def check_math_python(client: EnvClient) -> None:
    row = {"responses_create_params": PROMPT, "expected_result": "42"}
    session = await client.seed_session("math_python", row)
    status, cell = await client.call_tool(session, "execute_python", {"code": "import math\nprint(6 * 7)"})
    assert status == 200 and cell.get("success") and cell["stdout"].strip() == "42", cell
    right = await client.verify("math_python", row, response_from_text("It is \\boxed{42}."), session=session)
    session = await client.seed_session("math_python", row)
    wrong = await client.verify("math_python", row, response_from_text("It is \\boxed{41}."), session=session)
    assert "_ng_failure_class" not in right and "_ng_failure_class" not in wrong, (right, wrong)
    assert (right["reward"], wrong["reward"]) == (1.0, 0.0)


async def check_terminal(client: EnvClient) -> None:
    row = {"responses_create_params": PROMPT, "check_command": "grep -qx 'hello world' hello.txt"}
    session = await client.seed_session("terminal", row)
    status, out = await client.call_tool(session, "exec", {"command": "echo hello world > hello.txt && echo done"})
    assert status == 200 and out["exit_code"] == 0 and out["stdout"].strip() == "done", out
    right = await client.verify("terminal", row, response_from_text("DONE"), session=session)
    session = await client.seed_session("terminal", row)
    await client.call_tool(session, "exec", {"command": "echo hello > hello.txt"})
    wrong = await client.verify("terminal", row, response_from_text("DONE"), session=session)
    assert "_ng_failure_class" not in right and "_ng_failure_class" not in wrong, (right, wrong)
    assert (right["reward"], wrong["reward"]) == (1.0, 0.0)


async def test_sandboxed_environments_score_right_and_wrong(deployment: Deployment):
    with served(deployment, "code", "math_python", "terminal") as urls:
        async with EnvClient(urls, retries=0, timeout_s=120) as client:
            await check_code(client)
            await check_math_python(client)
            await check_terminal(client)
            for name in urls:
                status, info = await client.get(name, "/info")
                sandbox = info["sandbox"]
                assert status == 200 and sandbox["canary"]["ok"], sandbox
                assert "fatal" not in sandbox
                assert sandbox["effective_limits"]["max_processes"] >= 1
                if deployment.name == "venv_under_tmp":
                    # The venv's own interpreter, at its resolved path, bound where the sandbox sees it.
                    assert sandbox["interpreter"]["executable"] == os.path.realpath(
                        os.path.dirname(deployment.python)) + "/python3"
                    assert any(root.startswith("/tmp/") for root in sandbox["interpreter"]["bound_read_only"])
                if deployment.name == "prlimit":
                    hard = sandbox["inherited_hard_limits"]
                    assert (hard["nproc"], hard["nofile"]) == (512, 1024)
                    assert sandbox["effective_limits"]["max_open_files"] <= 1024
                if deployment.name == "unprivileged":
                    assert sandbox["mode"].startswith("unprivileged")


def test_security_suite_passes(deployment: Deployment):
    """tests/security (hostile programs through the code server) as this deployment runs it."""
    result = deployment.run("-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/security", timeout=900)
    assert result.returncode == 0, f"{deployment.name}:\n{result.stdout[-4000:]}\n{result.stderr[-2000:]}"
