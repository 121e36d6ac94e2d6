"""The bubblewrap command line for one exec, and the limits wrapper around the program.

Layout inside the sandbox: read-only ``/usr`` (+ the ``/bin``, ``/lib*`` links or binds),
a handful of ``/etc`` files, the Python install read-only at its own path, the workspace
(read-write) at ``spec.workdir``, fresh ``/tmp`` tmpfs, ``/proc`` and a minimal ``/dev``.
Nothing else of the host exists: no home, no host ``/tmp``, no ``/work``, no env.

Two modes:
* **root** (servers, CI): bwrap runs privileged and unshares pid/ipc/uts/net/cgroup. The
  program is started through ``prlimit`` (rlimits) and ``setpriv`` (switch to the
  sandbox's own uid, empty groups, no capabilities, no_new_privs). A user namespace is not
  used here on purpose: mapped to uid 0 outside, RLIMIT_NPROC would not apply at all.
* **unprivileged**: ``bwrap --unshare-all`` (user namespace too), ``prlimit`` only; the
  process limit then counts the calling user's processes host-wide (documented limit).
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from .base import Limits

_MIB = 1 << 20
# /etc entries that programs commonly need and that reveal nothing secret about the host.
_ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "alternatives",
              "nsswitch.conf", "mime.types", "protocols", "services")
# Threads of numerical libraries: one each, or OpenBLAS spawns nproc threads and trips
# RLIMIT_NPROC / the address-space limit at import time (a known peer failure).
THREAD_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
              "NUMEXPR_NUM_THREADS": "1", "VECLIB_MAXIMUM_THREADS": "1"}
# Helpers run before the program inside the sandbox; the limit must leave room for them.
_LAUNCHER_PROCS = 2


@dataclass(frozen=True)
class PythonInstall:
    executable: str
    roots: tuple[str, ...]  # directories to bind read-only (prefix, base prefix) if not under /usr

    @classmethod
    def current(cls) -> "PythonInstall":
        return cls.of(sys.executable, (sys.prefix, sys.base_prefix, sys.exec_prefix))

    @classmethod
    def of(cls, executable: str, prefixes: Sequence[str]) -> "PythonInstall":
        roots: list[str] = []
        for p in prefixes:
            real = os.path.realpath(p)
            if real.startswith("/usr/") or real == "/usr" or real in roots:
                continue
            roots.append(real)
        return cls(executable=executable, roots=tuple(roots))

    @property
    def bin_dir(self) -> str:
        return os.path.dirname(self.executable)


def sandbox_env(python: PythonInstall, workdir: str, extra: Mapping[str, str]) -> dict[str, str]:
    env = {"PATH": f"{python.bin_dir}:/usr/local/bin:/usr/bin:/bin", "HOME": workdir,
           "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TMPDIR": "/tmp",
           "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", **THREAD_ENV}
    env.update(extra)
    return env


def limits_argv(limits: Limits, uid: int | None) -> list[str]:
    """``prlimit ... [setpriv ...] --`` prefix that applies limits, then drops to ``uid``."""
    cpu_soft = max(1, math.ceil(limits.cpu_s))
    mem = limits.memory_mb * _MIB
    fsize = limits.max_file_mb * _MIB
    argv = ["prlimit", f"--cpu={cpu_soft}:{cpu_soft + 1}", f"--as={mem}:{mem}",
            f"--nproc={limits.max_processes + _LAUNCHER_PROCS}:{limits.max_processes + _LAUNCHER_PROCS}",
            f"--fsize={fsize}:{fsize}", f"--nofile={limits.max_open_files}:{limits.max_open_files}",
            "--core=0:0", "--"]
    if uid is not None:
        argv += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                 "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs",
                 # Changing uid clears the parent-death signal bwrap set (--die-with-parent);
                 # re-arm it so killing the launcher still kills the sandbox's pid 1.
                 "--pdeathsig=SIGKILL", "--"]
    return argv


def _system_binds() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    for name in _ETC_FILES:
        path = f"/etc/{name}"
        if os.path.exists(path):
            args += ["--ro-bind", path, path]
    return args


@dataclass(frozen=True)
class BwrapLayout:
    """Everything about a sandbox that is fixed at creation."""

    bwrap: str
    host_workdir: Path
    workdir: str
    etc_dir: Path            # holds the generated passwd/group/hosts
    python: PythonInstall
    uid: int | None          # None in unprivileged mode
    extra_ro_binds: tuple[str, ...] = ()

    def argv(self, cmd: Sequence[str], limits: Limits, env: Mapping[str, str],
             status_fd: int | None = None, init_wrapper: bool = True) -> list[str]:
        """``init_wrapper=False`` makes ``cmd`` itself the namespace's pid 1 (the zygote,
        which reaps and kills what its children leave); default: a waiting ``/bin/sh``."""
        privileged = self.uid is not None
        ns = (["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
              if privileged else ["--unshare-all"])
        # --as-pid-1 + a /bin/sh parent (below): the outer bwrap then waitpid()s the
        # namespace's pid 1 itself, so wait4() on bwrap returns the whole tree's CPU time
        # (with bwrap's own init, the outer process exits without reaping and it is lost).
        # Directories bwrap creates for mount points default to 0700 (unreadable to the
        # sandbox uid), so create the ones on the way to binds world-traversable first.
        args = [self.bwrap, *ns, "--die-with-parent", "--new-session", "--as-pid-1",
                *(["--json-status-fd", str(status_fd)] if status_fd is not None else []),
                "--hostname", "sandbox", "--perms", "0755", "--dir", "/etc",
                *_system_binds()]
        for parent in _parents(*self.python.roots, *self.extra_ro_binds, self.workdir):
            args += ["--perms", "0755", "--dir", parent]
        for name in ("passwd", "group", "hosts"):
            args += ["--ro-bind", str(self.etc_dir / name), f"/etc/{name}"]
        for root in (*self.python.roots, *self.extra_ro_binds):
            args += ["--ro-bind", root, root]
        args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
                 "--bind", str(self.host_workdir), self.workdir, "--chdir", self.workdir,
                 "--clearenv"]
        for key, value in env.items():
            args += ["--setenv", key, value]
        args.append("--")
        # pid 1 is a shell that waits for the program: it reaps it (CPU time reaches bwrap),
        # reports death-by-signal N as 128+N, and the kernel protects it from the program's
        # own `kill -9 1` / `kill -9 -1`. When it exits, everything left in the PID namespace dies.
        if not init_wrapper:
            return args + limits_argv(limits, self.uid) + list(cmd)
        return args + limits_argv(limits, self.uid) + ["/bin/sh", "-c", '"$@"; exit $?', "sh", *cmd]


def _parents(*paths: str) -> list[str]:
    """Strict ancestors of ``paths`` below ``/`` and outside ``/usr``, shallowest first."""
    out: list[str] = []
    for path in paths:
        parts = Path(path).parts[1:-1]
        for i in range(1, len(parts) + 1):
            p = "/" + "/".join(parts[:i])
            if p not in out and p != "/usr" and not p.startswith("/usr/"):
                out.append(p)
    return out


def write_etc(etc_dir: Path, uid: int | None, workdir: str) -> None:
    """Minimal identity files: root and the sandbox user, localhost only."""
    etc_dir.mkdir(parents=True, exist_ok=True)
    u = uid if uid is not None else os.getuid()
    (etc_dir / "passwd").write_text(
        f"root:x:0:0:root:/root:/bin/sh\nsandbox:x:{u}:{u}:sandbox:{workdir}:/bin/sh\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")
    (etc_dir / "group").write_text(f"root:x:0:\nsandbox:x:{u}:\nnogroup:x:65534:\n")
    (etc_dir / "hosts").write_text("127.0.0.1 localhost sandbox\n::1 localhost\n")
