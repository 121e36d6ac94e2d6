"""Which host processes are inside the process backend's sandboxes (for tests that check nothing
runs, or nothing is left). As root every sandbox runs as a uid of its own, so its processes are that
uid's; unprivileged every sandbox runs as the caller, so they are what bubblewrap started from this
test process."""

from __future__ import annotations

import os
from pathlib import Path

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


def host_has(path: Path) -> bool:
    """Whether ``path`` exists on the host.

    Unprivileged, the test cannot search a folder such as ``/root`` (0700 on a stock machine):
    ``Path.exists`` raises ``PermissionError``. The sandboxed program runs as this same user, so
    nothing it wrote can be in a folder this user cannot even search.
    """
    try:
        return path.exists()
    except PermissionError:
        return False


def uid_inside(sandbox) -> int:
    """The uid a sandbox's programs see: its own uid as root; unprivileged, the user namespace
    maps the caller's uid to itself."""
    return sandbox.uid if sandbox.uid is not None else os.getuid()


def tmp_entries_of_binds(sandbox) -> list[str]:
    """What a sandbox's own /tmp shows before any run: the top folders of the read-only binds
    that live under /tmp (an interpreter or venv installed there, as a user's may be)."""
    return sorted({Path(root).relative_to("/tmp").parts[0] for root in sandbox.layout.python.roots
                   if root.startswith("/tmp/")})
