"""Run one long-lived child on a node and stop it on request: SIGTERM/SIGINT to this process, or a
stop file appearing on the shared job folder.

Why the file: on Slurm the job script cannot signal a process on another node, and ``scancel
--signal`` signals every process of a step at once (Ray's GCS before its raylet has drained, an
environment server before ``envs serve`` has asked it to drain). Touching ``RUN/stop-<role>``
lets each step's leader stop its own child in order. The child also gets SIGTERM from the kernel
if this leader dies first (SIGKILL, the OOM killer: trainer/child_servers.py), so an orphaned
``ray start --block`` or ``envs serve`` does not keep running. Also: the address a node's servers
bind (the interface that reaches the Ray head). Standard library only (and trainer/child_servers.py, which is).
"""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Callable

from trainer.child_servers import ending_with_this_process


def run_supervised(argv: list[str], stop_file: Path | None, on_poll: Callable[[], int | None] | None = None,
                   poll_s: float = 0.2, stopped_status: frozenset[int] = frozenset()) -> int:
    """Start ``argv``; forward SIGTERM/SIGINT to it; SIGTERM it when ``stop_file`` exists; return its status.

    ``stopped_status``: exit statuses the child reports when it stops because it was asked to (for
    ``ray start --block``, 1: its SIGTERM handler drains the node and calls ``sys.exit(1)``); after a
    requested stop they count as success, so a job that ended cleanly leaves no
    ``srun: error: ... Exited with exit code 1`` in its log.
    ``on_poll`` runs every ``poll_s``; when it returns a status, the child is stopped (SIGTERM, 30 s,
    SIGKILL) and that status returned (a check of the child's readiness that failed for good)."""
    proc = subprocess.Popen(ending_with_this_process(argv))
    requested = False

    def forward(_sig: int, _frame: object) -> None:
        nonlocal requested
        requested = True
        proc.send_signal(signal.SIGTERM)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, forward)
    while proc.poll() is None:
        if on_poll is not None and (verdict := on_poll()) is not None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            return verdict
        if not requested and stop_file is not None and stop_file.exists():
            requested = True
            proc.send_signal(signal.SIGTERM)
        time.sleep(poll_s)
    if requested and proc.returncode in stopped_status:
        return 0
    return proc.returncode


def reachable_address(route_to: str) -> str:
    """This node's address on the interface that routes to ``route_to`` (no packet is sent)."""
    if route_to.startswith("127.") or route_to == "localhost":
        return "127.0.0.1"
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((route_to, 9))
            return s.getsockname()[0]
    except OSError:  # no route to it from here: the address this node's name resolves to
        return socket.gethostbyname(socket.gethostname())
