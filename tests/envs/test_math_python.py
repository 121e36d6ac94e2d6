"""math_python over HTTP: stateful cells, limits, sandbox lifetime, scoring like math."""

from __future__ import annotations

import pytest

from servers import registry
from servers.wire import response_from_text
from tests.sandbox_processes import sandbox_pids

ROW = {"responses_create_params": {"input": [{"role": "user", "content": "What is 2^10 + 1?"}]},
       "expected_result": "1025", "expected_code_contains": ""}


@pytest.fixture
async def client(serve_env):
    return await serve_env("math_python", call_timeout_s=4.0)


async def test_state_persists_and_answer_is_scored(client):
    c, env = client
    session = await c.seed_session("math_python", ROW)
    _, out = await c.call_tool(session, "execute_python", {"code": "base = 2 ** 10\ndef inc(v):\n    return v + 1"})
    assert out["success"] is True and out["stdout"] == ""
    _, out = await c.call_tool(session, "run_python", {"code": "print(inc(base))"})  # the alias shares the kernel
    assert out["stdout"] == "1025\n"
    _, out = await c.call_tool(session, "execute_python", {"code": "inc(base) * 2"})
    assert out["stdout"] == "2050\n"  # a final expression is echoed like a notebook
    reply = await c.verify("math_python", ROW, response_from_text("So the answer is \\boxed{1025}."), session=session)
    assert reply["reward"] == 1.0 and reply["tool_calls"] == 3 and reply["scored_by"] == "exact"
    wrong = await c.verify("math_python", ROW, response_from_text("\\boxed{1024}"))
    assert wrong["reward"] == 0.0


async def test_errors_and_timeouts_restart_the_kernel_but_keep_state(client):
    c, _ = client
    session = await c.seed_session("math_python", ROW)
    await c.call_tool(session, "execute_python", {"code": "kept = 7"})
    _, out = await c.call_tool(session, "execute_python", {"code": "1 / 0"})
    assert out["success"] is False and "ZeroDivisionError" in out["stderr"]
    _, out = await c.call_tool(session, "execute_python", {"code": "lost = 1\nwhile True:\n    pass"})
    assert out["timed_out"] is True and "restarted" in out["error"]
    _, out = await c.call_tool(session, "execute_python", {"code": "print(kept, 'lost' in globals())"})
    assert out["stdout"] == "7 False\n"
    _, out = await c.call_tool(session, "execute_python", {"code": "print('z' * 20000)"})
    assert out["truncated"] is True and len(out["stdout"]) < 9000
    await c.verify("math_python", ROW, response_from_text("\\boxed{1025}"), session=session)


async def test_cells_are_sandboxed(client, tmp_path, monkeypatch):
    c, _ = client
    secret = tmp_path / "secret.txt"
    secret.write_text("hostsecret")
    session = await c.seed_session("math_python", ROW)
    _, out = await c.call_tool(session, "execute_python", {"code": f"print(open({str(secret)!r}).read())"})
    assert out["success"] is False and "hostsecret" not in out["stdout"]
    _, out = await c.call_tool(session, "execute_python",
                               {"code": "import socket\ns = socket.socket()\ns.settimeout(1)\ns.connect(('1.1.1.1', 80))"})
    assert out["success"] is False
    await c.verify("math_python", ROW, response_from_text("\\boxed{1}"), session=session)


async def test_verify_destroys_the_session_sandbox(client):
    c, env = client
    session = await c.seed_session("math_python", ROW)
    await c.call_tool(session, "execute_python", {"code": "x = 1"})
    live = set(env.backend._live)
    assert live  # process backend bookkeeping: one sandbox for this session
    await c.verify("math_python", ROW, response_from_text("\\boxed{1025}"), session=session)
    assert not (live & env.backend._live)
    status, out = await c.call_tool(session, "execute_python", {"code": "x"})
    assert status == 410


async def test_expected_code_contains(client):
    c, _ = client
    row = dict(ROW, expected_code_contains="2 ** 10")
    session = await c.seed_session("math_python", row)
    await c.call_tool(session, "execute_python", {"code": "print(2 ** 10 + 1)"})
    ok = await c.verify("math_python", row, response_from_text("\\boxed{1025}"), session=session)
    assert ok["reward"] == 1.0 and ok["code_requirement_met"] is True
    miss = await c.verify("math_python", row, response_from_text("\\boxed{1025}"))
    assert miss["reward"] == 0.0 and miss["code_requirement_met"] is False


@pytest.mark.parametrize("poison", ["import os; os._exit(0)", "import os; os._exit(1)",
                                    "import atexit, os; atexit.register(os._exit, 5)"])
async def test_a_cell_that_ends_the_process_does_not_poison_later_cells(client, poison):
    # The kernel replays earlier cells before each new one. A cell that left via os._exit used
    # to be kept in that history, so every later call died in the replay before its own cell
    # ran: os._exit(0) made every later cell "succeed" with no output.
    c, _ = client
    session = await c.seed_session("math_python", ROW)
    await c.call_tool(session, "execute_python", {"code": "a = 1"})
    _, out = await c.call_tool(session, "execute_python", {"code": poison})
    if "atexit" not in poison:
        assert out["success"] is False and "ended the Python process" in out["error"]
    _, out = await c.call_tool(session, "execute_python", {"code": "b = a + 6"})
    assert out["success"] is True, out
    _, out = await c.call_tool(session, "execute_python", {"code": "print(b)"})
    assert out == {"stdout": "7\n", "stderr": "", "truncated": False, "success": True}
    await c.verify("math_python", ROW, response_from_text("\\boxed{1025}"), session=session)


async def test_one_persistent_kernel_per_session(client):
    # Not replay: a cell runs once, so its side effects (a counter, the clock) are not repeated.
    c, env = client
    session = await c.seed_session("math_python", ROW)
    _, out = await c.call_tool(session, "execute_python", {"code": "import os\nruns = [os.getpid()]\nprint(len(runs))"})
    assert out["stdout"] == "1\n"
    for _ in range(3):
        _, out = await c.call_tool(session, "execute_python", {"code": "runs.append(os.getpid()); print(len(runs), len(set(runs)))"})
    assert out["stdout"] == "4 1\n"  # every cell in the same process
    _, out = await c.call_tool(session, "execute_python", {"code": "input()"})  # no stdin to steal requests from
    assert out["success"] is False and "EOFError" in out["stderr"]
    uid = next(iter(env.backend._live)).uid
    assert len(sandbox_pids(uid)) >= 2  # the kernel (and its waiting pid 1) is up between calls
    await c.verify("math_python", ROW, response_from_text("\\boxed{1025}"), session=session)
    assert not sandbox_pids(uid)  # session close killed the kernel: nothing leaks


async def test_killed_kernel_is_replaced_and_state_replayed(client):
    c, env = client
    session = await c.seed_session("math_python", ROW)
    await c.call_tool(session, "execute_python", {"code": "kept = 7"})
    uid = next(iter(env.backend._live)).uid
    before = sandbox_pids(uid)
    _, out = await c.call_tool(session, "execute_python", {"code": "print('partial', flush=True)\nwhile True: pass"})
    assert out["timed_out"] is True and "kept" in out["error"] and out["stdout"] == "partial\n"
    _, out = await c.call_tool(session, "execute_python", {"code": "print(kept)"})
    assert out["stdout"] == "7\n"  # earlier state replayed into the new kernel
    assert not (before & sandbox_pids(uid))  # the old kernel's processes are gone, new ones run
    await c.verify("math_python", ROW, response_from_text("\\boxed{1025}"), session=session)


async def test_replay_mode_still_available(serve_env):
    c, _ = await serve_env("math_python", call_timeout_s=4.0, persistent_kernel=False)
    session = await c.seed_session("math_python", ROW)
    await c.call_tool(session, "execute_python", {"code": "v = 5"})
    _, out = await c.call_tool(session, "execute_python", {"code": "print(v * 2)"})
    assert out["stdout"] == "10\n"
    await c.verify("math_python", ROW, response_from_text("\\boxed{1025}"), session=session)


def test_unknown_extraction_rule_is_a_config_error():
    # Was list[str]: a typo was accepted and every verify then failed with a KeyError.
    from servers.registry import ConfigError
    with pytest.raises(ConfigError, match="extraction"):
        registry.instantiate("math_python", overrides={"extraction": ["boxd"]})


async def test_scores_like_math_including_math_verify_path(client):
    c, _ = client
    row = dict(ROW, expected_result="\\frac{1}{\\sqrt{2}}")  # a fractional power: math-verify, not the symbolic path
    reply = await c.verify("math_python", row, response_from_text("\\boxed{2^{-1/2}}"))
    assert reply["reward"] == 1.0 and reply["scored_by"] == "math_verify" and reply["library_reward"] == 1.0
