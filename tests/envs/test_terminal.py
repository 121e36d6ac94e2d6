"""terminal over HTTP: setup, the exec tool, hidden checks, sandbox lifetime."""

from __future__ import annotations

import shlex

import pytest

from servers.client import EnvClientError
from servers.wire import response_from_text
from tests.sandbox_processes import sandbox_pids

TASK = {"responses_create_params": {"input": [{"role": "user", "content": "Sum the numbers in nums.txt into total.txt"}]},
        "setup_files": {"nums.txt": "3\n4\n5\n"}, "setup_commands": ["mkdir -p sub && echo hi > sub/f"],
        "check_command": "sh check.sh", "check_files": {"check.sh": 'test "$(cat total.txt)" = 12\n'}}
DONE = response_from_text("DONE")


@pytest.fixture
async def client(serve_env):
    return await serve_env("terminal", command_timeout_s=3.0)


async def test_solve_with_exec_and_check(client):
    c, _ = client
    session = await c.seed_session("terminal", TASK)
    _, out = await c.call_tool(session, "exec", {"command": "cat sub/f && ls"})
    assert out["exit_code"] == 0 and out["stdout"].startswith("hi\n") and "nums.txt" in out["stdout"]
    assert "check.sh" not in out["stdout"]  # the checker is written only at verify
    _, out = await c.call_tool(session, "exec", {"command": "awk '{s+=$1} END {print s}' nums.txt > total.txt"})
    assert out["exit_code"] == 0
    reply = await c.verify("terminal", TASK, DONE, session=session)
    assert reply["reward"] == 1.0 and reply["check_exit_code"] == 0 and reply["commands_run"] == 2


async def test_unsolved_and_planted_checker(client):
    c, _ = client
    session = await c.seed_session("terminal", TASK)
    _, out = await c.call_tool(session, "exec", {"command": "echo 'exit 0' > check.sh && echo 11 > total.txt"})
    reply = await c.verify("terminal", TASK, DONE, session=session)
    assert reply["reward"] == 0.0 and reply["check_exit_code"] == 1
    # No session at all: checked in a fresh setup, where nothing was done.
    reply = await c.verify("terminal", TASK, DONE)
    assert reply["reward"] == 0.0 and "_ng_failure_class" not in reply


async def test_exec_reports_errors_timeouts_and_truncation(client):
    c, _ = client
    session = await c.seed_session("terminal", TASK)
    _, out = await c.call_tool(session, "exec", {"command": "ls /nonexistent"})
    assert out["exit_code"] != 0 and out["stderr"]
    _, out = await c.call_tool(session, "exec", {"command": "sleep 30", "timeout_s": 1})
    assert out["timed_out"] is True and out["exit_code"] is None
    _, out = await c.call_tool(session, "exec", {"command": "yes | head -c 50000"})
    assert out["stdout_truncated"] is True and len(out["stdout"]) <= 10100
    _, out = await c.call_tool(session, "exec", {"command": "cat /etc/hostname 2>/dev/null; env | grep -c VERIGYM || true"})
    assert out["exit_code"] == 0
    status, out = await c.call_tool(session, "exec", {"command": ""})
    assert status == 422
    await c.verify("terminal", TASK, DONE, session=session)


async def test_broken_setup_is_rejected(client):
    c, _ = client
    with pytest.raises(EnvClientError) as err:
        await c.seed_session("terminal", dict(TASK, setup_commands=["exit 3"]))
    assert err.value.status == 422


async def test_sandbox_is_destroyed_on_verify(client):
    c, env = client
    session = await c.seed_session("terminal", TASK)
    live = set(env.backend._live)
    assert live
    await c.verify("terminal", TASK, DONE, session=session)
    assert not (live & env.backend._live)


@pytest.mark.parametrize("planted", ["mkdir check.sh", "mkdir -p check.sh/x && chmod 0 check.sh",
                                     "ln -s /etc/passwd check.sh", "ln -s /nonexistent check.sh"])
async def test_what_the_model_leaves_at_a_check_path_cannot_mask_the_rollout(client, planted):
    # A directory or symlink at check.sh used to make the upload raise (IsADirectoryError,
    # ELOOP): the reply became a masked verifier_error, a way for the model to dodge a zero.
    c, _ = client
    session = await c.seed_session("terminal", TASK)
    await c.call_tool(session, "exec", {"command": planted})
    reply = await c.verify("terminal", TASK, DONE, session=session)
    assert reply["reward"] == 0.0 and "_ng_failure_class" not in reply, reply
    session = await c.seed_session("terminal", TASK)
    await c.call_tool(session, "exec", {"command": f"echo 12 > total.txt && {planted}"})
    reply = await c.verify("terminal", TASK, DONE, session=session)
    assert reply["reward"] == 1.0, reply  # solved is still solved


@pytest.mark.parametrize("files", [{"setup_files": {"../x": "a"}}, {"check_files": {"/etc/x": "a"}},
                                   {"check_files": {"a/../../x": "a"}}, {"setup_files": {"": "a"}}])
async def test_file_paths_outside_the_workspace_are_a_bad_row(client, files):
    c, _ = client
    row = {**TASK, **files}
    with pytest.raises(EnvClientError) as err:
        await c.seed_session("terminal", row)
    assert err.value.status == 422  # was a 500 with sandbox_error
    with pytest.raises(EnvClientError) as err:
        await c.verify("terminal", row, DONE)
    assert err.value.status == 422


async def test_colliding_row_files_are_a_bad_row_not_a_sandbox_failure(client):
    c, _ = client
    row = {**TASK, "setup_files": {"a": "1", "a/b": "2"}}  # "a" is both a file and a directory
    with pytest.raises(EnvClientError) as err:
        await c.seed_session("terminal", row)
    assert err.value.status == 422
    row = {**TASK, "setup_files": {"x": "1"}, "check_files": {"x/check.sh": "exit 0\n"}}
    reply = await c.verify("terminal", row, DONE)  # no session: only the row's own setup ran
    assert reply["_ng_failure_class"] == "verifier_error" and "x/check.sh" in reply["_ng_failure_detail"], reply


async def test_background_job_is_ended_before_the_check(client):
    # A background job re-creates a directory at the check file's path in a loop: verify ends
    # every process of the session first, so the clean-up wins and the check file is written
    # (the job used to outlive the clean-up and block the upload).
    c, _ = client
    session = await c.seed_session("terminal", TASK)
    blocker = "import os\nwhile True:\n    try:\n        os.mkdir('check.sh')\n    except OSError:\n        pass\n"
    _, out = await c.call_tool(session, "exec", {"command": f"echo 12 > total.txt; python3 -c {shlex.quote(blocker)} &"})
    assert out["exit_code"] == 0, out
    _, out = await c.call_tool(session, "exec", {"command": "until [ -d check.sh ]; do sleep 0.05; done"})
    assert out["exit_code"] == 0, out  # the blocker runs
    reply = await c.verify("terminal", TASK, DONE, session=session)
    assert reply["reward"] == 1.0 and reply["check_exit_code"] == 0 and reply["commands_run"] == 2, reply


async def test_commands_the_shell_cannot_take_are_rejected_as_arguments(client):
    c, _ = client
    session = await c.seed_session("terminal", TASK)
    for command in ("echo a\x00b", "x" * 200_000):  # NUL: ValueError; 200 KB: E2BIG blamed on the sandbox
        status, out = await c.call_tool(session, "exec", {"command": command})
        assert status == 422 and "command" in str(out["detail"]), out
    await c.verify("terminal", TASK, DONE, session=session)


async def test_one_shell_per_session_keeps_cwd_variables_and_jobs(client):
    c, env = client
    session = await c.seed_session("terminal", TASK)
    _, out = await c.call_tool(session, "exec", {"command": "export GREETING=hey; sleep 60 &"})
    assert out["exit_code"] == 0
    _, out = await c.call_tool(session, "exec", {"command": "cd sub; LEVEL=2"})
    _, out = await c.call_tool(session, "exec", {"command": "pwd; echo $GREETING $LEVEL; cat"})  # cat: stdin is empty
    assert out == {"exit_code": 0, "stdout": "/workspace/sub\nhey 2\n", "stderr": "",
                   "stdout_truncated": False, "stderr_truncated": False, "timed_out": False}
    _, out = await c.call_tool(session, "exec", {"command": "if then"})  # a syntax error does not end the shell
    assert out["exit_code"] == 2 and "Syntax error" in out["stderr"]
    _, out = await c.call_tool(session, "exec", {"command": "pwd"})
    assert out["stdout"] == "/workspace/sub\n"
    _, out = await c.call_tool(session, "exec", {"command": "exit 7"})
    assert out["exit_code"] == 7 and "new shell" in out["note"]
    _, out = await c.call_tool(session, "exec", {"command": "pwd; echo \"[$LEVEL]\""})
    assert out["stdout"] == "/workspace\n[]\n"
    uid = next(iter(env.backend._live)).uid
    assert sandbox_pids(uid)
    reply = await c.verify("terminal", TASK, DONE, session=session)
    assert reply["reward"] == 0.0
    assert not sandbox_pids(uid)  # the shell and its background sleep died with the session


async def test_timeout_and_flood_restart_the_shell(client):
    c, env = client
    session = await c.seed_session("terminal", TASK)
    await c.call_tool(session, "exec", {"command": "cd sub"})
    _, out = await c.call_tool(session, "exec", {"command": "echo started; sleep 30", "timeout_s": 1})
    assert out["timed_out"] is True and out["exit_code"] is None and out["stdout"] == "started\n"
    assert out["killed"] == "timeout"
    _, out = await c.call_tool(session, "exec", {"command": "pwd"})
    assert out["stdout"] == "/workspace\n"
    _, out = await c.call_tool(session, "exec", {"command": "yes"})  # never ends: the output cap stops it
    assert out["killed"] == "output_limit" and out["stdout_truncated"] is True
    _, out = await c.call_tool(session, "exec", {"command": "echo ok"})
    assert out["stdout"] == "ok\n" and out["exit_code"] == 0
    await c.verify("terminal", TASK, DONE, session=session)


async def test_fresh_shell_mode_still_available(serve_env):
    c, _ = await serve_env("terminal", command_timeout_s=3.0, persistent_shell=False)
    session = await c.seed_session("terminal", TASK)
    await c.call_tool(session, "exec", {"command": "cd sub"})
    _, out = await c.call_tool(session, "exec", {"command": "pwd"})
    assert out["stdout"] == "/workspace\n"  # each command in its own sh -c
    await c.verify("terminal", TASK, DONE, session=session)
