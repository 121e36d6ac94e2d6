"""The ``process`` backend: every exec is a fresh bubblewrap sandbox over a persistent workspace.

No daemon. Each :meth:`ProcessSandbox.exec` starts ``bwrap`` with its own PID, IPC, UTS,
network (loopback only, nothing listening) and cgroup namespaces, so nothing the program
starts outlives the exec: when the program (or the deadline) ends, the namespace's init
dies and the kernel kills every process left in it. The workspace directory persists
between execs of one sandbox (upload -> exec -> download), and ``reset()`` wipes it.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import tempfile
import uuid
from pathlib import Path
from typing import Mapping, Sequence

from . import hostfs
from .base import ExecResult, Limits, Sandbox, SandboxBackend, SandboxError, SandboxSpec
from .bwrap import BwrapLayout, PythonInstall, sandbox_env, write_etc
from .runner import StatusPipe, run_launcher
from .verdicts import classify

DEFAULT_UID_BASE = 300_000   # an otherwise unused uid range (above typical subuid ranges)
DEFAULT_UID_COUNT = 4096


def kill_uid(uid: int) -> int:
    """SIGKILL every host process running as ``uid``; repeat until none is left (forks race)."""
    killed = 0
    for _ in range(20):
        found = 0
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                if os.stat(f"/proc/{name}").st_uid != uid:
                    continue
                os.kill(int(name), signal.SIGKILL)
                found += 1
            except (FileNotFoundError, ProcessLookupError):
                continue
        if not found:
            return killed
        killed += found
    return killed


class ProcessSandbox(Sandbox):
    def __init__(self, backend: "ProcessBackend", spec: SandboxSpec, layout: BwrapLayout,
                 state_dir: Path, lease: hostfs.UidLease | None, tmpfs: bool) -> None:
        self.spec = spec
        self.layout = layout
        self._backend = backend
        self._state_dir = state_dir
        self._lease = lease
        self._tmpfs = tmpfs
        self._lock = asyncio.Lock()  # one exec/upload/download/reset at a time per sandbox
        self._destroyed = False

    @property
    def uid(self) -> int | None:
        return self.layout.uid

    @property
    def host_workdir(self) -> Path:
        """Host path of the workspace (tests and the pool inspect it; programs never see it)."""
        return self.layout.host_workdir

    def _check_alive(self) -> None:
        if self._destroyed:
            raise SandboxError("sandbox already destroyed")

    async def exec(self, cmd: Sequence[str] | str, *, stdin: bytes | str | None = None,
                   timeout: float | None = None, limits: Limits | None = None,
                   env: Mapping[str, str] | None = None) -> ExecResult:
        self._check_alive()
        argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        if not argv:
            raise ValueError("empty command")
        lim = limits or self.spec.limits
        deadline = timeout if timeout is not None else lim.wall_s
        data = stdin.encode() if isinstance(stdin, str) else stdin
        full_env = sandbox_env(self.layout.python, self.layout.workdir, {**self.spec.env, **(env or {})})
        uid = self.uid
        async with self._lock:
            status = StatusPipe()
            launcher = self.layout.argv(argv, lim, full_env, status_fd=status.write_fd)
            raw = await run_launcher(launcher, stdin=data, timeout=deadline,
                                     max_output=lim.max_output_bytes, status=status,
                                     on_kill=(lambda: kill_uid(uid)) if uid is not None else None)
        return classify(raw, lim)

    async def upload(self, files: Mapping[str, bytes | str]) -> None:
        self._check_alive()
        async with self._lock:
            await asyncio.to_thread(hostfs.write_files, self.host_workdir, files, self.uid,
                                    self.layout.workdir)

    async def download(self, path: str, *, max_bytes: int = 16 << 20) -> bytes:
        """Read a workspace file. Missing -> FileNotFoundError; larger than max_bytes or
        escaping the workspace (e.g. a symlink the program planted) -> SandboxError."""
        self._check_alive()
        async with self._lock:
            return await asyncio.to_thread(hostfs.read_file, self.host_workdir, path, max_bytes,
                                           self.layout.workdir)

    async def reset(self) -> None:
        self._check_alive()
        async with self._lock:
            await asyncio.to_thread(self._wipe)
            if self.spec.files:
                await asyncio.to_thread(hostfs.write_files, self.host_workdir, self.spec.files,
                                        self.uid, self.layout.workdir)

    def _wipe(self) -> None:
        if self.uid is not None:
            kill_uid(self.uid)  # belt and braces: the PID namespace already killed them
        if self._tmpfs:
            hostfs.umount(self.host_workdir)
            self._tmpfs = hostfs.mount_tmpfs(self.host_workdir, self._backend.workdir_size_mb,
                                             self.uid or 0)
        if not self._tmpfs:
            hostfs.wipe_dir(self.host_workdir)

    async def destroy(self) -> None:
        if self._destroyed:
            return
        self._destroyed = True
        async with self._lock:
            await asyncio.to_thread(self._teardown)

    def _teardown(self) -> None:
        try:
            if self.uid is not None:
                kill_uid(self.uid)
            if self._tmpfs:
                hostfs.umount(self.host_workdir)
            shutil.rmtree(self._state_dir, ignore_errors=True)
        finally:
            if self._lease is not None:
                self._lease.release()
            self._backend._live.discard(self)


class ProcessBackend(SandboxBackend):
    """Options: ``python`` (interpreter to expose; default the server's), ``root_dir`` (host
    state), ``workdir_size_mb`` (tmpfs cap), ``uid_base``/``uid_count``, ``bwrap``,
    ``extra_ro_binds`` (more host dirs to expose read-only)."""

    name = "process"

    def __init__(self, *, python: str | None = None, root_dir: str | None = None,
                 workdir_size_mb: int = 512, uid_base: int = DEFAULT_UID_BASE,
                 uid_count: int = DEFAULT_UID_COUNT, bwrap: str = "bwrap",
                 extra_ro_binds: Sequence[str] = ()) -> None:
        self.bwrap = shutil.which(bwrap) or bwrap
        self.privileged = hostfs.is_root()
        default_root = ("/run/verigym-sandboxes" if self.privileged
                        else os.path.join(tempfile.gettempdir(), f"verigym-sandboxes-{os.getuid()}"))
        self.root_dir = Path(root_dir or default_root)
        self.workdir_size_mb = workdir_size_mb
        self.uid_base, self.uid_count = uid_base, uid_count
        self.extra_ro_binds = tuple(extra_ro_binds)
        self._python_path = python
        self._python: PythonInstall | None = None if python else PythonInstall.current()
        self._live: set[ProcessSandbox] = set()

    async def _python_install(self) -> PythonInstall:
        if self._python is None:
            assert self._python_path is not None
            proc = await asyncio.create_subprocess_exec(
                self._python_path, "-c",
                "import sys; print(sys.executable); print(sys.prefix); print(sys.base_prefix)",
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            out, err = await proc.communicate()
            if proc.returncode != 0:
                raise SandboxError(f"python {self._python_path!r} unusable: {err.decode()[-500:]}")
            exe, *prefixes = out.decode().split("\n")[:3]
            self._python = PythonInstall.of(exe, prefixes)
        return self._python

    async def create(self, spec: SandboxSpec) -> ProcessSandbox:
        if shutil.which(self.bwrap) is None:
            raise SandboxError("bubblewrap (bwrap) not found: apt-get install bubblewrap")
        python = await self._python_install()
        return await asyncio.to_thread(self._create_sync, spec, python)

    def _create_sync(self, spec: SandboxSpec, python: PythonInstall) -> ProcessSandbox:
        self.root_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        lease = (hostfs.UidLease(self.root_dir / "uids", self.uid_base, self.uid_count)
                 if self.privileged else None)
        uid = lease.uid if lease else None
        state_dir = self.root_dir / f"sbx-{uuid.uuid4().hex[:12]}"
        work = state_dir / "work"
        try:
            work.mkdir(parents=True, mode=0o700)
            if uid is not None:
                kill_uid(uid)  # a crashed earlier server may have left this uid's processes
            tmpfs = self.privileged and hostfs.mount_tmpfs(work, self.workdir_size_mb, uid or 0)
            if uid is not None and not tmpfs:
                os.chown(work, uid, uid)
            write_etc(state_dir / "etc", uid, spec.workdir)
            layout = BwrapLayout(bwrap=self.bwrap, host_workdir=work, workdir=spec.workdir,
                                 etc_dir=state_dir / "etc", python=python, uid=uid,
                                 extra_ro_binds=self.extra_ro_binds)
            sandbox = ProcessSandbox(self, spec, layout, state_dir, lease, tmpfs)
            if spec.files:
                hostfs.write_files(work, spec.files, uid, spec.workdir)
        except BaseException:
            hostfs.umount(work)
            shutil.rmtree(state_dir, ignore_errors=True)
            if lease:
                lease.release()
            raise
        self._live.add(sandbox)
        return sandbox

    async def health(self) -> dict:
        info: dict = {"backend": self.name, "bwrap": shutil.which(self.bwrap),
                      "mode": "root" if self.privileged else "unprivileged"}
        if info["bwrap"] is None:
            return {**info, "ok": False, "error": "bwrap not found (apt-get install bubblewrap)"}
        try:
            async with await self.create(SandboxSpec()) as sb:
                res = await sb.exec(["true"], timeout=10)
        except SandboxError as exc:
            return {**info, "ok": False, "error": str(exc)}
        ok = res.ok
        return {**info, "ok": ok, **({} if ok else {"error": res.text("stderr")[-500:]})}

    async def close(self) -> None:
        for sb in list(self._live):
            await sb.destroy()
