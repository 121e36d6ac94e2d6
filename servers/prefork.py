"""N server processes on one port: the master of ``envs serve NAME --workers N``.

The master imports and builds the environment once, then forks the workers: a fork shares
the imported modules (copy-on-write), so a worker is serving in milliseconds rather than
after a fresh interpreter's imports. Each worker gets its own listening socket on the
shared port (SO_REUSEPORT: the kernel spreads new connections over the workers evenly, even
in a burst, which one shared accept queue does not) and runs its own event loop, its own
share of the CPU pool (``cpu_workers`` split over the workers, at least one each: never
N x cores pool processes) and its own sessions, routed by id (``servers/worker_group.py``).

The master keeps the port with a bound, non-listening socket, so ``--port 0`` works: it binds
once, learns the port, and every worker (a restarted one too) listens on that port. It never
runs an event loop or a thread (it stays safe to fork from) and supervises:

* a worker that dies after it was serving is restarted from the master (its sessions are
  lost: their calls answer 410 and the rollout is re-seeded); more than ``_MAX_RESTARTS``
  deaths within a minute stop the server (exit 1) instead of looping;
* a worker that dies before it ever served stops the start (exit 1);
* a worker that exits 0 drained after a signal (Ctrl-C reaches the whole process group): the
  server stops with it rather than restart it;
* SIGTERM/SIGINT go to every worker, which drains and exits; the master exits 0 when all did.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import os
import select
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable

from servers.environment import Environment

log = logging.getLogger("verigym.server")

_MAX_RESTARTS = 5  # deaths within _RESTART_WINDOW_S before the server gives up
_RESTART_WINDOW_S = 60.0
_STOP_GRACE_S = 40.0  # a draining worker gets this long before SIGKILL
_PR_SET_PDEATHSIG = 1
_STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}


def pool_share(total: int | None, workers: int, cores: int) -> int:
    """CPU-pool processes per worker: the configured total (null = the cores this process may
    use) split over the workers, at least one each."""
    return max(1, -(-(total or cores) // workers))


@dataclass
class _Worker:
    index: int
    pid: int
    ready_fd: int  # read end: one byte when the worker serves; EOF if it died first
    ready: bool = False


class Prefork:
    """Fork ``count`` workers of ``env`` on ``host:port`` and supervise them (``run``)."""

    def __init__(self, env: Environment, host: str, port: int, count: int, *, cores: int):
        from servers.app import bind_socket

        self.env, self.host, self.count = env, host, count
        self._bind = bind_socket
        self._holder = bind_socket(host, port, reuse_port=True, listen=False)
        self.port = self._holder.getsockname()[1]
        self.socket_dir = tempfile.mkdtemp(prefix=f"verigym-{env.name}-")  # 0700: peers only
        if env.uses_cpu_pool:
            env.config.cpu_workers = pool_share(env.config.cpu_workers, count, cores)
        self.workers: dict[int, _Worker] = {}
        self._stop_signal: int | None = None
        self._deaths: deque[float] = deque()

    @property
    def url(self) -> str:
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{shown}:{self.port}"

    # ---- forking -------------------------------------------------------------------------
    def _fork(self, index: int) -> None:
        sock = self._bind(self.host, self.port, reuse_port=True)
        read_fd, write_fd = os.pipe()
        master = os.getpid()
        # Signals held over the fork: a SIGTERM landing between fork and the worker's own handlers
        # would otherwise run the master's handler in the worker (and be lost there).
        signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
        pid = os.fork()
        if pid == 0:  # the worker: never returns into the master's code
            code = 1
            try:
                for sig in _STOP_SIGNALS:
                    signal.signal(sig, signal.SIG_DFL)
                signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
                os.close(read_fd)
                for other in self.workers.values():
                    os.close(other.ready_fd)
                self._holder.close()
                code = _worker_main(self.env, sock, index, self.count, self.socket_dir, write_fd, master)
            except BaseException:  # noqa: BLE001 - reported, then the worker exits non-zero
                logging.getLogger("verigym.server").exception("worker %d failed", index)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
        os.close(write_fd)
        sock.close()  # the worker holds it; a copy here would take connections nobody accepts
        self.workers[index] = _Worker(index, pid, read_fd)

    # ---- supervising ---------------------------------------------------------------------
    def run(self, on_ready: Callable[[str], None]) -> int:
        """Fork, report ready once every worker serves, supervise until signalled. Exit code."""
        previous = {sig: signal.signal(sig, self._on_signal) for sig in _STOP_SIGNALS}
        # Everything imported and built so far, frozen once here: each worker's own collect +
        # freeze at start (servers/app.py) then walks only what it built itself, not the whole
        # inherited heap again (sympy, reasoning_gym: ~0.07 CPU-s per worker), and does not
        # write the shared pages (copy-on-write) while doing it.
        gc.collect()
        gc.freeze()
        try:
            for index in range(self.count):
                self._fork(index)
            announced = False
            while self._stop_signal is None:
                waiting = [w.ready_fd for w in self.workers.values() if not w.ready]
                if waiting:
                    readable = select.select(waiting, [], [], 0.2)[0]
                else:
                    readable = []
                    time.sleep(0.2)
                for fd in readable:
                    worker = next(w for w in self.workers.values() if w.ready_fd == fd)
                    worker.ready = bool(os.read(fd, 1))
                if not announced and all(w.ready for w in self.workers.values()):
                    announced = True
                    on_ready(self.url)
                if not self._reap(announced):
                    self._stop_all()
                    return 1
            self._stop_all()
            return 0
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self._holder.close()
            shutil.rmtree(self.socket_dir, ignore_errors=True)

    def _on_signal(self, sig: int, _frame: object) -> None:
        self._stop_signal = sig

    def _reap(self, serving: bool) -> bool:
        """Restart dead workers; False when the server must stop instead."""
        for worker in list(self.workers.values()):
            pid, status = os.waitpid(worker.pid, os.WNOHANG)
            if pid == 0:
                continue
            os.close(worker.ready_fd)
            code = os.waitstatus_to_exitcode(status)
            if code == 0 or self._stop_signal is not None:
                # A worker drains and exits 0 only when signalled: a Ctrl-C or a group SIGTERM that
                # the master is about to see too. The server stops; nothing is restarted.
                del self.workers[worker.index]
                self._stop_signal = self._stop_signal or signal.SIGTERM
                continue
            if not worker.ready:
                print(f"{self.env.name}: worker {worker.index} exited with {code} before it served; stopping",
                      file=sys.stderr, flush=True)
                del self.workers[worker.index]
                return False
            now = time.monotonic()
            self._deaths.append(now)
            while self._deaths and now - self._deaths[0] > _RESTART_WINDOW_S:
                self._deaths.popleft()
            if len(self._deaths) > _MAX_RESTARTS:
                print(f"{self.env.name}: {len(self._deaths)} worker deaths within {_RESTART_WINDOW_S:g}s "
                      f"(last: worker {worker.index}, exit {code}); stopping", file=sys.stderr, flush=True)
                del self.workers[worker.index]
                return False
            print(f"{self.env.name}: worker {worker.index} (pid {worker.pid}) exited with {code}; restarting it "
                  "(its open sessions are gone)", file=sys.stderr, flush=True)
            del self.workers[worker.index]
            try:
                os.unlink(os.path.join(self.socket_dir, f"w{worker.index}.sock"))
            except FileNotFoundError:
                pass
            self._fork(worker.index)
        return True

    def _stop_all(self) -> None:
        for worker in self.workers.values():
            _signal(worker.pid, signal.SIGTERM)
        deadline = time.monotonic() + _STOP_GRACE_S
        pending = dict(self.workers)
        while pending:
            for index, worker in list(pending.items()):
                if os.waitpid(worker.pid, os.WNOHANG)[0] != 0:
                    os.close(worker.ready_fd)
                    del pending[index]
            if pending and time.monotonic() > deadline:
                for worker in pending.values():
                    _signal(worker.pid, signal.SIGKILL)
                deadline = float("inf")
            time.sleep(0.02)
        self.workers.clear()


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _worker_main(env: Environment, sock: socket.socket, index: int, count: int, socket_dir: str,
                 ready_fd: int, master: int) -> int:
    from servers.app import run_event_loop, serve_until_signalled
    from servers.worker_group import WorkerGroup

    try:  # the master gone (SIGKILL) must not leave this worker serving on its own
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass
    if os.getppid() != master:  # it died before the line above took effect
        return 1

    def ready(_url: str) -> None:
        os.write(ready_fd, b"1")
        os.close(ready_fd)

    run_event_loop(serve_until_signalled(env, "", 0, on_ready=ready, sock=sock,
                                         group=WorkerGroup(index, count, socket_dir)))
    return 0
