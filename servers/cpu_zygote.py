"""A clean process that imports the CPU pool's modules once and forks pool workers on request.

A fresh interpreter per pool worker (``servers/cpu_pool.py``'s fallback) imports sympy or
reasoning-gym again for every worker and for every replacement of a killed one: about a
CPU-second each, which is most of a math server's start and leaves a slot empty for that long
after each deadline kill. The zygote is forked by ``envs serve``'s child before any event
loop or thread exists, after that child imported the preload modules (once, shared by the
zygote and every server worker forked later), and then forks one worker per request: a worker is ready in milliseconds with everything
imported, and nothing of an event loop is ever copied into it.

Protocol: a ``SOCK_SEQPACKET`` pair; a request is the worker's end of a fresh socket pair
(passed with SCM_RIGHTS) and its memory limit. The worker announces its pid on that socket
(``("ready", pid, cpu_s)``), so the zygote never answers anything and any number of server workers
(the forks of a multi-worker server) can share one zygote socket. The zygote reaps its
children itself (SIGCHLD ignored), dies with its parent (PR_SET_PDEATHSIG), and exits when the
last holder of its socket is gone.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import select
import signal
import socket
import struct
from multiprocessing.connection import Connection

from servers.cpu_worker import worker_main

_PR_SET_PDEATHSIG = 1
_REQUEST = struct.Struct("q")  # the worker's memory limit in MB


class Zygote:
    def __init__(self, preload: tuple[str, ...]):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                ours.close()
                code = _zygote_main(theirs, preload, parent)
            finally:
                os._exit(code)
        theirs.close()
        self.pid, self._sock = pid, ours
        self._pidfd = os.pidfd_open(pid)

    @property
    def alive(self) -> bool:
        return not select.select([self._pidfd], [], [], 0)[0]

    def spawn(self, memory_mb: int, preload: tuple[str, ...] = ()) -> Connection:
        """A new worker's connection; it sends ``("ready", pid, cpu_s)`` once it can take work. ``preload``
        modules the zygote did not import are imported by the worker."""
        ours, theirs = socket.socketpair()
        try:
            message = _REQUEST.pack(memory_mb) + ",".join(preload).encode()
            socket.send_fds(self._sock, [message], [theirs.fileno()])
        finally:
            theirs.close()
        return Connection(ours.detach())


class ForkedProcess:
    """The ``Popen`` subset the pool uses, for a worker that is the zygote's child, not ours
    (a pidfd: no pid-reuse race, and it works on a process we cannot wait for)."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self._fd: int | None = None

    def attach(self, pid: int) -> None:
        self.pid, self._fd = pid, os.pidfd_open(pid)

    def poll(self) -> int | None:
        if self._fd is None:
            return None
        return -1 if select.select([self._fd], [], [], 0)[0] else None

    def kill(self) -> None:
        if self._fd is not None:
            try:
                signal.pidfd_send_signal(self._fd, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def wait(self, timeout: float | None = None) -> None:
        if self._fd is not None:
            select.select([self._fd], [], [], timeout)
            os.close(self._fd)
            self._fd = None


_zygote: Zygote | None = None


def start_zygote(preload: tuple[str, ...]) -> Zygote:
    """Import ``preload`` here, then fork the zygote for this process (and the server workers it
    will fork); call it before any event loop or thread starts. Pools created afterwards fork
    their workers from it. Importing here, not in the zygote, makes it one import for all: the
    server workers forked later share it too (reasoning_gym's server reads the library itself)."""
    global _zygote
    for module in preload:
        importlib.import_module(module)
    _zygote = Zygote(preload)
    return _zygote


def current() -> Zygote | None:
    return _zygote if _zygote is not None and _zygote.alive else None


def _zygote_main(sock: socket.socket, preload: tuple[str, ...], parent: int) -> int:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        return 1
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the server's to handle; we follow it
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # workers are reaped by the kernel
    for module in preload:
        importlib.import_module(module)
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(sock, 65536, 1)
        except OSError:
            return 1
        if not message:  # every holder of the other end is gone
            return 0
        if not fds:
            continue
        (memory_mb,) = _REQUEST.unpack_from(message)
        extra = tuple(filter(None, message[_REQUEST.size:].decode().split(",")))
        if os.fork() == 0:
            code = 1
            try:
                sock.close()
                os.setsid()  # like the fresh-interpreter workers: no terminal signals
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                worker_main(Connection(fds[0]), extra, memory_mb)
                code = 0
            finally:
                os._exit(code)
        os.close(fds[0])
