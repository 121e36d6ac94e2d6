"""The process backend's Python zygote (``exec_python``): results like a fresh interpreter,
limits and verdicts per run, nothing of one run visible to the next, and nothing a run
does can reach the zygote (see sandboxes/README.md, "Python zygote")."""

from __future__ import annotations

import psutil
import pytest

from sandboxes import Limits, ResourceVerdict, SandboxSpec, open_backend
from sandboxes.pool import SandboxPool
from tests.sandbox_processes import sandbox_pids, tmp_entries_of_binds, uid_inside

pytestmark = pytest.mark.bwrap


async def _assert_only_zygote(sb) -> None:
    assert sandbox_pids(sb.uid) == {sb._zygote.host_pid}


async def test_runs_like_python(sandbox):
    await sandbox.upload({"main.py": "import sys\nprint('argv', sys.argv[1:], sys.flags.isolated)\n"
                                     "print(input()[::-1])\nsys.exit(4)\n"})
    r = await sandbox.exec_python(path="main.py", args=["a", "b"], stdin="olleh\n")
    assert r.verdict is ResourceVerdict.OK and r.exit_code == 4
    assert r.stdout == b"argv ['a', 'b'] 1\nhello\n"
    r = await sandbox.exec_python(code="def f():\n    return 1 / 0\nf()")
    assert r.exit_code == 1 and r.stdout == b""
    err = r.text("stderr")
    assert err.startswith("Traceback") and "ZeroDivisionError" in err
    assert "zygote" not in err and "runpy" not in err  # only the program's own frames
    r = await sandbox.exec_python(code="exit(3)")  # the site builtins exist
    assert r.exit_code == 3
    r = await sandbox.exec_python(code="import numpy; print(int(numpy.arange(5).sum()))")
    assert r.ok and r.stdout == b"10\n"
    r = await sandbox.exec_python(code="import os; print(sorted(os.listdir('/proc/self/fd')), os.getuid())")
    assert r.ok and r.text().split("]")[0] == "['0', '1', '2', '3'" and int(r.text().split()[-1]) == uid_inside(sandbox)


async def test_verdicts_and_recovery(sandbox):
    cases = [("while True: pass", Limits(wall_s=30, cpu_s=1), ResourceVerdict.CPU_LIMIT),
             ("import time; time.sleep(30)", Limits(wall_s=1), ResourceVerdict.TIMEOUT),
             ("print('x' * 5000000)", Limits(max_output_bytes=1000), ResourceVerdict.OUTPUT_LIMIT),
             ("x = bytearray(900 << 20)", Limits(memory_mb=256), ResourceVerdict.MEMORY_LIMIT),
             ("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", Limits(), ResourceVerdict.SIGNALED)]
    for code, limits, verdict in cases:
        r = await sandbox.exec_python(code=code, limits=limits)
        assert r.verdict is verdict, (code, r)
        await _assert_only_zygote(sandbox)
        ok = await sandbox.exec_python(code="print('next')")
        assert ok.ok and ok.stdout == b"next\n"


async def test_fork_bomb_is_contained(sandbox):
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    r = await sandbox.exec_python(code=bomb, limits=Limits(wall_s=2, max_processes=16))
    assert r.verdict in (ResourceVerdict.TIMEOUT, ResourceVerdict.CPU_LIMIT)
    await _assert_only_zygote(sandbox)
    assert (await sandbox.exec_python(code="print(1)")).stdout == b"1\n"


async def test_nothing_of_a_run_reaches_the_next(sandbox):
    leave = """
import ctypes, os, subprocess
for path in ('/tmp/left', '/dev/shm/left', '/workspace/kept'):
    try:
        open(path, 'w').write('x')   # /tmp and /dev/shm are read-only to the uid today
    except PermissionError:
        pass
libc = ctypes.CDLL(None)
print(libc.shmget(4242, 4096, 0o1600))                          # IPC_CREAT | 0600
subprocess.Popen(['sh', '-c', '(sleep 100 &) ; sleep 100'], start_new_session=True)
os.environ['LEFT'] = '1'
"""
    r = await sandbox.exec_python(code=leave)
    assert r.ok and int(r.text()) >= 0, r
    await _assert_only_zygote(sandbox)
    probe = ("import ctypes, os\nprint(sorted(os.listdir('/tmp')), os.path.exists('/dev/shm/left'),\n"
             "      ctypes.CDLL(None).shmget(4242, 0, 0), 'LEFT' in os.environ, len(os.listdir('/proc')))")
    r = await sandbox.exec_python(code=probe)
    assert r.ok, r
    listed, shm, shmid, env, nprocs = r.text().rsplit(" ", 4)
    assert listed == str(tmp_entries_of_binds(sandbox)) and shm == "False" and shmid == "-1" and env == "False"
    r = await sandbox.exec_python(code="import os\nprint(*sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))")
    pids = r.text().split()
    assert len(pids) == 2 and pids[0] == "1"  # only the zygote and this run
    assert (await sandbox.download("kept")) == b"x"  # the workspace persists until reset()


async def test_hostile_runs_cannot_touch_the_zygote(sandbox):
    await sandbox.exec_python(code="pass")
    zpid = sandbox._zygote.host_pid
    attacks = [
        "import os, signal\nfor s in (signal.SIGKILL, signal.SIGSTOP, signal.SIGTERM, signal.SIGINT):\n    os.kill(1, s)",
        "import os, signal\nos.kill(-1, signal.SIGKILL)",
        "import ctypes\nassert ctypes.CDLL(None).ptrace(16, 1, 0, 0) == -1\nprint('ptrace refused')",
    ]
    for code in attacks:
        await sandbox.exec_python(code=code)
        assert sandbox._zygote.host_pid == zpid and sandbox._zygote.alive
        assert (await sandbox.exec_python(code="print('fine')")).stdout == b"fine\n"
    for path in ("/proc/1/environ", "/proc/1/mem", "/proc/1/fd/0"):
        r = await sandbox.exec_python(code=f"open({path!r}, 'rb').read(1)")
        assert r.exit_code == 1 and b"PermissionError" in r.stderr, (path, r)
    r = await sandbox.exec_python(code="import os\nprint(os.listdir('/proc/1/fd'))")
    assert b"PermissionError" in r.stderr


async def test_scheduling_tampering_replaces_the_zygote_at_reset(sandbox):
    r = await sandbox.exec_python(code="import os\nos.setpriority(os.PRIO_PROCESS, 1, 19)")
    assert r.ok, r
    before = sandbox._zygote.host_pid
    await sandbox.reset()
    assert sandbox._zygote is None and not sandbox_pids(sandbox.uid)
    r = await sandbox.exec_python(code="import os\nprint(os.getpriority(os.PRIO_PROCESS, 1))")
    assert r.stdout == b"0\n" and sandbox._zygote.host_pid != before


async def test_pool_reuse_and_destroy_leave_nothing(process_backend):
    pool = SandboxPool(process_backend, SandboxSpec(files={"given.txt": "spec"}), size=1, max_size=1)
    await pool.start()
    async with pool.acquire() as sb:
        first = sb
        await sb.upload({"main.py": "open('made.txt', 'w').write('1')\nimport os; os.chmod('.', 0o500)\n"})
        assert (await sb.exec_python(path="main.py")).ok
    async with pool.acquire() as sb:
        assert sb is first and sb._zygote is not None and sb._zygote.alive
        r = await sb.exec_python(code="import os\nprint(sorted(os.listdir('.')))\nopen('w.txt', 'w')")
        assert r.ok and r.stdout == b"['given.txt']\n", r
    await pool.close()
    assert not sandbox_pids(first.uid)


async def test_destroy_kills_the_zygote(process_backend):
    sb = await process_backend.create(SandboxSpec())
    await sb.exec_python(code="pass")
    zpid, uid = sb._zygote.host_pid, sb.uid
    assert psutil.pid_exists(zpid)
    await sb.destroy()
    assert not sandbox_pids(uid) and not psutil.pid_exists(zpid)


async def test_without_zygote_same_results():
    backend = open_backend("process", python_zygote=False)
    try:
        async with await backend.create(SandboxSpec(files={"m.py": "import sys\nprint(sys.argv[1:])"})) as sb:
            r = await sb.exec_python(path="m.py", args=["x"])
            assert r.ok and r.stdout == b"['x']\n" and sb._zygote is None
    finally:
        await backend.close()
