"""The servers `driver run` starts on this machine — the environment servers (``envs serve``,
trainer/fleet.py) and the generation server (``envs model serve``, trainer/rollout/generation_server.py):
how they are started so that they end with the driver, and how one that exits is reported. The
same tie keeps an attached local job's script to `driver run --run` (trainer/launch/submit.py) and
each job step's child to its leader (trainer/launch/node_process.py).

Ending with the driver. Each server leads its own session (a Ctrl-C in the driver's terminal is the
driver's to handle: it stops the servers in order, after its final checkpoint). A driver that dies
without that cleanup — SIGKILL, the OOM killer, a closed terminal's SIGHUP, a crash — must not
leave them running, so each is started through :func:`ending_with_this_process`: a short exec
wrapper (``python -m trainer.child_servers PID -- CMD...``) that asks the kernel for SIGTERM when
its parent dies (``PR_SET_PDEATHSIG``) and then becomes CMD (same pid; the setting survives the
exec). SIGTERM is what a normal stop sends: ``envs serve`` forwards it to its workers and drains,
``envs model serve`` stops. A wrapper rather than ``preexec_fn``: the driver has threads by then,
and Python code between fork and exec may deadlock on a lock another thread held. The kernel sends
the signal when the *thread* that started the child ends, so only a server started from the main
thread is tied this way (:func:`ending_with_this_process` leaves ``argv`` as is in another thread
rather than tie a server's life to a worker thread's); `driver run` starts its servers there.

An exited server. :func:`check_running` raises :class:`ServerExited` for a server process that is no
longer running: which server, its pid, how it ended (status or signal), its log and the log's last
line — what `driver run` prints as its one closing line (trainer/run_command.py) — and the log's
last lines, which go to the run's error.log.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


class ServerExited(RuntimeError):
    """A server the driver started is no longer running while the run needs it."""

    def __init__(self, what: str, command: str, pid: int, returncode: int, log_path: Path | None):
        self.what, self.command, self.pid, self.returncode, self.log_path = what, command, pid, returncode, log_path
        self.log_tail = log_tail(log_path) if log_path else []
        super().__init__(f"{what} ({command}, pid {pid}) {describe_exit(returncode)}")

    def where_to_look(self) -> str:
        """Its log and the log's last line."""
        if self.log_path is None:
            return ""
        last = self.log_tail[-1] if self.log_tail else ""
        last = last if len(last) <= 300 else last[:297] + "..."
        return f"its log: {self.log_path}" + (f" (last line: {last})" if last else "")


def describe_exit(returncode: int) -> str:
    """``-9`` -> ``was killed by SIGKILL``; ``3`` -> ``exited with status 3``."""
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with status {returncode}"


def log_tail(path: Path, lines: int = 20) -> list[str]:
    """The last non-empty lines of a log (only its end is read)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 16384))
            text = f.read().decode(errors="replace")
    except OSError:
        return []
    return [x.rstrip() for x in text.splitlines() if x.strip()][-lines:]


def check_running(what: str, command: str, process: subprocess.Popen | None, log_path: Path | None) -> None:
    """Raise :class:`ServerExited` if ``process`` has ended (it is reaped here; no wait)."""
    if process is not None and process.poll() is not None:
        raise ServerExited(what, command, process.pid, process.returncode, log_path)


def ending_with_this_process(argv: list[str]) -> list[str]:
    """``argv`` wrapped so that the process gets SIGTERM when this one dies (see the module doc)."""
    if threading.current_thread() is not threading.main_thread():
        return list(argv)
    return [sys.executable, "-m", "trainer.child_servers", str(os.getpid()), "--", *argv]


def _exec_ending_with_parent(parent_pid: int, argv: list[str]) -> None:
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
            err = ctypes.get_errno()
            raise SystemExit(f"child_servers: prctl(PR_SET_PDEATHSIG) failed: {os.strerror(err)}")
    if os.getppid() != parent_pid:  # the parent died before the setting was in place
        raise SystemExit(f"child_servers: the parent ({parent_pid}) has exited; not starting {argv[0]}")
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        raise SystemExit("usage: python -m trainer.child_servers PARENT_PID -- CMD [ARG...]")
    _exec_ending_with_parent(int(sys.argv[1]), sys.argv[3:])
