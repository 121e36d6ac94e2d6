"""terminal: a gaming policy controls the session's commands (files, processes, time in the
workspace); the check must not be steerable by anything it left behind. Each attack is scored
through the real server; the controls are honest sessions that must still score 1.
(README "Threat model" lists the classes.)"""

from __future__ import annotations

import os
import py_compile
import shlex
import sys
import tempfile

import pytest

from servers.wire import response_from_text
from tests.envs.conftest import serve_env, swe_tiny_image  # noqa: F401 - the fixtures (HTTP server; podman + images)

DONE = response_from_text("done")
PROMPT = {"input": [{"role": "user", "content": "Compute 6*7 from in.txt and write {\"v\": N} to out.json"}]}
# A Python checker, hidden from the model and written only at verify.
PY_TASK = {"responses_create_params": PROMPT, "setup_files": {"in.txt": "6 7\n"}, "check_command": "python3 check.py",
           "check_files": {"check.py": "import json, sys\nsys.exit(0 if json.load(open('out.json'))['v'] == 42 else 1)\n"}}
SH_TASK = {**PY_TASK, "check_command": "sh check.sh", "check_files": {"check.sh": "grep -q '\"v\": 42' out.json\n"}}
WRONG = 'echo \'{"v": 41}\' > out.json'
HONEST = 'set -- $(cat in.txt); echo "{\\"v\\": $(($1 * $2))}" > out.json'


@pytest.fixture
async def terminal(serve_env):  # noqa: F811
    c, _ = await serve_env("terminal", command_timeout_s=5.0, check_timeout_s=10.0)
    return c


async def play(c, task, *commands):
    session = await c.seed_session("terminal", task)
    for command in commands:
        status, out = await c.call_tool(session, "exec", {"command": command})
        assert status == 200, out
    return await c.verify("terminal", task, DONE, session=session)


def refused(reply) -> bool:
    """Scored 0 as the response's own failure, never a masked infrastructure failure."""
    return reply["reward"] == 0.0 and "_ng_failure_class" not in reply


# ---- processes that outlive the episode -------------------------------------------------
async def test_attack_background_job_rewrites_checker_after_upload(terminal):
    loop = "while :; do echo 'exit 0' > check.sh 2>/dev/null; done"
    reply = await play(terminal, SH_TASK, WRONG, f"sh -c {shlex.quote(loop)} >/dev/null 2>&1 &")
    assert refused(reply), reply


async def test_attack_detached_daemon_rewrites_checker(terminal):
    # setsid + nohup + a double fork: detached from the shell's job control.
    loop = "while :; do printf 'import sys\\nsys.exit(0)\\n' > check.py 2>/dev/null; sleep 0.01; done"
    daemon = f"( setsid nohup sh -c {shlex.quote(loop)} >/dev/null 2>&1 & ) ; sleep 0.2"
    reply = await play(terminal, PY_TASK, WRONG, daemon)
    assert refused(reply), reply


async def test_attack_background_job_in_per_command_mode(serve_env):  # noqa: F811
    c, _ = await serve_env("terminal", command_timeout_s=5.0, persistent_shell=False)
    loop = "while :; do echo 'exit 0' > check.sh 2>/dev/null; done"
    reply = await play(c, SH_TASK, WRONG, f"nohup sh -c {shlex.quote(loop)} >/dev/null 2>&1 &")
    assert refused(reply), reply


# ---- what the checker's interpreter and tools load from the workspace ---------------------
async def test_attack_workspace_json_shadows_the_standard_library(terminal):
    shim = "def load(f):\n    return {'v': 42}\n"
    reply = await play(terminal, PY_TASK, WRONG, f"printf %s {shlex.quote(shim)} > json.py")
    assert refused(reply), reply


async def test_attack_workspace_package_shadows_unittest(terminal):
    task = {**PY_TASK, "check_command": "python3 -m unittest -q test_check",
            "check_files": {"test_check.py": "import json, unittest\nclass T(unittest.TestCase):\n"
                                             "    def test(self):\n"
                                             "        self.assertEqual(json.load(open('out.json'))['v'], 42)\n"}}
    fake = "import sys\nclass TestCase: pass\ndef main(*a, **k):\n    sys.exit(0)\n"
    reply = await play(terminal, task, WRONG, "mkdir unittest",
                       f"printf %s {shlex.quote(fake)} > unittest/__init__.py",
                       "printf 'import sys\\nsys.exit(0)\\n' > unittest/__main__.py")
    assert refused(reply), reply


async def test_attack_usercustomize_in_home(terminal):
    # HOME of the session is the workspace: Python runs ~/.local/.../usercustomize.py at start.
    ver = f"{sys.version_info.major}.{sys.version_info.minor}"
    where = f".local/lib/python{ver}/site-packages"
    reply = await play(terminal, PY_TASK, WRONG, f"mkdir -p {where} && echo 'import os; os._exit(0)' > {where}/usercustomize.py")
    assert refused(reply), reply


async def test_attack_planted_bytecode_for_a_checker_helper(terminal):
    # An unchecked-hash .pyc is never compared with its source: Python would run it in place
    # of the helper the check files bring.
    task = {**PY_TASK, "check_files": {"check.py": "import sys, helper\nsys.exit(0 if helper.ok() else 1)\n",
                                       "helper.py": "import json\ndef ok():\n"
                                                    "    return json.load(open('out.json'))['v'] == 42\n"}}
    with tempfile.TemporaryDirectory() as tmp:
        src, out = os.path.join(tmp, "helper.py"), os.path.join(tmp, "helper.pyc")
        with open(src, "w") as fh:
            fh.write("def ok():\n    return True\n")
        py_compile.compile(src, cfile=out, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
        with open(out, "rb") as fh:
            pyc = fh.read().hex()
    name = f"__pycache__/helper.{sys.implementation.cache_tag}.pyc"
    reply = await play(terminal, task, WRONG, f"mkdir -p __pycache__ && echo {pyc} | xxd -r -p > {name} "
                                              f"|| python3 -c \"import sys; open('{name}','wb').write(bytes.fromhex('{pyc}'))\"")
    assert refused(reply), reply


async def test_attack_git_fsmonitor_rewrites_checker(terminal):
    # A check that runs git in the workspace reads the repository's config, which the model wrote.
    task = {**SH_TASK, "check_command": "git status --porcelain >/dev/null 2>&1; sh check.sh"}
    reply = await play(terminal, task, WRONG, "git init -q . && git config core.fsmonitor "
                                              "\"sh -c 'echo exit 0 > check.sh'\"")
    assert refused(reply), reply


# ---- what sits at the checker's path, and a check that never ends ---------------------------
@pytest.mark.parametrize("planted", ["mkfifo check.sh", "ln -s out.json check.sh",
                                     "python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('check.sh')\""])
async def test_attack_something_other_than_a_file_at_the_checker_path(terminal, planted):
    reply = await play(terminal, SH_TASK, WRONG, planted)
    assert refused(reply), reply
    assert reply["check_exit_code"] == 1  # the real checker ran (a FIFO used to hang the upload)


async def test_attack_check_that_hangs_scores_zero_not_a_masked_timeout(serve_env):  # noqa: F811
    c, _ = await serve_env("terminal", check_timeout_s=2.0)
    reply = await play(c, SH_TASK, "mkfifo out.json")  # grep blocks on a FIFO no one writes
    assert refused(reply) and reply["check_verdict"] == "timeout", reply


# ---- controls: honest sessions still score ---------------------------------------------------
async def test_control_shell_checker_scores(terminal):
    reply = await play(terminal, SH_TASK, HONEST)
    assert reply["reward"] == 1.0, reply


async def test_control_python_checker_scores_with_an_unrelated_background_job(terminal):
    reply = await play(terminal, PY_TASK, "sleep 300 >/dev/null 2>&1 &", HONEST)
    assert reply["reward"] == 1.0, reply


async def test_control_checker_imports_the_models_module_and_its_own_helper(terminal):
    # The guard puts installed modules first; modules that exist only in the workspace (the
    # model's solution, a check file's helper) are still found.
    task = {**PY_TASK, "check_files": {"check.py": "import sys, helper, solution\n"
                                                   "sys.exit(0 if helper.expect(solution.answer()) else 1)\n",
                                       "helper.py": "def expect(v):\n    return v == 42\n"}}
    reply = await play(terminal, task, "printf 'def answer():\\n    return 6 * 7\\n' > solution.py")
    assert reply["reward"] == 1.0, reply


async def test_control_unittest_checker_scores(terminal):
    task = {**PY_TASK, "check_command": "python3 -m unittest -q test_check",
            "check_files": {"test_check.py": "import json, unittest\nclass T(unittest.TestCase):\n"
                                             "    def test(self):\n"
                                             "        self.assertEqual(json.load(open('out.json'))['v'], 42)\n"}}
    reply = await play(terminal, task, HONEST)
    assert reply["reward"] == 1.0, reply


# ---- container backend: the session owns the container's whole filesystem ------------------
@pytest.fixture
async def terminal_in_container(serve_env, swe_tiny_image):  # noqa: F811 - the tiny build makes verigym-test too
    c, _ = await serve_env("terminal", command_timeout_s=10.0, sandbox_backend="container",
                           sandbox_options={"image": "verigym-test:latest"})
    return c


@pytest.mark.podman
async def test_attack_container_session_replaces_the_interpreter(terminal_in_container):
    # Root in its container, the model can overwrite /usr/bin/python3 (and /bin/sh, ld.so.preload):
    # the check runs in a fresh container of the row's setup with only the workspace copied.
    reply = await play(terminal_in_container, PY_TASK, WRONG, "printf '#!/bin/sh\\nexit 0\\n' > /usr/bin/python3")
    assert refused(reply) and reply["check_sandbox"] == "fresh", reply


@pytest.mark.podman
async def test_attack_container_background_job_rewrites_checker(terminal_in_container):
    loop = "while :; do echo 'exit 0' > check.sh 2>/dev/null; done"
    reply = await play(terminal_in_container, SH_TASK, WRONG, f"nohup sh -c {shlex.quote(loop)} >/dev/null 2>&1 &")
    assert refused(reply), reply


@pytest.mark.podman
async def test_control_container_session_scores_with_links_and_setup_outside_the_workspace(terminal_in_container):
    # The fresh check sandbox replays the row's setup (here a tool under /opt) and takes the
    # workspace as the model left it (directories, symlinks).
    task = {**PY_TASK, "setup_commands": ["mkdir -p /opt/calc && echo 42 > /opt/calc/expected"],
            "check_files": {"check.py": "import json, sys\nv = json.load(open('link.json'))['v']\n"
                                        "sys.exit(0 if v == int(open('/opt/calc/expected').read()) else 1)\n"}}
    reply = await play(terminal_in_container, task, HONEST, "mkdir -p deep/er && mv out.json deep/er/ && "
                                                            "ln -s deep/er/out.json link.json")
    assert reply["reward"] == 1.0 and reply["check_sandbox"] == "fresh", reply
