"""A busy machine on demand, the same on any host: this test process and ``spinners`` busy loops
share ONE CPU, so a process the test starts gets about 1/(spinners + 1) of it.

Each busy loop runs in a session of its own: the kernel's autogroup scheduler weighs sessions,
not processes, and on a loaded machine every server and sandbox is its own session (busy loops
started in the test's session would only compete with each other). Affinity is inherited, so
every process the test starts meanwhile (servers, sandboxes) runs on the busy CPU too.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from typing import Iterator

_SPIN = "import os, sys; os.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True: pass"


def _threads() -> list[int]:
    return [int(t) for t in os.listdir("/proc/self/task")]


@contextlib.contextmanager
def busy_cpu(spinners: int) -> Iterator[int]:
    """Pin this process (every thread) and ``spinners`` busy loops to one CPU; yield that CPU."""
    before = {tid: os.sched_getaffinity(tid) for tid in _threads()}
    cpu = max(os.sched_getaffinity(0))
    loops = [subprocess.Popen([sys.executable, "-c", _SPIN, str(cpu)], start_new_session=True,
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for _ in range(spinners)]
    try:
        for tid in _threads():
            with contextlib.suppress(OSError):
                os.sched_setaffinity(tid, {cpu})
        yield cpu
    finally:
        for loop in loops:
            loop.kill()
        for loop in loops:
            loop.wait()
        for tid in _threads():
            with contextlib.suppress(OSError):
                os.sched_setaffinity(tid, before.get(tid, before[os.getpid()]))
