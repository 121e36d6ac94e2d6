"""The process backend for real: exit codes, stdin, files, limits and verdicts."""

from __future__ import annotations

import pytest

from sandboxes import Limits, ResourceVerdict, SandboxError, SandboxSpec, open_backend
from tests.busy_machine import busy_cpu

pytestmark = pytest.mark.bwrap


def test_unknown_backend_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown sandbox backend 'nope'"):
        open_backend("nope")


async def test_health(process_backend):
    h = await process_backend.health()
    assert h["ok"] is True and h["backend"] == "process"


async def test_exit_code_stdout_stderr_and_stdin(sandbox):
    r = await sandbox.exec(["python3", "-c",
                            "import sys; d=sys.stdin.read(); print(d.upper()); "
                            "print('err', file=sys.stderr); sys.exit(3)"], stdin="hello")
    assert r.exit_code == 3 and r.verdict is ResourceVerdict.OK
    assert r.stdout == b"HELLO\n" and r.stderr == b"err\n"
    assert not r.ok
    r = await sandbox.exec("echo ok")
    assert r.ok and r.text() == "ok\n"


async def test_large_stdin_roundtrip(sandbox):
    data = b"x" * (3 << 20)
    r = await sandbox.exec(["python3", "-c", "import sys; print(len(sys.stdin.buffer.read()))"],
                           stdin=data, limits=Limits(max_output_bytes=1 << 20))
    assert r.text().strip() == str(len(data))


async def test_upload_exec_download_and_spec_files(process_backend):
    async with await process_backend.create(SandboxSpec(files={"pkg/a.py": "print(6*7)"})) as sb:
        r = await sb.exec(["python3", "pkg/a.py"])
        assert r.text() == "42\n"
        await sb.upload({"b.txt": b"bytes", "/workspace/c.txt": "abs ok"})
        r = await sb.exec("cat b.txt c.txt > out.txt; echo $HOME; pwd")
        assert r.text() == "/workspace\n/workspace\n"
        assert await sb.download("out.txt") == b"bytesabs ok"
        with pytest.raises(FileNotFoundError):
            await sb.download("missing.txt")
        with pytest.raises(SandboxError):
            await sb.download("out.txt", max_bytes=3)
        with pytest.raises(SandboxError):
            await sb.upload({"../escape.txt": "x"})


async def test_planted_symlink_is_not_followed_on_download(sandbox):
    r = await sandbox.exec("ln -s /etc/shadow leak; ln -s ../../../../etc/hostname leak2")
    assert r.ok
    for name in ("leak", "leak2"):
        with pytest.raises(SandboxError):
            await sandbox.download(name)


async def test_timeout_kills(sandbox):
    r = await sandbox.exec("sleep 30", timeout=0.5)
    assert r.verdict is ResourceVerdict.TIMEOUT and r.exit_code is None
    assert r.wall_s < 5


# Half a second of computing; on one CPU shared with 5 busy loops the program gets about a sixth of it.
SPIN_HALF_A_SECOND = ["python3", "-c", "import time\nt = time.process_time() + 0.5\nwhile time.process_time() < t: pass"]


async def test_wall_stretch_gives_a_run_its_own_time_on_a_busy_machine(sandbox):
    with busy_cpu(5):
        plain = await sandbox.exec(SPIN_HALF_A_SECOND, limits=Limits(wall_s=1.5))
        stretched = await sandbox.exec(SPIN_HALF_A_SECOND, limits=Limits(wall_s=1.5, wall_stretch=10))
    assert plain.verdict is ResourceVerdict.TIMEOUT and plain.waited_s == 0, plain
    assert stretched.ok, stretched


async def test_a_stretched_run_stops_at_its_own_time_and_says_what_it_waited(sandbox):
    with busy_cpu(5):
        r = await sandbox.exec(["python3", "-c", "while True: pass"], limits=Limits(wall_s=0.5, cpu_s=100, wall_stretch=20))
    assert r.verdict is ResourceVerdict.TIMEOUT and r.waited_s > 0
    assert r.own_s is not None and r.own_s >= 0.5, r  # its own time ran out, not the wall-clock cap


async def test_a_stretched_sleeper_gets_no_more_than_its_deadline(sandbox):
    r = await sandbox.exec("sleep 30", limits=Limits(wall_s=0.5, wall_stretch=10))
    # Sleeping is the run's own time: it ran out, the deadline was not stretched to the cap.
    assert r.verdict is ResourceVerdict.TIMEOUT and r.own_s is not None and r.own_s >= 0.5, r


async def test_processes_that_keep_each_other_waiting_do_not_stretch_their_deadline(sandbox):
    # Eight busy processes on one CPU wait most of the time, for each other: the stretch ends
    # when the tree used its CPU budget, long before the wall-clock cap (20 x 10 s).
    spin8 = "for i in 1 2 3 4 5 6 7 8; do python3 -c 'while True: pass' & done; wait"
    with busy_cpu(0):
        r = await sandbox.exec(spin8, limits=Limits(wall_s=10, cpu_s=2, wall_stretch=20))
    assert r.verdict is ResourceVerdict.TIMEOUT and r.own_s is not None and r.own_s < 10, r


async def test_cpu_limit(sandbox):
    r = await sandbox.exec(["python3", "-c", "while True: pass"], limits=Limits(cpu_s=1, wall_s=20))
    assert r.verdict is ResourceVerdict.CPU_LIMIT
    assert r.cpu_s >= 0.75  # rusage is tick-granular; SIGXCPU itself fires at 1 s


async def test_memory_limit(sandbox):
    r = await sandbox.exec(["python3", "-c", "x = bytearray(3 << 30)"], limits=Limits(memory_mb=512))
    assert r.verdict is ResourceVerdict.MEMORY_LIMIT, r


async def test_output_cap_truncates_fast(sandbox):
    # 1 GiB attempt: must be cut at the cap and killed long before it could be written.
    r = await sandbox.exec(["python3", "-c",
                            "import sys\nb=b'x'*(1<<20)\nfor _ in range(1024): sys.stdout.buffer.write(b)"],
                           limits=Limits(max_output_bytes=1 << 20, wall_s=30))
    assert r.verdict is ResourceVerdict.OUTPUT_LIMIT
    assert r.stdout_truncated and len(r.stdout) == 1 << 20
    assert r.wall_s < 10


async def test_stderr_cap_too(sandbox):
    r = await sandbox.exec("yes 1>&2", limits=Limits(max_output_bytes=4096))
    assert r.verdict is ResourceVerdict.OUTPUT_LIMIT and r.stderr_truncated and len(r.stderr) == 4096


async def test_segfault_is_signaled(sandbox):
    r = await sandbox.exec(["python3", "-c", "import ctypes; ctypes.string_at(0)"])
    assert r.verdict is ResourceVerdict.SIGNALED and r.exit_code is None


async def test_numpy_works_under_limits(sandbox):
    r = await sandbox.exec(["python3", "-c", "import numpy as np; print(int(np.arange(10).sum()))"],
                           limits=Limits(memory_mb=1024, max_processes=16))
    assert r.ok, r.text("stderr")
    assert r.text() == "45\n"


async def test_file_size_limit(sandbox):
    r = await sandbox.exec(["python3", "-c", "open('big','wb').write(b'x'*(4<<20))"],
                           limits=Limits(max_file_mb=1))
    assert not r.ok and b"File too large" in r.stderr


async def test_destroy_is_idempotent_and_final(process_backend):
    sb = await process_backend.create(SandboxSpec())
    await sb.destroy()
    await sb.destroy()
    with pytest.raises(SandboxError):
        await sb.exec("true")
