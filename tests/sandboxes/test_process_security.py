"""Hostile programs against the process backend: each must be contained, leave nothing
running, and leave the host (files, environment, the test process) untouched."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import uuid
from pathlib import Path

import psutil
import pytest

from sandboxes import Limits, ResourceVerdict
from tests.sandbox_processes import host_has, sandbox_pids, tmp_entries_of_binds

pytestmark = pytest.mark.bwrap


def _assert_nothing_left(sandbox) -> None:
    """Root: nothing runs as the sandbox's uid. Unprivileged: nothing of the sandboxes this test
    process started is left (tests/sandbox_processes.py)."""
    assert sandbox_pids(sandbox.uid) == set()


@pytest.fixture
def listener():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    hits: list[bytes] = []
    stop = threading.Event()

    def serve() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            hits.append(conn.recv(100))
            conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield srv.getsockname()[1], hits
    stop.set()
    t.join()
    srv.close()


async def test_no_network_egress(sandbox, listener):
    port, hits = listener
    code = (f"import socket\ns=socket.socket(); s.settimeout(2)\n"
            f"try:\n s.connect(('127.0.0.1', {port})); s.send(b'pwn'); print('CONNECTED')\n"
            f"except OSError as e: print('blocked', e)\n"
            "try:\n socket.create_connection(('1.1.1.1', 80), timeout=2); print('EGRESS')\n"
            "except OSError as e: print('blocked', e)\n")
    r = await sandbox.exec(["python3", "-c", code])
    assert r.ok, r.text("stderr")
    assert "CONNECTED" not in r.text() and "EGRESS" not in r.text()
    await asyncio.sleep(0.3)
    assert hits == []


async def test_host_secrets_invisible(sandbox, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET")
    root_secret = Path("/root") / f"verigym-secret-{uuid.uuid4().hex}"
    work_secret = Path("/work") / f"verigym-secret-{uuid.uuid4().hex}"
    created = []
    for p in (root_secret, work_secret):
        try:
            p.write_text("TOPSECRET")
            created.append(p)
        except OSError:
            pass
    try:
        paths = [str(secret), *map(str, created)]
        r = await sandbox.exec(["sh", "-c", 'for f in "$@"; do cat "$f"; done; ls /root /work /home 2>&1; '
                                'cat /etc/shadow', "sh", *paths])
        assert b"TOPSECRET" not in r.stdout + r.stderr
    finally:
        for p in created:
            p.unlink()


async def test_writes_do_not_reach_host(sandbox, tmp_path):
    marker = f"verigym-escape-{uuid.uuid4().hex}"
    r = await sandbox.exec(f"touch /tmp/{marker} {tmp_path}/{marker} /{marker} /usr/{marker} "
                           f"/root/.pyenv/{marker} /etc/{marker} 2>&1; echo done")
    assert r.text().strip().endswith("done")
    for p in (Path("/tmp") / marker, tmp_path / marker, Path("/") / marker, Path("/usr") / marker,
              Path("/root/.pyenv") / marker, Path("/etc") / marker):
        assert not host_has(p), p


async def test_server_environment_invisible(sandbox, monkeypatch):
    monkeypatch.setenv("VERIGYM_TEST_SECRET", "hunter2")
    r = await sandbox.exec(["sh", "-c", "env; cat /proc/1/environ"])
    assert b"hunter2" not in r.stdout and b"VERIGYM_TEST_SECRET" not in r.stdout


async def test_spec_and_exec_env_are_visible(process_backend):
    from sandboxes import SandboxSpec
    async with await process_backend.create(SandboxSpec(env={"A": "1"})) as sb:
        r = await sb.exec("echo $A$B", env={"B": "2"})
        assert r.text() == "12\n"


async def test_kill_all_inside_does_not_hurt_host(sandbox):
    r = await sandbox.exec("kill -9 -1; kill -9 1; echo still-here")
    assert os.getpid() and psutil.Process().is_running()
    r2 = await sandbox.exec("echo next")
    assert r2.ok and r2.text() == "next\n"
    _assert_nothing_left(sandbox)


async def test_background_processes_do_not_survive(sandbox):
    # Durations unique to this test: the psutil scan is host-wide, and other tests (the
    # container backend's) start their own `sleep 300` whose teardown may still be in progress.
    r = await sandbox.exec("(sleep 7301 &) ; nohup sleep 7302 >/dev/null 2>&1 & setsid sleep 7303 & echo started")
    assert r.ok and "started" in r.text()
    assert r.wall_s < 5
    _assert_nothing_left(sandbox)
    assert not [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] and
                p.info["cmdline"][:2] in (["sleep", "7301"], ["sleep", "7302"], ["sleep", "7303"])]


async def test_timeout_leaves_no_process(sandbox):
    r = await sandbox.exec("for i in 1 2 3 4; do sleep 100 & done; sleep 100", timeout=0.5)
    assert r.verdict is ResourceVerdict.TIMEOUT
    _assert_nothing_left(sandbox)


async def test_fork_bomb_contained(sandbox):
    r = await sandbox.exec(["python3", "-c",
                            "import os\nn=0\nwhile True:\n try:\n  os.fork(); n+=1\n except OSError as e:\n"
                            "  print('fork failed', e.errno, flush=True); break\n"],
                           limits=Limits(max_processes=32, wall_s=5))
    assert b"fork failed" in r.stdout
    _assert_nothing_left(sandbox)
    r2 = await sandbox.exec("echo alive")
    assert r2.ok


async def test_shell_fork_bomb_times_out_cleanly(sandbox):
    r = await sandbox.exec(":(){ :|:& };:", limits=Limits(max_processes=32, wall_s=2))
    assert r.wall_s < 8
    _assert_nothing_left(sandbox)


async def test_fd_exhaustion_contained(sandbox):
    r = await sandbox.exec(["python3", "-c",
                            "fs=[]\ntry:\n while True: fs.append(open('/dev/null'))\n"
                            "except OSError as e: print('limit', len(fs))"],
                           limits=Limits(max_open_files=64))
    assert r.ok and r.text().startswith("limit")
    assert int(r.text().split()[1]) < 64
    assert len(psutil.Process().open_files()) < 1000  # the server's own fds are unaffected


async def test_memory_bomb_with_children(sandbox):
    r = await sandbox.exec(["python3", "-c", "a=[]\nwhile True: a.append(bytearray(50<<20))"],
                           limits=Limits(memory_mb=256))
    assert r.verdict is ResourceVerdict.MEMORY_LIMIT


async def test_reset_leaves_nothing(sandbox):
    r = await sandbox.exec("mkdir -p d/e && echo x > d/e/f && chmod 000 d && echo y > top")
    assert r.ok
    await sandbox.reset()
    assert list(sandbox.host_workdir.iterdir()) == []
    r = await sandbox.exec("ls -A /workspace /tmp")
    assert r.text().split() == ["/tmp:", *tmp_entries_of_binds(sandbox), "/workspace:"]
    _assert_nothing_left(sandbox)
