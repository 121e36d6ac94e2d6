"""Spawn one sandbox launcher process and supervise it without blocking the event loop.

Shared by the process (bubblewrap) and apptainer backends. What it guarantees:

* stdout/stderr are read incrementally from non-blocking pipes; at most ``max_output``
  bytes per stream are kept, and the first byte past the cap kills the whole launcher
  (the sandbox's PID namespace dies with it), so a flood never buffers in the server.
* the wall-clock deadline is enforced with the event loop's timer, never with signals.
  With ``wall_stretch`` > 1 the deadline counts the run's *own* time (``tree_usage``), up to
  ``wall_stretch`` times the deadline in wall time.
* the exit is observed through a pidfd and reaped with ``wait4`` so the CPU time of the
  whole tree (every descendant is reaped by the namespace init, then by the launcher)
  comes back from the kernel's rusage.
"""

from __future__ import annotations

import asyncio
import errno
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from .tree_usage import run_out_own_time, tree_cpu_s

_READ_CHUNK = 1 << 16
# After the launcher exits, its PID namespace is gone, so pipes reach EOF at once; this
# grace only covers a launcher that leaked a pipe end to something outside the sandbox.
_EOF_GRACE_S = 1.0
# How long a launcher gets to reap its killed sandbox before it is killed itself.
_LAUNCHER_GRACE_S = 2.0


@dataclass
class RawOutcome:
    """What the kernel told us about one launcher run, before any verdict is derived."""

    status: int | None           # raw wait status (os.WIFEXITED etc.); None if never reaped
    stdout: bytes
    stderr: bytes
    stdout_truncated: bool
    stderr_truncated: bool
    timed_out: bool
    output_limited: bool
    wall_s: float
    cpu_s: float
    own_s: float | None = None   # timed out: the run's own time at the deadline (wall minus waited_s)
    waited_s: float = 0.0        # timed out: time the tree waited for a CPU (wall_stretch runs; else 0)

    @property
    def exit_code(self) -> int | None:
        if self.status is not None and os.WIFEXITED(self.status):
            return os.WEXITSTATUS(self.status)
        return None

    @property
    def term_signal(self) -> int | None:
        if self.status is not None and os.WIFSIGNALED(self.status):
            return os.WTERMSIG(self.status)
        return None


@dataclass
class _Capture:
    cap: int
    chunks: list[bytes] = field(default_factory=list)
    size: int = 0
    truncated: bool = False
    eof: bool = False

    def add(self, data: bytes) -> bool:
        """Store up to the cap; return True when this chunk went past it."""
        room = self.cap - self.size
        if len(data) > room:
            if room > 0:
                self.chunks.append(data[:room])
                self.size += room
            self.truncated = True
            return True
        self.chunks.append(data)
        self.size += len(data)
        return False

    def value(self) -> bytes:
        return b"".join(self.chunks)


class OutputPipes:
    """A run's stdout and stderr pipes, read by the event loop into buffers capped at ``cap``
    bytes each. The chunk that goes past a cap sets ``output_limited`` and calls ``on_limit``
    (the caller kills the run); what comes after is drained and dropped, so the program
    never blocks on a full pipe. ``all_eof`` resolves once both streams are closed."""

    def __init__(self, loop: asyncio.AbstractEventLoop, stdout_fd: int, stderr_fd: int, cap: int,
                 on_limit: Callable[[], object]) -> None:
        self.out, self.err = _Capture(cap), _Capture(cap)
        self.output_limited = False
        self.all_eof: asyncio.Future[None] = loop.create_future()
        self._loop, self._on_limit = loop, on_limit
        self._captures = {stdout_fd: self.out, stderr_fd: self.err}
        for fd in self._captures:
            os.set_blocking(fd, False)
            loop.add_reader(fd, self._on_readable, fd)

    @property
    def fds(self) -> tuple[int, ...]:
        return tuple(self._captures)

    def _on_readable(self, fd: int) -> None:
        cap = self._captures[fd]
        try:
            data = os.read(fd, _READ_CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            cap.eof = True
            self._loop.remove_reader(fd)
            if all(c.eof for c in self._captures.values()) and not self.all_eof.done():
                self.all_eof.set_result(None)
            return
        if not cap.truncated and cap.add(data):
            self.output_limited = True
            self._on_limit()

    def stop(self) -> None:
        """Stop reading (the fds stay open: their owner closes them)."""
        for fd in self._captures:
            self._loop.remove_reader(fd)


def _kill_pid(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_tree(pid: int) -> None:
    # The launcher leads its own session/process group (start_new_session). Killing it is
    # enough for bubblewrap (--die-with-parent => the namespace init dies => the kernel
    # kills every process in the PID namespace); killpg also catches helpers in the group.
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            target()
        except ProcessLookupError:
            pass
        except PermissionError:
            pass


class StatusPipe:
    """A pipe for bwrap's ``--json-status-fd``: it tells us the host pid of the sandbox's
    pid 1. Killing that pid from the host takes the whole PID namespace down; the
    parent-death signal cannot, because the kernel ignores it for a namespace init."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        os.set_inheritable(self.write_fd, True)
        os.set_blocking(self.read_fd, False)
        self.buffer = b""
        self.child_pid: int | None = None

    def feed(self) -> bool:
        """Read what is there; False at EOF."""
        try:
            data = os.read(self.read_fd, 4096)
        except BlockingIOError:
            return True
        if not data:
            return False
        self.buffer += data[:65536]
        m = re.search(rb'"child-pid"\s*:\s*(\d+)', self.buffer)
        if m and self.child_pid is None:
            self.child_pid = int(m.group(1))
        return True

    def close(self) -> None:
        for fd in (self.read_fd, self.write_fd):
            try:
                os.close(fd)
            except OSError:
                pass


async def run_launcher(argv: Sequence[str], *, stdin: bytes | None, timeout: float,
                       max_output: int, env: Mapping[str, str] | None = None,
                       cwd: str | None = None, status: StatusPipe | None = None,
                       on_kill: Callable[[], object] | None = None, wall_stretch: float = 1.0,
                       cpu_s: float | None = None) -> RawOutcome:
    """Run ``argv``; ``status`` (if given) must already be wired into argv; ``on_kill`` is an
    extra backstop called when we kill (e.g. kill every process of the sandbox's uid);
    ``wall_stretch`` (module docstring) lets the deadline count the run's own time, as long as
    the whole tree used less than ``cpu_s`` of CPU."""
    loop = asyncio.get_running_loop()
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            list(argv), stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(env or {}), cwd=cwd,
            start_new_session=True, close_fds=True,
            pass_fds=(status.write_fd,) if status else ())
    except OSError as exc:
        if status:
            status.close()
        from .base import SandboxError
        raise SandboxError(f"cannot start sandbox launcher {argv[0]!r}: {exc}") from exc
    if status:
        os.close(status.write_fd)
        status.write_fd = -1

        def on_status() -> None:
            if not status.feed():
                loop.remove_reader(status.read_fd)
        loop.add_reader(status.read_fd, on_status)

    pid = proc.pid
    pidfd = os.pidfd_open(pid)
    exited: asyncio.Future[None] = loop.create_future()
    state: dict[str, Any] = {"killed": False, "cpu_at_kill": 0.0}

    def kill() -> None:
        if state["killed"]:
            return
        state["killed"] = True
        if status is not None:
            status.feed()  # the pid may be sitting unread in the pipe
        if status is not None and status.child_pid is not None:
            # The namespace dies with its pid 1 unreaped by anyone who would add its CPU to the
            # launcher's rusage: read the tree's CPU now (a killed run's verdict may depend on it).
            state["cpu_at_kill"] = tree_cpu_s(status.child_pid)
            # Kill the namespace's pid 1 (still the launcher's unreaped child, so the pid
            # cannot have been reused): the kernel kills the whole namespace, and the
            # launcher reaps it and exits by itself, leaving no zombie to the host's init.
            _kill_pid(status.child_pid)
            loop.call_later(_LAUNCHER_GRACE_S, lambda: exited.done() or _kill_tree(pid))
        else:
            _kill_tree(pid)
        if on_kill is not None:
            on_kill()

    pipes = OutputPipes(loop, proc.stdout.fileno(), proc.stderr.fileno(), max_output,  # type: ignore[union-attr]
                        on_limit=kill)
    loop.add_reader(pidfd, lambda: exited.done() or exited.set_result(None))

    stdin_task = None
    if stdin:
        stdin_task = asyncio.ensure_future(_feed_stdin(proc.stdin, stdin))  # type: ignore[arg-type]

    timed_out = False
    own_s, waited_s = None, 0.0
    try:
        ran_out = await run_out_own_time(exited, pid, start, timeout, wall_stretch, cpu_s)
        if ran_out is not None:
            if not exited.done():
                timed_out = not state["killed"]
                own_s, waited_s = ran_out
                kill()
            await exited
        try:
            await asyncio.wait_for(asyncio.shield(pipes.all_eof), timeout=_EOF_GRACE_S)
        except asyncio.TimeoutError:
            pass
    except asyncio.CancelledError:
        kill()
        raise
    finally:
        loop.remove_reader(pidfd)
        if status:
            loop.remove_reader(status.read_fd)
            status.close()
        pipes.stop()
        status, cpu_s = _reap(pid)
        proc.returncode = 0 if status is None else status  # keep Popen from re-waiting
        os.close(pidfd)
        for stream in (proc.stdout, proc.stderr):
            stream.close()  # type: ignore[union-attr]
        if stdin_task is not None:
            stdin_task.cancel()
        if proc.stdin is not None:
            try:
                proc.stdin.close()
            except OSError:
                pass

    return RawOutcome(status=status, stdout=pipes.out.value(), stderr=pipes.err.value(),
                      stdout_truncated=pipes.out.truncated, stderr_truncated=pipes.err.truncated,
                      timed_out=timed_out, output_limited=pipes.output_limited,
                      wall_s=time.monotonic() - start, cpu_s=max(cpu_s, state["cpu_at_kill"]), own_s=own_s,
                      waited_s=waited_s)


def _reap(pid: int) -> tuple[int | None, float]:
    """wait4 the launcher: its rusage includes every reaped descendant (the whole sandbox)."""
    try:
        _, status, usage = os.wait4(pid, 0)
    except ChildProcessError:
        return None, 0.0
    return status, usage.ru_utime + usage.ru_stime


async def _feed_stdin(pipe, data: bytes) -> None:  # type: ignore[no-untyped-def]
    """Write stdin without blocking the loop; a program that stops reading just loses it."""
    loop = asyncio.get_running_loop()
    fd = pipe.fileno()
    os.set_blocking(fd, False)
    view = memoryview(data)
    try:
        while view:
            try:
                n = os.write(fd, view[:_READ_CHUNK])
                view = view[n:]
            except BlockingIOError:
                ready: asyncio.Future[None] = loop.create_future()
                loop.add_writer(fd, lambda: ready.done() or ready.set_result(None))
                try:
                    await ready
                finally:
                    loop.remove_writer(fd)
            except OSError as exc:
                if exc.errno in (errno.EPIPE, errno.EBADF):
                    return
                raise
    finally:
        try:
            pipe.close()
        except OSError:
            pass
