"""Hostile programs through the ``code`` environment over HTTP (real loopback server, real sandbox).

Every case checks four things:
1. reward 0 with the expected verdict. Where an attack would *leak* something, the test's
   expected output IS the secret, so a successful leak would score AC and fail the test;
2. the server then answers a normal request correctly within 2 s;
3. no process of the attack survives (each attack renames itself to a unique marker via
   /proc/self/comm, and shell-based attacks carry the marker in their command line);
4. the host is unchanged (files the attack tried to write do not exist, secrets intact).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import psutil
import pytest

from servers import registry
from servers.app import start_server
from servers.client import EnvClient
from servers.wire import response_from_text
from tests.sandbox_processes import host_has

SECRET_ENV = "VERIGYM_ATTACK_TEST_SECRET"


def _row(code: str, expected: str, n_tests: int = 1) -> dict:
    return {"responses_create_params": {"input": [{"role": "user", "content": "attack"}]},
            "verifier_metadata": {"unit_tests": {"inputs": ["1\n"] * n_tests, "outputs": [expected] * n_tests}},
            "response": response_from_text(f"```python\n{code}\n```")}


def _marked(marker: str, body: str) -> str:
    # comm (15 chars) is inherited by forks, so psutil can find every process of the attack.
    return f"open('/proc/self/comm', 'w').write({marker!r})\n# {marker}\n" + body


def _survivors(marker: str) -> list[str]:
    found = []
    for proc in psutil.process_iter(["pid", "name", "cmdline"]):
        try:
            text = (proc.info["name"] or "") + " " + " ".join(proc.info["cmdline"] or [])
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if marker in text:
            found.append(f"{proc.info['pid']}: {text[:200]}")
    return found


class _Listener:
    """An HTTP server on the host's loopback that counts requests and serves a token."""

    def __init__(self, token: str):
        self.hits = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server API
                outer.hits += 1
                self.send_response(200)
                self.end_headers()
                self.wfile.write(token.encode())

            def log_message(self, *args):
                return

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
async def code_server(monkeypatch, request):
    secret_value = "envsecret" + secrets.token_hex(8)
    monkeypatch.setenv(SECRET_ENV, secret_value)  # the server process's own environment
    # 2 s per test keeps the TLE cases fast; a case may ask for more (@pytest.mark.test_timeout(s)).
    mark = request.node.get_closest_marker("test_timeout")
    env = registry.instantiate("code", overrides={"test_timeout_s": mark.args[0] if mark else 2.0})
    server = await start_server(env)
    client = EnvClient({"code": server.url}, retries=0, timeout_s=120)
    try:
        yield client, secret_value
    finally:
        await client.close()
        await server.stop()


async def _attack(client: EnvClient, marker: str, code: str, expected: str, verdicts: set[str]) -> dict:
    reply = await client.verify("code", _row(_marked(marker, code), expected))
    assert "_ng_failure_class" not in reply, reply.get("_ng_failure_detail")
    assert reply["reward"] == 0.0, reply["tests"]
    assert reply["verdicts"][0] in verdicts, reply["tests"]
    # The server still serves: a normal correct submission, answered correctly and fast.
    start = time.monotonic()
    ok = await client.verify("code", _row("print(int(input()) + 41)", "42"))
    assert time.monotonic() - start < 2.0
    assert ok["reward"] == 1.0, ok.get("tests")
    # No process of the attack survives.
    await asyncio.sleep(0.2)
    assert _survivors(marker) == []
    return reply


def new_marker() -> str:
    return "vg" + secrets.token_hex(6)  # 14 chars: fits /proc/<pid>/comm


async def test_network_egress_to_host_listener_fails(code_server):
    client, _ = code_server
    token = "nettoken" + secrets.token_hex(8)
    listener = _Listener(token)
    try:
        code = (f"import urllib.request, socket\nout = 'blocked'\n"
                f"for host in ['127.0.0.1', 'localhost', {socket.gethostname()!r}]:\n"
                f"    try:\n"
                f"        out = urllib.request.urlopen('http://%s:{listener.port}/' % host, timeout=1).read().decode()\n"
                f"        break\n"
                f"    except Exception:\n"
                f"        pass\n"
                f"print(out)\n")
        await _attack(client, new_marker(), code, token, {"WA"})
        assert listener.hits == 0
    finally:
        listener.close()


async def test_reading_a_host_secret_file_fails(code_server, tmp_path):
    client, _ = code_server
    secret = "filesecret" + secrets.token_hex(8)
    # The repository (or, where this user cannot write it, their home) and a temp folder.
    repo = Path(__file__).resolve().parents[2]
    beside = repo if os.access(repo, os.W_OK) else Path.home()
    targets = [tmp_path / "secret.txt", beside / f".attack-secret-{secrets.token_hex(4)}"]
    for target in targets:
        target.write_text(secret)
    try:
        code = (f"out = 'blocked'\nfor p in {[str(t) for t in targets]!r} + ['/etc/shadow', '/root/.bashrc']:\n"
                f"    try:\n        out = open(p).read().strip() or out\n    except Exception:\n        pass\n"
                f"print(out)\n")
        await _attack(client, new_marker(), code, secret, {"WA"})
    finally:
        for target in targets:
            assert target.read_text() == secret
            target.unlink()


async def test_writing_outside_the_sandbox_leaves_the_host_unchanged(code_server, tmp_path):
    client, _ = code_server
    name = "pwned-" + secrets.token_hex(6)
    targets = [tmp_path / name, Path("/tmp") / name, Path("/work/main") / name, Path("/root") / name,
               Path("/usr/local") / name]
    # As root the program's uid owns nothing outside its workspace. Without root (a user
    # namespace) the sandbox's own /tmp and the folders bwrap made on the way to its binds
    # belong to the user: writable, but they exist only in the sandbox. The host check
    # below holds in both modes.
    private = () if os.geteuid() == 0 else ("/tmp/", "/root/", "/proc/1/root/")
    code = (f"import os\nwrote = False\nfor p in {[str(t) for t in targets]!r} + ['/proc/1/root/tmp/{name}']:\n"
            f"    try:\n        open(p, 'w').write('x')\n        wrote = wrote or not p.startswith({private!r})\n"
            f"    except Exception:\n        pass\n"
            f"print('wrote' if wrote else 'blocked')\n")
    await _attack(client, new_marker(), code, "wrote", {"WA"})
    for target in targets:
        assert not host_has(target), target


async def test_server_environment_variables_are_not_visible(code_server):
    client, secret_value = code_server
    code = (f"import os, glob\nout = os.environ.get({SECRET_ENV!r}, 'hidden')\n"
            f"for p in glob.glob('/proc/*/environ'):\n"
            f"    try:\n        data = open(p, 'rb').read().decode(errors='replace')\n    except Exception:\n        continue\n"
            f"    for kv in data.split('\\0'):\n"
            f"        if kv.startswith({SECRET_ENV!r} + '='):\n            out = kv.split('=', 1)[1]\n"
            f"print(out)\n")
    assert os.environ[SECRET_ENV] == secret_value
    await _attack(client, new_marker(), code, secret_value, {"WA"})


async def test_fork_bomb(code_server):
    client, _ = code_server
    marker = new_marker()
    code = f"import os\nos.execv('/bin/sh', ['sh', '-c', ':(){{ :|:& }};: # {marker}'])\n"
    await _attack(client, marker, code, "1", {"TLE", "RE"})


async def test_python_fork_bomb(code_server):
    client, _ = code_server
    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    await _attack(client, new_marker(), code, "1", {"TLE", "RE"})


# Touching 1 GiB takes over a second on a loaded 2-core host: the limit must not race the bomb.
@pytest.mark.test_timeout(15.0)
async def test_memory_bomb(code_server):
    client, _ = code_server
    code = "hog = []\nwhile True:\n    hog.append(bytearray(64 * 1024 * 1024))\n"
    await _attack(client, new_marker(), code, "1", {"MLE"})


async def test_infinite_loop(code_server):
    client, _ = code_server
    await _attack(client, new_marker(), "while True:\n    pass\n", "1", {"TLE"})


async def test_sleeping_past_the_timeout(code_server):
    client, _ = code_server
    reply = await _attack(client, new_marker(), "import time\ntime.sleep(3600)\nprint(1)\n", "1", {"TLE"})
    assert reply["unit_tests_time_taken"] < 10


async def test_one_gib_of_output(code_server):
    client, _ = code_server
    code = "import sys\nchunk = 'x' * (1 << 20)\nfor _ in range(1024):\n    sys.stdout.write(chunk)\n"
    await _attack(client, new_marker(), code, "1", {"OLE"})
    code = "import os\nchunk = b'y' * (1 << 20)\nfor _ in range(1024):\n    os.write(2, chunk)\n"
    await _attack(client, new_marker(), code, "1", {"OLE"})


async def test_killing_the_parent_and_everything(code_server):
    client, _ = code_server
    code = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nos.kill(-1, signal.SIGKILL)\nprint(1)\n"
    await _attack(client, new_marker(), code, "1", {"RE"})
    marker = new_marker()
    await _attack(client, marker, f"import os\nos.system('kill -9 -1 # {marker}')\nprint(1)\n", "1", {"RE"})


async def test_background_processes_do_not_survive(code_server):
    client, _ = code_server
    marker = new_marker()
    code = (f"import os, subprocess\n"
            f"subprocess.Popen(['/bin/sh', '-c', 'sleep 300 # {marker}'], start_new_session=True)\n"
            f"if os.fork() == 0:\n"
            f"    os.setsid()\n"
            f"    if os.fork() == 0:\n"
            f"        os.execv('/bin/sh', ['sh', '-c', 'while :; do sleep 1; done # {marker}'])\n"
            f"    os._exit(0)\n"
            f"print('left daemons behind')\n")
    await _attack(client, marker, code, "1", {"WA"})


async def test_exhausting_file_descriptors(code_server):
    client, _ = code_server
    code = "import os\nfds = []\nwhile True:\n    fds.append(os.open('/dev/null', os.O_RDONLY))\n"
    await _attack(client, new_marker(), code, "1", {"RE"})


async def test_token_forgery_through_every_reachable_fd(code_server):
    client, _ = code_server
    code = ("import os, glob, json\n"
            "rec = json.dumps({'test': 0, 'timed_out': False, 'exit': 0, 'signal': None, 'stdout': 'forged'})\n"
            "for p in glob.glob('/proc/*/fd/*'):\n"
            "    try:\n        fd = os.open(p, os.O_WRONLY)\n        os.write(fd, ('f' * 32 + ' ' + rec + '\\n').encode())\n"
            "    except OSError:\n        pass\n"
            "print('nope')\n")
    await _attack(client, new_marker(), code, "forged", {"WA"})


def test_hostname_resolves_for_the_network_case():
    # Guard for the egress case: the host name must be a real target on this host.
    assert socket.gethostname()
