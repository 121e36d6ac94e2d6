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

Limits: every rlimit comes from :class:`sandboxes.ceiling.Ceiling` (never above the hard
limits the server inherited). The interpreter: :mod:`sandboxes.interpreter`; its folders
are bound after the sandbox's own ``/tmp``, so an install under the host's ``/tmp`` stays
visible; one the sandbox's own mounts would hide (``/proc``, ``/dev``, ``/etc``, the
workdir) is refused with the reason.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from .base import Limits, SandboxError
from .ceiling import Ceiling
from .interpreter import PythonInstall

# /etc entries that programs commonly need and that reveal nothing secret about the host.
_ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "alternatives",
              "nsswitch.conf", "mime.types", "protocols", "services")
# Threads of numerical libraries: one each, or OpenBLAS spawns nproc threads and trips
# RLIMIT_NPROC / the address-space limit at import time (a known peer failure).
THREAD_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
              "NUMEXPR_NUM_THREADS": "1", "VECLIB_MAXIMUM_THREADS": "1"}
# Where the sandbox mounts its own things: a Python install there would be hidden (or hide
# them). /tmp is not among them: the install's binds go on top of the sandbox's /tmp.
_SANDBOX_OWN = ("/proc", "/dev", "/etc")
# Under these the zygote removes what a run leaves (zygote_main._scrub); binds kept there.
SCRUBBED_DIRS = ("/tmp", "/dev/shm")


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def sandbox_env(python: PythonInstall, workdir: str, extra: Mapping[str, str]) -> dict[str, str]:
    env = {"PATH": f"{python.bin_dir}:/usr/local/bin:/usr/bin:/bin", "HOME": workdir,
           "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TMPDIR": "/tmp",
           "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", **THREAD_ENV}
    env.update(extra)
    return env


def limits_argv(limits: Limits, uid: int | None, ceiling: Ceiling) -> list[str]:
    """``prlimit ... [setpriv ...] --`` prefix that applies limits (clamped to ``ceiling``:
    without capabilities a hard limit can only be lowered), then drops to ``uid``."""
    r = ceiling.rlimits(limits)
    argv = ["prlimit", *(f"--{name}={soft}:{hard}" for name, (soft, hard) in r.items()), "--core=0:0", "--"]
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
    ceiling: Ceiling = field(default_factory=Ceiling)  # hard limits inherited: rlimits never above them

    def __post_init__(self) -> None:
        for root in (*self.python.roots, *self.extra_ro_binds):
            hidden = [top for top in (*_SANDBOX_OWN, self.workdir) if _under(root, top) or _under(top, root)]
            if hidden:
                raise SandboxError(
                    f"cannot expose {root} read-only in the sandbox: the sandbox mounts its own {hidden[0]} "
                    f"there. Run the server from an interpreter elsewhere, or name one with the backend option "
                    f"python=PATH (config: sandbox_options: {{python: PATH}})")

    @property
    def binds(self) -> tuple[str, ...]:
        return (*self.python.roots, *self.extra_ro_binds)

    def scrub_keep(self) -> list[str]:
        """Binds inside the folders the zygote cleans after each run: never to be touched."""
        return [b for b in self.binds if any(_under(b, top) for top in SCRUBBED_DIRS)]

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
        args = [self.bwrap, *ns, "--die-with-parent", "--new-session", "--as-pid-1",
                *(["--json-status-fd", str(status_fd)] if status_fd is not None else []),
                "--hostname", "sandbox", "--perms", "0755", "--dir", "/etc",
                *_system_binds()]
        for name in ("passwd", "group", "hosts"):
            args += ["--ro-bind", str(self.etc_dir / name), f"/etc/{name}"]
        # The sandbox's own /proc, /dev, /tmp first, the host folders after: bwrap mounts in
        # order, so an interpreter under the host's /tmp lands on top of the private /tmp
        # instead of under it. Directories bwrap creates for mount points default to 0700
        # (unreadable to the sandbox uid), so the ones on the way to binds are made 0755.
        args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
        for parent in _parents(*self.binds, self.workdir):
            args += ["--perms", "0755", "--dir", parent]
        for root in self.binds:
            args += ["--ro-bind", root, root]
        args += ["--bind", str(self.host_workdir), self.workdir, "--chdir", self.workdir, "--clearenv"]
        for key, value in env.items():
            args += ["--setenv", key, value]
        args.append("--")
        # pid 1 is a shell that waits for the program: it reaps it (CPU time reaches bwrap),
        # reports death-by-signal N as 128+N, and the kernel protects it from the program's
        # own `kill -9 1` / `kill -9 -1`. When it exits, everything left in the PID namespace dies.
        if not init_wrapper:
            return args + limits_argv(limits, self.uid, self.ceiling) + list(cmd)
        return args + limits_argv(limits, self.uid, self.ceiling) + ["/bin/sh", "-c", '"$@"; exit $?', "sh", *cmd]


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
