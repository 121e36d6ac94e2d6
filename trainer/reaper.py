"""What is left of a local `driver run` that was killed, ended: ``python -m trainer.reaper PID``.

`driver run` starts this beside a local run (:func:`start_reaper`). It notes, once a second, every
process below the driver — the environment servers, the generation server, Ray's head processes,
its workers and agents — by pid and start time (a pid alone may be reused). When the driver dies
(the kernel tells it: ``PR_SET_PDEATHSIG``) it gives them ``GRACE_S`` to end on their own (the
servers get SIGTERM from the kernel too and drain; Ray's head shares the driver's fate), then
SIGKILLs those still there: after a SIGKILL or the OOM killer, Ray's dashboard and runtime-env
agents and its workers would otherwise outlive the driver by a minute or more. After a normal
exit the driver has stopped everything already and there is nothing to do.

Not for ``--batch`` jobs: those are meant to outlive the driver (they are not started beside it).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

GRACE_S = 10.0
POLL_S = 1.0


def start_reaper() -> subprocess.Popen | None:
    """Start the reaper for this process (from the main thread: the kernel's parent-death signal
    follows the thread that started it). None where that cannot work (another thread)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return subprocess.Popen([sys.executable, "-m", "trainer.reaper", str(os.getpid())], stdin=subprocess.DEVNULL,
                            start_new_session=True)  # a Ctrl-C in the terminal is not its business


def _watch(parent_pid: int) -> None:
    import psutil

    died = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: died.set())
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    seen: dict[int, float] = {}  # pid -> start time of every process ever seen below the driver
    me = os.getpid()
    try:
        parent = psutil.Process(parent_pid)
    except psutil.NoSuchProcess:
        return
    while not died.is_set() and os.getppid() == parent_pid:
        try:
            for p in parent.children(recursive=True):
                if p.pid != me:
                    seen.setdefault(p.pid, p.create_time())
        except psutil.Error:
            pass
        died.wait(POLL_S)
    deadline = time.monotonic() + GRACE_S
    left = _still_there(seen)
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = _still_there(seen)
    for p in left:
        try:
            p.kill()
        except psutil.Error:
            pass


def _still_there(seen: dict[int, float]) -> list:
    import psutil

    alive = []
    for pid, started in seen.items():
        try:
            p = psutil.Process(pid)
            if p.create_time() == started and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(p)
        except psutil.Error:
            pass
    return alive


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m trainer.reaper DRIVER_PID")
    _watch(int(sys.argv[1]))
