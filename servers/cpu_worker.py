"""What runs inside a CPU pool worker: receive a pickled call, run it, send the result back.

One loop for both ways a worker starts (servers/cpu_pool.py): forked from the zygote
(servers/cpu_zygote.py, preload already imported there) or as a fresh interpreter
(:func:`child_entry`). Both of those modules import this one; it imports neither.
"""

from __future__ import annotations

import importlib
import os
import pickle
import resource
import sys
import time
import traceback
from multiprocessing.connection import Connection


def worker_main(conn: Connection, preload: tuple[str, ...], memory_mb: int) -> None:
    if memory_mb > 0:
        limit = memory_mb * 1024 * 1024
        try:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        except (ValueError, OSError):
            pass
    for module in preload:
        importlib.import_module(module)
    # Each message carries the worker's CPU time once it is idle again: the parent's baseline for
    # telling, at a deadline, how much CPU the call itself used (CpuTimeout.cpu_s).
    conn.send(("ready", os.getpid(), time.process_time()))
    while True:
        try:
            raw = conn.recv_bytes()
        except (EOFError, OSError):
            return
        try:
            fn, args = pickle.loads(raw)  # inside the try: an unpicklable task is an error, not a dead worker
            result = fn(*args)
            conn.send(("ok", result, time.process_time()))
        except MemoryError:
            conn.send(("err", "MemoryError: the scoring function exceeded the worker memory limit", time.process_time()))
        except BaseException as exc:  # noqa: BLE001 - everything is reported to the caller
            conn.send(("err", "".join(traceback.format_exception(exc))[-4000:], time.process_time()))


def child_entry() -> None:
    """A fresh interpreter's worker: ``python -c 'from servers.cpu_worker import child_entry; child_entry()' FD MB PRELOAD``."""
    fd, memory_mb, preload = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    worker_main(Connection(fd), tuple(filter(None, preload.split(","))), memory_mb)
