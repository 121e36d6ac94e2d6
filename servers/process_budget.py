"""The per-user process limit, as a user (not root) meets it.

RLIMIT_NPROC counts every process *and thread* of the real uid — the user's shell, editor, test
runner and servers included — and is not enforced for root. A start that needs many threads
(Ray's local cluster: ~350 for the tiny recipe) or that cannot fork at all says so in one line,
with what is running, instead of dying in a thread constructor or a BlockingIOError traceback.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path

HOW_TO_RAISE = "ulimit -u / prlimit --nproc / systemd LimitNPROC= / Slurm's PropagateResourceLimits"


def enforced_limit() -> int | None:
    """The soft RLIMIT_NPROC when the kernel enforces it on this process (not root), else None."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    if soft == resource.RLIM_INFINITY or os.geteuid() == 0:
        return None
    return soft


def threads_of_uid(uid: int | None = None) -> int:
    """Threads (what RLIMIT_NPROC counts) of every process of ``uid`` (default: this real uid)."""
    uid = os.getuid() if uid is None else uid
    total = 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if proc.stat().st_uid != uid:
                continue
            status = (proc / "status").read_text()
        except OSError:
            continue
        total += next((int(line.split()[1]) for line in status.splitlines() if line.startswith("Threads:")), 1)
    return total


def shortfall(needed: int, what: str) -> str | None:
    """One line when fewer than ``needed`` threads are left under the per-user limit, else None."""
    limit = enforced_limit()
    if limit is None:
        return None
    running = threads_of_uid()
    if limit - running >= needed:
        return None
    return (f"{what} needs about {needed} threads, but RLIMIT_NPROC is {limit} and counts every thread of uid "
            f"{os.getuid()} ({running} running now): raise it ({HOW_TO_RAISE})")


def fork_failure_hint(errno_value: int | None) -> str:
    """Why a fork failed with EAGAIN, when the per-user limit is the likely cause ("" otherwise)."""
    import errno

    limit = enforced_limit()
    if errno_value != errno.EAGAIN or limit is None:
        return ""
    return (f"; the RLIMIT_NPROC inherited by envs serve is {limit} and counts every thread of uid {os.getuid()} "
            f"({threads_of_uid()} running now): raise it ({HOW_TO_RAISE})")
