"""Host side of a sandbox's workspace: a private directory (a size-capped tmpfs when we are
root), safe upload/download into it, and a per-sandbox Unix uid lease.

Why a dedicated uid per sandbox: RLIMIT_NPROC counts processes per real uid, and the kernel
exempts uid 0 from it entirely. Running each sandbox's program as its own otherwise-unused
uid makes the process limit mean "processes of this sandbox", lets ``reset()`` find every
leftover process by uid, and keeps sandboxes unable to signal one another.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import shutil
import stat
from pathlib import Path
from typing import Mapping

from .base import SandboxError, SandboxPathError

_libc = ctypes.CDLL(None, use_errno=True)
_MS_NOSUID, _MS_NODEV = 0x2, 0x4
_MNT_DETACH = 0x2
# What a path the workspace's contents block gives: a directory where a file goes (EISDIR),
# a symlink (ELOOP: O_NOFOLLOW), a file where a directory goes (ENOTDIR, EEXIST), write
# bits taken away (EACCES, EPERM), a FIFO or socket (ENXIO). Any other OSError is the host's problem.
_PATH_ERRNOS = frozenset({errno.EISDIR, errno.ELOOP, errno.ENOTDIR, errno.EEXIST, errno.EACCES, errno.EPERM,
                          errno.ENXIO})


def is_root() -> bool:
    return os.geteuid() == 0


class UidLease:
    """Claim an unused uid from ``[base, base+count)`` across processes via flock'd files."""

    def __init__(self, lock_dir: Path, base: int, count: int) -> None:
        lock_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        for uid in range(base, base + count):
            fd = os.open(lock_dir / f"{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self.uid, self._fd = uid, fd
            return
        raise SandboxError(f"no free sandbox uid in [{base}, {base + count})")

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing drops the flock
            self._fd = -1


def mount_tmpfs(path: Path, size_mb: int, uid: int) -> bool:
    """Mount a fresh tmpfs on ``path`` owned by ``uid``; False when not permitted here."""
    opts = f"size={size_mb}m,mode=0700,uid={uid},gid={uid}".encode()
    rc = _libc.mount(b"tmpfs", str(path).encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, opts)
    if rc != 0:
        return False
    return True


def umount(path: Path) -> None:
    if _libc.umount2(str(path).encode(), _MNT_DETACH) != 0:
        err = ctypes.get_errno()
        if err not in (errno.EINVAL, errno.ENOENT):  # EINVAL: not a mount point
            raise SandboxError(f"umount {path}: {os.strerror(err)}")


def wipe_dir(path: Path) -> None:
    """Remove everything under ``path`` even if the program chmod'ed things to 000 or the
    workspace itself to read-only. Root ignores those modes; an unprivileged server (whose
    sandboxes run as its own uid) gets its write and search bits back first."""
    retried: set[str] = set()

    def fix_and_retry(func, p, exc_info):  # type: ignore[no-untyped-def]
        if p in retried:  # chmod did not help: a real error, not a mode the program set
            raise exc_info[1]
        retried.add(p)
        try:
            os.chmod(os.path.dirname(p), 0o700)
            if os.path.isdir(p) and not os.path.islink(p):
                os.chmod(p, 0o700)
                # func may be the walk's own os.open/os.scandir of p: redo the walk below p
                shutil.rmtree(p, onerror=fix_and_retry)
            else:
                os.unlink(p)
        except FileNotFoundError:
            pass

    os.chmod(path, 0o700)
    for entry in list(os.scandir(path)):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, onerror=fix_and_retry)
        else:
            os.unlink(entry.path)


def _resolve_inside(root: Path, rel: str) -> Path:
    """Map a workspace-relative path to the host, refusing anything that escapes ``root``.

    Symlinks the program created are resolved on the host; one pointing outside the
    workspace (``/etc/shadow``, ``../..``) is refused rather than followed as root.
    """
    real = Path(os.path.realpath(root / rel))
    root_real = Path(os.path.realpath(root))
    if real != root_real and root_real not in real.parents:
        raise SandboxPathError(f"path {rel!r} escapes the sandbox workspace")
    return real


def write_files(root: Path, files: Mapping[str, bytes | str], owner: int | None,
                workdir_in_sandbox: str) -> None:
    """Write ``files`` into the workspace. SandboxPathError: what is in the workspace blocks
    a path (see ``_PATH_ERRNOS``); SandboxError: anything else went wrong on the host."""
    for rel, content in files.items():
        try:
            _write_one(root, rel, content, owner, workdir_in_sandbox)
        except OSError as exc:
            error = SandboxPathError if exc.errno in _PATH_ERRNOS else SandboxError
            raise error(f"cannot upload {rel!r}: {exc.strerror or exc}") from exc


def _write_one(root: Path, rel: str, content: bytes | str, owner: int | None, workdir_in_sandbox: str) -> None:
    if os.path.isabs(rel):
        # Absolute paths are accepted only inside the sandbox's own workdir.
        if not (rel == workdir_in_sandbox or rel.startswith(workdir_in_sandbox.rstrip("/") + "/")):
            raise SandboxError(f"cannot upload to {rel!r}: outside the workdir")
        rel = os.path.relpath(rel, workdir_in_sandbox)
    parent = _resolve_inside(root, os.path.dirname(rel) or ".")
    _makedirs_owned(root, parent, owner)
    target = parent / os.path.basename(rel)
    data = content.encode() if isinstance(content, str) else bytes(content)
    # O_NONBLOCK: a FIFO the program left at the path would block the open forever (no
    # reader); with it the open fails (ENXIO) or gives a non-regular file, refused below.
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o644)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise SandboxPathError(f"cannot upload {rel!r}: something other than a regular file is there")
        view = memoryview(data)
        while view:  # os.write may write less than asked for large buffers
            view = view[os.write(fd, view):]
        if owner is not None:
            os.fchown(fd, owner, owner)
    finally:
        os.close(fd)


def _makedirs_owned(root: Path, path: Path, owner: int | None) -> None:
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        os.mkdir(d, 0o755)
        if owner is not None:
            os.chown(d, owner, owner)


def read_file(root: Path, rel: str, max_bytes: int, workdir_in_sandbox: str) -> bytes:
    if os.path.isabs(rel):
        if not (rel == workdir_in_sandbox or rel.startswith(workdir_in_sandbox.rstrip("/") + "/")):
            raise SandboxError(f"cannot download {rel!r}: outside the workdir")
        rel = os.path.relpath(rel, workdir_in_sandbox)
    real = _resolve_inside(root, rel)
    fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise SandboxPathError(f"{rel!r} is not a regular file")
        chunks, size = [], 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            size += len(chunk)
            if size > max_bytes:
                raise SandboxError(f"{rel!r} is larger than max_bytes={max_bytes}")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
