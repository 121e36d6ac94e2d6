"""Long-lived processes in a process-backend sandbox (``start_process``): a session kernel
or shell talked to over pipes, per-read deadlines, output caps, and nothing left behind."""

from __future__ import annotations

import psutil
import pytest

from sandboxes import Limits, SandboxSpec
from tests.sandbox_processes import sandbox_pids, uid_inside

pytestmark = pytest.mark.bwrap

SHELL_LOOP = 'while IFS= read -r line; do eval "$line"; echo "@@END $?"; echo "@@END" >&2; done'


async def test_state_persists_between_requests(sandbox):
    proc = await sandbox.start_process(["/bin/sh", "-c", SHELL_LOOP])
    await proc.write_stdin(b"cd /tmp; X=41; echo in $(pwd) >&2\n")
    got = await proc.read_until(b"@@END 0\n", timeout=10)
    assert got.found and got.data == b"@@END 0\n"
    err = await proc.read_until(b"@@END\n", timeout=10, stream="stderr")
    assert err.data == b"in /tmp\n@@END\n"
    await proc.write_stdin(b"echo $((X + 1)) $(pwd); false\n")
    got = await proc.read_until(b"@@END", timeout=10)
    assert got.data == b"42 /tmp\n@@END" and (await proc.read_until(b"\n", timeout=10)).data == b" 1\n"
    assert proc.returncode is None
    await proc.kill()
    assert proc.returncode is not None


async def test_timeout_max_bytes_and_eof(sandbox):
    proc = await sandbox.start_process(["/bin/sh", "-c", SHELL_LOOP], limits=Limits(max_output_bytes=4096))
    await proc.write_stdin(b"sleep 30\n")
    got = await proc.read_until(b"@@END", timeout=0.5)
    assert got.reason == "timeout" and not got.found
    await proc.kill()
    proc = await sandbox.start_process(["/bin/sh", "-c", SHELL_LOOP], limits=Limits(max_output_bytes=4096))
    await proc.write_stdin(b"yes\n")  # floods: the buffer fills, the program blocks on write
    got = await proc.read_until(b"@@END", timeout=10, max_bytes=1000)
    assert got.reason == "max_bytes" and len(got.data) == 1000
    await proc.kill()
    proc = await sandbox.start_process(["/bin/sh", "-c", "echo bye; exit 3"])
    got = await proc.read_until(b"never", timeout=10)
    assert got.reason == "eof" and got.data == b"bye\n"
    assert await proc.wait(10) == 3


async def test_processes_are_killed_by_reset_and_destroy(process_backend):
    sb = await process_backend.create(SandboxSpec())
    a = await sb.start_process(["/bin/sh", "-c", "(sleep 100 &); echo up; sleep 100"])
    assert (await a.read_until(b"up\n", timeout=10)).found
    b = await sb.start_process(["/bin/sh", "-c", SHELL_LOOP])
    await b.write_stdin(b"echo ready\n")
    assert (await b.read_until(b"@@END 0\n", timeout=10)).found
    assert len(sandbox_pids(sb.uid)) >= 4
    await sb.reset()
    assert a.returncode is not None and b.returncode is not None and not sandbox_pids(sb.uid)
    c = await sb.start_process(["/bin/sh", "-c", "sleep 100"])
    await c.write_stdin(b"")
    launcher_pid = c._launched.proc.pid
    uid = sb.uid
    await sb.destroy()
    assert c.returncode is not None and not sandbox_pids(uid)
    assert not psutil.pid_exists(launcher_pid)  # reaped, not a zombie


async def test_end_processes_kills_everything_and_keeps_the_workspace(process_backend):
    sb = await process_backend.create(SandboxSpec())
    try:
        shell = await sb.start_process(["/bin/sh", "-c", SHELL_LOOP])
        await shell.write_stdin(b"echo kept > f; (setsid sh -c 'while :; do echo x >> g; sleep 0.05; done' &); echo up\n")
        assert (await shell.read_until(b"@@END 0\n", timeout=10)).found
        await sb.exec_python(code="print(1)")  # the zygote is running too
        await sb.end_processes()
        assert shell.returncode is not None
        if sb.uid is not None:
            assert not sandbox_pids(sb.uid)
        size = (sb.host_workdir / "g").stat().st_size
        r = await sb.exec("sleep 0.3; cat f")
        assert r.text() == "kept\n" and (sb.host_workdir / "g").stat().st_size == size  # no writer left
        assert (await sb.exec_python(code="print(2)")).text() == "2\n"  # usable afterwards
    finally:
        await sb.destroy()


async def test_process_is_sandboxed(sandbox, tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("hostsecret")
    proc = await sandbox.start_process(["/bin/sh", "-c", SHELL_LOOP], env={"ONLY": "this"})
    await proc.write_stdin(f"cat {secret}; echo $ONLY $HOME; id -u\n".encode())
    got = await proc.read_until(b"@@END", timeout=10)
    assert b"hostsecret" not in got.data and f"this /workspace\n{uid_inside(sandbox)}\n".encode() in got.data
    await proc.kill()


async def test_write_to_dead_process_raises(sandbox):
    from sandboxes import SandboxError
    proc = await sandbox.start_process(["/bin/sh", "-c", "exit 0"])
    assert await proc.wait(10) == 0
    with pytest.raises(SandboxError):
        await proc.write_stdin(b"x" * 200_000)
    await proc.kill()
