"""Run one long-lived child on a node and stop it on request: SIGTERM/SIGINT to this process, or a
stop file appearing on the shared job folder.

Why the file: on Slurm the job script cannot signal a process on another node, and ``scancel
--signal`` signals every process of a step at once (Ray's GCS before its raylet has drained, an
environment server before ``envs serve`` has asked it to drain). Touching ``RUN/stop-<role>``
lets each step's leader stop its own child in order. Standard library only.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path
from typing import Callable


def run_supervised(argv: list[str], stop_file: Path | None, on_poll: Callable[[], None] | None = None,
                   poll_s: float = 0.2) -> int:
    """Start ``argv``; forward SIGTERM/SIGINT to it; SIGTERM it when ``stop_file`` exists; return its status."""
    proc = subprocess.Popen(argv)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda _s, _f: proc.send_signal(signal.SIGTERM))
    stopping = False
    while proc.poll() is None:
        if on_poll is not None:
            on_poll()
        if not stopping and stop_file is not None and stop_file.exists():
            proc.send_signal(signal.SIGTERM)
            stopping = True
        time.sleep(poll_s)
    return proc.returncode
