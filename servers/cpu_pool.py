"""A process pool for CPU-bound scoring, with a real deadline per call.

Why not ``concurrent.futures.ProcessPoolExecutor``: it cannot kill one stuck task — a
sympy simplification that never ends would hold a worker forever, and killing the worker
breaks the whole pool (every other in-flight call fails). Here each worker is a process
with its own pipe; a call past its deadline kills exactly that worker and starts a
replacement, and every other call is untouched. No signals (SIGALRM) anywhere: the
deadline is enforced from the parent with ``Connection.poll(timeout)``.

The blocking pipe wait runs in a small thread pool (one thread per worker), so the event
loop never blocks.

Workers are forked from the zygote when ``envs serve`` started one (``servers/cpu_zygote.py``:
preload imported once, a replacement ready in milliseconds), else each is a fresh interpreter.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from typing import Any, Callable

from servers import cpu_zygote


class CpuTimeout(Exception):
    """The call passed its deadline; its worker was killed and replaced. ``cpu_s``: the CPU time
    the worker spent on the call (None where /proc cannot tell): near the deadline, the work
    itself was that costly; far below it, the worker waited for a CPU (an overloaded machine)."""

    def __init__(self, message: str, cpu_s: float | None = None):
        super().__init__(message)
        self.cpu_s = cpu_s

    def worked_for(self, seconds: float) -> bool:
        """The worker spent at least ``seconds`` of CPU on the call: the work was that costly
        (a cost its input caused), not a wait for a CPU."""
        return self.cpu_s is not None and self.cpu_s >= seconds


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_cpu_s(pid: int | None) -> float | None:
    """User + system CPU seconds of a live process, from /proc (None when unreadable)."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICK
    except (OSError, IndexError, ValueError):
        return None


class CpuWorkerCrashed(RuntimeError):
    """The worker died during the call (segfault, out of memory); it was replaced."""


class CpuTaskError(RuntimeError):
    """The function raised inside the worker; the message carries the worker's traceback."""


class _Worker:
    def __init__(self, preload: tuple[str, ...], memory_mb: int):
        self._preload, self._memory_mb = preload, memory_mb
        self._start()

    def _start(self) -> None:
        self._ready = False
        self._idle_cpu_s = 0.0  # the worker's CPU time when it last reported idle
        zygote = cpu_zygote.current()
        if zygote is not None:
            # Forked from the zygote (servers/cpu_zygote.py): preload already imported there.
            try:
                self.conn = zygote.spawn(self._memory_mb, self._preload)
                self.process = cpu_zygote.ForkedProcess()
                return
            except OSError:
                pass  # the zygote is gone: a fresh interpreter, as below
        # A fresh interpreter via subprocess rather than multiprocessing: no re-import of the
        # caller's __main__ (which breaks under stdin scripts and notebooks), nothing copied
        # from a process that holds an event loop and threads.
        parent_sock, child_sock = socket.socketpair()
        cmd = [sys.executable, "-c", "from servers.cpu_worker import child_entry; child_entry()",
               str(child_sock.fileno()), str(self._memory_mb), ",".join(self._preload)]
        self.process = subprocess.Popen(cmd, pass_fds=(child_sock.fileno(),), stdin=subprocess.DEVNULL,
                                        start_new_session=True)
        child_sock.close()
        self.conn = Connection(parent_sock.detach())

    def wait_ready(self, timeout: float = 120.0) -> None:
        if self._ready:
            return
        if not self.conn.poll(timeout):
            raise RuntimeError("CPU worker did not start in time")
        try:
            kind, pid, self._idle_cpu_s = self.conn.recv()
        except EOFError:
            raise RuntimeError(f"CPU worker exited during start (exit code {self.process.poll()}); "
                               "check that cpu_pool_preload modules import cleanly") from None
        assert kind == "ready"
        if isinstance(self.process, cpu_zygote.ForkedProcess):
            self.process.attach(pid)
        self._ready = True

    def call(self, fn: Callable[..., Any], args: tuple[Any, ...], timeout: float) -> Any:
        """Blocking: run in a thread. Restarts the worker after a timeout or crash."""
        try:
            self.wait_ready()
            self.conn.send((fn, args))
            if not self.conn.poll(timeout):
                cpu_now = process_cpu_s(self.process.pid)
                used = max(0.0, cpu_now - self._idle_cpu_s) if cpu_now is not None else None
                self.restart()
                raise CpuTimeout(f"{getattr(fn, '__name__', fn)} passed its {timeout:g}s deadline"
                                 + (f" after {used:.2f}s of CPU" if used is not None else ""), cpu_s=used)
            kind, value, self._idle_cpu_s = self.conn.recv()
        except (EOFError, OSError, BrokenPipeError) as exc:
            self.restart()
            raise CpuWorkerCrashed(f"CPU worker died while running {getattr(fn, '__name__', fn)}: {exc!r}") from None
        if kind == "err":
            raise CpuTaskError(value)
        return value

    def restart(self) -> None:
        self.kill()
        self._start()

    def kill(self) -> None:
        try:
            self.conn.close()
        except OSError:
            pass
        if self.process.poll() is None:
            self.process.kill()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        # A zygote-forked worker not yet ready has no pid here: closing its socket ends it (EOF).


def usable_cpus() -> int:
    """CPUs this process may run on: its affinity mask (a Slurm step's --cpus-per-task, a
    container's --cpuset-cpus, taskset), not every core of the machine as os.cpu_count()."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # no affinity API on this platform
        return os.cpu_count() or 1


class CpuPool:
    """``await pool.run(fn, *args, timeout=s)``; ``fn`` must be a picklable top-level function."""

    def __init__(self, size: int | None = None, *, default_timeout: float = 30.0, preload: tuple[str, ...] = (),
                 memory_mb: int = 4096):
        self.size = max(1, size or usable_cpus())
        self.default_timeout = default_timeout
        self._workers = [_Worker(tuple(preload), memory_mb) for _ in range(self.size)]
        self._threads = ThreadPoolExecutor(max_workers=self.size, thread_name_prefix="cpu-pool")
        self._idle: asyncio.Queue[_Worker] | None = None
        self._lock = threading.Lock()
        self.timeouts = 0
        self.crashes = 0

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(self._threads, w.wait_ready) for w in self._workers))
        self._idle = asyncio.Queue()
        for worker in self._workers:
            self._idle.put_nowait(worker)

    @property
    def alive(self) -> bool:
        return all(w.process.poll() is None for w in self._workers)

    async def run(self, fn: Callable[..., Any], *args: Any, timeout: float | None = None) -> Any:
        if self._idle is None:
            await self.start()
        assert self._idle is not None
        worker = await self._idle.get()
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self._threads, worker.call, fn, args, timeout or self.default_timeout)
        # The worker goes back to the idle queue only when its thread is done with it, even if
        # the awaiting coroutine was cancelled (e.g. the /verify deadline passed first).
        idle = self._idle
        future.add_done_callback(lambda _f: idle.put_nowait(worker))
        try:
            return await asyncio.shield(future)
        except CpuTimeout:
            self.timeouts += 1
            raise
        except CpuWorkerCrashed:
            self.crashes += 1
            raise

    async def close(self) -> None:
        for worker in self._workers:
            worker.kill()
        self._threads.shutdown(wait=False, cancel_futures=True)
