"""Which host processes are inside the process backend's sandboxes (for tests that check nothing
runs, or nothing is left). As root every sandbox runs as a uid of its own, so its processes are that
uid's; unprivileged every sandbox runs as the caller, so they are what bubblewrap started from this
test process."""

from __future__ import annotations

import psutil


def sandbox_pids(uid: int | None) -> set[int]:
    """Pids of the sandbox running as ``uid``, or (``None``: unprivileged) of every sandbox this
    process started."""
    if uid is not None:
        return {p.pid for p in psutil.process_iter(["uids"]) if p.info["uids"] and p.info["uids"].real == uid}
    pids: set[int] = set()
    for p in psutil.Process().children(recursive=True):
        try:
            if p.name() == "bwrap":
                pids |= {c.pid for c in p.children(recursive=True)}
        except psutil.NoSuchProcess:
            continue
    return pids
