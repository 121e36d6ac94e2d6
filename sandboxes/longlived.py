"""Long-lived sandbox processes: a bubblewrap launcher that stays up for a session
(:class:`BwrapProcess`), or a container exec with an attached stdin (:class:`ContainerProcess`).

Used for :meth:`Sandbox.start_process` (a notebook kernel, a shell) and by the Python
zygote. The launcher is the same bwrap command line as an exec (same namespaces, limits,
uid); it just is not waited for. What this module guarantees:

* the namespace's pid 1 is known from bwrap's ``--json-status-fd``; :meth:`kill` SIGKILLs
  it from the host, so the kernel kills every process of that PID namespace at once;
* the launcher is reaped through a pidfd watched by the event loop (no zombies, no signals);
* stdout/stderr are drained by the event loop into buffers capped per stream; a full
  buffer pauses reading (the program blocks on write) until the caller consumes it.
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket
import struct
import subprocess
import threading
from typing import Sequence

from .base import ReadResult, SandboxError, SandboxProcess
from .runner import StatusPipe, _kill_pid, _kill_tree

_READ_CHUNK = 1 << 16
_PID_WAIT_S = 2.0      # how long kill() waits for bwrap to report the namespace's pid 1
_REAP_GRACE_S = 2.0    # after killing pid 1, how long the launcher gets to exit by itself


class Launched:
    """A started launcher: its pid 1 (host pid) once reported, exit watching, kill, reap."""

    def __init__(self, argv: Sequence[str], *, status: StatusPipe, stdin=subprocess.PIPE,  # type: ignore[no-untyped-def]
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE) -> None:
        self.loop = asyncio.get_running_loop()
        try:
            self.proc = subprocess.Popen(list(argv), stdin=stdin, stdout=stdout, stderr=stderr, env={},
                                         start_new_session=True, close_fds=True, pass_fds=(status.write_fd,))
        except OSError as exc:
            status.close()
            raise SandboxError(f"cannot start sandbox launcher {argv[0]!r}: {exc}") from exc
        os.close(status.write_fd)
        status.write_fd = -1
        self.status = status
        self.returncode: int | None = None
        self.exited: asyncio.Future[None] = self.loop.create_future()
        self._pidfd = os.pidfd_open(self.proc.pid)
        self.loop.add_reader(self._pidfd, self._on_exit)
        self.loop.add_reader(status.read_fd, self._on_status)
        self._status_open = True

    @property
    def child_pid(self) -> int | None:
        """Host pid of the sandbox namespace's pid 1 (None until bwrap reported it)."""
        return self.status.child_pid

    def _on_status(self) -> None:
        if not self.status.feed():
            self._close_status()

    def _close_status(self) -> None:
        if self._status_open:
            self._status_open = False
            self.loop.remove_reader(self.status.read_fd)
            self.status.close()

    async def wait_child_pid(self, timeout: float = _PID_WAIT_S) -> int | None:
        deadline = self.loop.time() + timeout
        while self.child_pid is None and self.returncode is None and self.loop.time() < deadline:
            if self._status_open:
                self.status.feed()
            if self.child_pid is None:
                await asyncio.sleep(0.005)
        return self.child_pid

    def _on_exit(self) -> None:
        self.loop.remove_reader(self._pidfd)
        try:
            _, status = os.waitpid(self.proc.pid, 0)
        except ChildProcessError:
            status = 0
        self.returncode = os.waitstatus_to_exitcode(status)
        if self.returncode < 0:
            self.returncode = 128 - self.returncode
        self.proc.returncode = self.returncode  # keep Popen from waiting again
        os.close(self._pidfd)
        self._close_status()
        if not self.exited.done():
            self.exited.set_result(None)

    async def kill(self) -> None:
        """SIGKILL the namespace's pid 1 (everything inside dies), then reap the launcher."""
        if self.returncode is not None:
            return
        pid = await self.wait_child_pid()
        if pid is not None and self.returncode is None:
            # Still the launcher's unreaped child, so the pid cannot have been reused.
            _kill_pid(pid)
        else:
            _kill_tree(self.proc.pid)
        try:
            await asyncio.wait_for(asyncio.shield(self.exited), _REAP_GRACE_S)
        except asyncio.TimeoutError:
            _kill_tree(self.proc.pid)
            await self.exited


class BufferedProcess(SandboxProcess):
    """The stream side shared by backends: per-stream buffers capped at ``buffer_cap``
    (a full buffer pauses reading until consumed), ``read_until`` and ``take``. A subclass
    feeds ``_buf``/``_eof`` and sets ``_changed``; ``_resume`` restarts a paused reader."""

    def __init__(self, buffer_cap: int) -> None:
        self.loop = asyncio.get_running_loop()
        self._cap = buffer_cap
        self._buf = {name: bytearray() for name in ("stdout", "stderr")}
        self._eof = {name: False for name in ("stdout", "stderr")}
        self._changed = asyncio.Event()

    def _resume(self, name: str) -> None:
        """Called whenever buffered data was consumed."""

    def _stalled(self, name: str) -> bool:
        """True when no more data can arrive on ``name`` (process gone, reader stopped)."""
        return False

    async def read_until(self, marker: bytes, *, timeout: float, max_bytes: int = 1 << 20,
                         stream: str = "stdout") -> ReadResult:
        if not marker:
            raise ValueError("empty marker")
        buf = self._buf[stream]
        limit = min(max_bytes, self._cap)
        deadline = self.loop.time() + timeout
        searched = 0
        while True:
            idx = buf.find(marker, searched)
            if idx >= 0 and idx + len(marker) <= max_bytes:
                return ReadResult(self._consume(stream, idx + len(marker)), "marker")
            searched = max(0, len(buf) - len(marker) + 1)
            if len(buf) >= limit:
                return ReadResult(self._consume(stream, limit), "max_bytes")
            if self._eof[stream] or self._stalled(stream):
                return ReadResult(self._consume(stream, len(buf)), "eof")
            remaining = deadline - self.loop.time()
            if remaining <= 0:
                return ReadResult(self._consume(stream, len(buf)), "timeout")
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except asyncio.TimeoutError:
                pass

    def _consume(self, stream: str, n: int) -> bytes:
        buf = self._buf[stream]
        data = bytes(buf[:n])
        del buf[:n]
        self._resume(stream)
        return data

    def take(self, stream: str = "stderr") -> bytes:
        return self._consume(stream, len(self._buf[stream]))


class BwrapProcess(BufferedProcess):
    """:class:`SandboxProcess` over a :class:`Launched` bwrap with stdin/stdout/stderr pipes."""

    def __init__(self, argv: Sequence[str], *, status: StatusPipe, buffer_cap: int) -> None:
        super().__init__(buffer_cap)
        self._launched = Launched(argv, status=status)
        proc = self._launched.proc
        self._stdin_fd = proc.stdin.fileno()  # type: ignore[union-attr]
        os.set_blocking(self._stdin_fd, False)
        self._write_lock = asyncio.Lock()
        self._streams = {"stdout": proc.stdout.fileno(), "stderr": proc.stderr.fileno()}  # type: ignore[union-attr]
        self._reading = {name: False for name in self._streams}
        for name, fd in self._streams.items():
            os.set_blocking(fd, False)
            self._resume(name)
        self._launched.exited.add_done_callback(lambda _f: self._changed.set())

    @property
    def returncode(self) -> int | None:
        return self._launched.returncode

    @property
    def host_pid(self) -> int | None:
        return self._launched.child_pid

    def _resume(self, name: str) -> None:
        if not self._reading[name] and not self._eof[name] and len(self._buf[name]) < self._cap:
            self._reading[name] = True
            self.loop.add_reader(self._streams[name], self._on_readable, name)

    def _stalled(self, name: str) -> bool:
        return self.returncode is not None and not self._reading[name]

    def _pause(self, name: str) -> None:
        if self._reading[name]:
            self._reading[name] = False
            self.loop.remove_reader(self._streams[name])

    def _on_readable(self, name: str) -> None:
        try:
            data = os.read(self._streams[name], min(_READ_CHUNK, self._cap - len(self._buf[name]) or 1))
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._eof[name] = True
            self._pause(name)
        else:
            self._buf[name] += data
            if len(self._buf[name]) >= self._cap:
                self._pause(name)  # backpressure: the program blocks until we are read
        self._changed.set()

    async def write_stdin(self, data: bytes) -> None:
        view = memoryview(data)
        async with self._write_lock:
            while view:
                if self.returncode is not None:
                    raise SandboxError("the sandbox process has exited")
                try:
                    view = view[os.write(self._stdin_fd, view[:_READ_CHUNK]):]
                except BlockingIOError:
                    ready: asyncio.Future[None] = self.loop.create_future()
                    self.loop.add_writer(self._stdin_fd, lambda: ready.done() or ready.set_result(None))
                    exit_wait = asyncio.ensure_future(asyncio.shield(self._launched.exited))
                    try:
                        await asyncio.wait([ready, exit_wait], return_when=asyncio.FIRST_COMPLETED)
                    finally:
                        self.loop.remove_writer(self._stdin_fd)
                        exit_wait.cancel()
                except OSError as exc:
                    if exc.errno in (errno.EPIPE, errno.EBADF):
                        raise SandboxError("the sandbox process closed its stdin") from exc
                    raise

    async def kill(self) -> None:
        await self._launched.kill()
        for name in self._streams:
            self._pause(name)
            self._eof[name] = True
        proc = self._launched.proc
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            try:
                pipe.close()  # type: ignore[union-attr]
            except OSError:
                pass
        self._changed.set()

    async def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the process to end by itself; None on timeout."""
        try:
            await asyncio.wait_for(asyncio.shield(self._launched.exited), timeout)
        except asyncio.TimeoutError:
            return None
        return self.returncode


class ContainerProcess(BufferedProcess):
    """:class:`SandboxProcess` over a Docker-API exec with an attached stdin (hijacked socket).

    The exec runs ``setsid -w sh -c 'echo $$ > PIDFILE; exec "$@"'``, so the program leads
    its own process group; :meth:`kill` SIGKILLs that group through another exec. The
    multiplexed stream (8-byte frame headers: stream id, length) is read by a thread that
    hands each frame to the event loop and waits while the stream's buffer is full.
    """

    def __init__(self, *, api, container_id: str, exec_id: str, attached, pidfile: str,  # type: ignore[no-untyped-def]
                 user: str, buffer_cap: int) -> None:
        super().__init__(buffer_cap)
        self._api, self._cid, self._exec_id = api, container_id, exec_id
        self._attached = attached  # exec_stream.AttachedExec: frames come from its buffered reader
        self._sock = attached.sock
        self._pidfile, self._user = pidfile, user
        self._room = {name: asyncio.Event() for name in self._buf}
        for event in self._room.values():
            event.set()
        self._returncode: int | None = None
        self._exited: asyncio.Future[None] = self.loop.create_future()
        self._write_lock = asyncio.Lock()
        self._killed = False
        self._thread = threading.Thread(target=self._pump, name="verigym-container-proc", daemon=True)
        self._thread.start()

    @property
    def returncode(self) -> int | None:
        return self._returncode

    def _resume(self, name: str) -> None:
        if len(self._buf[name]) < self._cap:
            self._room[name].set()

    async def _put(self, name: str, data: bytes) -> None:
        while len(self._buf[name]) >= self._cap and not self._killed:
            self._room[name].clear()
            await self._room[name].wait()
        self._buf[name] += data
        self._changed.set()

    def _recv_exact(self, n: int) -> bytes | None:
        try:
            data = self._attached.reader.read(n)
        except (OSError, ValueError):  # ValueError: the reader was closed under us (kill)
            return None
        return data if len(data) == n else None

    def _pump(self) -> None:
        names = {1: "stdout", 2: "stderr"}
        try:
            while True:
                head = self._recv_exact(8)
                if head is None:
                    break
                size = struct.unpack(">I", head[4:])[0]
                payload = self._recv_exact(size) if size else b""
                if payload is None:
                    break
                name = names.get(head[0])
                if name is not None and payload and not self._killed:
                    asyncio.run_coroutine_threadsafe(self._put(name, payload), self.loop).result()
        except RuntimeError:
            return  # the event loop is closed: nobody is listening any more
        try:
            code = self._api.exec_inspect(self._exec_id).get("ExitCode")
        except Exception:  # noqa: BLE001 - container already removed
            code = None
        try:
            self.loop.call_soon_threadsafe(self._finish, 137 if code is None else int(code))
        except RuntimeError:
            pass

    def _finish(self, code: int) -> None:
        self._returncode = code
        for name in self._eof:
            self._eof[name] = True
        self._changed.set()
        if not self._exited.done():
            self._exited.set_result(None)

    async def write_stdin(self, data: bytes) -> None:
        async with self._write_lock:
            if self._returncode is not None:
                raise SandboxError("the sandbox process has exited")
            try:
                await asyncio.to_thread(self._sock.sendall, data)
            except OSError as exc:
                raise SandboxError(f"the sandbox process closed its stdin: {exc}") from exc

    def _kill_group(self) -> None:
        script = (f'for i in $(seq 40); do [ -s {self._pidfile} ] && break; sleep 0.05; done; '
                  f'p=$(cat {self._pidfile} 2>/dev/null); [ -n "$p" ] && kill -9 -"$p" "$p" 2>/dev/null; '
                  f'rm -f {self._pidfile}; true')
        try:
            kid = self._api.exec_create(self._cid, ["/bin/sh", "-c", script], user=self._user)
            self._api.exec_start(kid)
        except Exception:  # noqa: BLE001 - container gone: so is the process
            pass

    async def kill(self) -> None:
        if not self._killed:
            # Even after the program ended: what it left in its process group may still run.
            self._killed = True
            for event in self._room.values():
                event.set()
            await asyncio.to_thread(self._kill_group)
            try:
                await asyncio.wait_for(asyncio.shield(self._exited), _REAP_GRACE_S)
            except asyncio.TimeoutError:
                pass
        self._killed = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            await asyncio.wait_for(asyncio.shield(self._exited), _REAP_GRACE_S)
        except asyncio.TimeoutError:
            self._finish(137)
        self._attached.close()

    async def wait(self, timeout: float | None = None) -> int | None:
        try:
            await asyncio.wait_for(asyncio.shield(self._exited), timeout)
        except asyncio.TimeoutError:
            return None
        return self._returncode
