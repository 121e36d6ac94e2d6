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
from typing import Collection, Mapping, Sequence

from . import hostfs
from .base import ExecResult, Limits, Sandbox, SandboxBackend, SandboxError, SandboxSpec, run_terms
from .bwrap import BwrapLayout, sandbox_env, write_etc
from .ceiling import Ceiling
from .interpreter import PythonInstall, probe_command
from .longlived import BwrapProcess
from .runner import StatusPipe, run_launcher
from .verdicts import classify
from .zygote import Zygote

DEFAULT_UID_BASE = 300_000   # an otherwise unused uid range (above typical subuid ranges)
DEFAULT_UID_COUNT = 4096


def kill_uid(uid: int, spare: Collection[int] = ()) -> int:
    """SIGKILL every host process running as ``uid`` (but the pids in ``spare``); repeat
    until none is left (forks race)."""
    killed = 0
    for _ in range(20):
        found = 0
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) in spare:
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
    supports_processes = True

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
        self._processes: set[BwrapProcess] = set()  # start_process(); killed by reset/destroy
        self._zygote: Zygote | None = None           # started by the first exec_python
        # Whether anything but zygote runs used the uid since the last reset. A zygote run
        # ends only after the zygote killed and reaped every process of its namespace, so
        # after zygote runs alone reset() can skip the /proc scan for leftovers.
        self._uid_used = False

    @property
    def python(self) -> str:  # type: ignore[override]
        return self.layout.python.executable

    @property
    def uid(self) -> int | None:
        return self.layout.uid

    @property
    def host_workdir(self) -> Path:
        """Host path of the workspace (tests and the pool inspect it; programs never see it)."""
        return self.layout.host_workdir

    async def exec(self, cmd: Sequence[str] | str, *, stdin: bytes | str | None = None,
                   timeout: float | None = None, limits: Limits | None = None,
                   env: Mapping[str, str] | None = None) -> ExecResult:
        self._check_alive()
        argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        if not argv:
            raise ValueError("empty command")
        lim, deadline, data = run_terms(self.spec.limits, limits, timeout, stdin)
        lim = self.layout.ceiling.clamp(lim)  # verdicts are judged against what the run really got
        full_env = sandbox_env(self.layout.python, self.layout.workdir, {**self.spec.env, **(env or {})})
        uid = self.uid
        async with self._lock:
            self._uid_used = True
            status = StatusPipe()
            launcher = self.layout.argv(argv, lim, full_env, status_fd=status.write_fd)
            raw = await run_launcher(launcher, stdin=data, timeout=deadline,
                                     max_output=lim.max_output_bytes, status=status,
                                     on_kill=(lambda: kill_uid(uid)) if uid is not None else None,
                                     wall_stretch=lim.wall_stretch, cpu_s=lim.cpu_s)
        return classify(raw, lim)

    async def exec_python(self, *, path: str | None = None, code: str | None = None,
                          args: Sequence[str] = (), stdin: bytes | str | None = None,
                          timeout: float | None = None, limits: Limits | None = None,
                          env: Mapping[str, str] | None = None) -> ExecResult:
        """Like ``exec([python, "-I", path | "-c" code, *args])``, served by the sandbox's
        Python zygote (a fork per run, no interpreter start-up) unless the backend was
        opened with ``python_zygote=False``. Differences from a fresh interpreter: ``.pth``
        files of site-packages are not executed (site-packages are on ``sys.path``)."""
        if (path is None) == (code is None):
            raise ValueError("give exactly one of path= or code=")
        if not self._backend.python_zygote:
            argv = [self.layout.python.executable, "-I", *((path,) if path is not None else ("-c", code)), *args]
            return await self.exec(argv, stdin=stdin, timeout=timeout, limits=limits, env=env)
        self._check_alive()
        lim, deadline, data = run_terms(self.spec.limits, limits, timeout, stdin)
        lim = self.layout.ceiling.clamp(lim)
        job = {"path": path, "code": code, "args": list(args), "cwd": self.layout.workdir,
               "env": sandbox_env(self.layout.python, self.layout.workdir, {**self.spec.env, **(env or {})})}
        async with self._lock:
            zygote = await self._running_zygote()
            return await zygote.run(job, stdin=data, timeout=deadline, limits=lim)

    async def _running_zygote(self) -> Zygote:
        if self._zygote is not None and not self._zygote.alive:
            await self._zygote.stop()
            self._zygote = None
        if self._zygote is None:
            env = sandbox_env(self.layout.python, self.layout.workdir, self.spec.env)
            self._zygote = await Zygote.start(self.layout, self.layout.python.executable, env,
                                              self._state_dir / "zygote.log")
        return self._zygote

    async def start_process(self, argv: Sequence[str], *, limits: Limits | None = None,
                            env: Mapping[str, str] | None = None) -> BwrapProcess:
        """A long-lived process in its own bwrap (same isolation as ``exec``) over this
        workspace; it lives until it exits, ``kill()``, ``reset()`` or ``destroy()``."""
        self._check_alive()
        argv = list(argv)
        if not argv:
            raise ValueError("empty command")
        lim = self.layout.ceiling.clamp(limits or self.spec.limits)
        full_env = sandbox_env(self.layout.python, self.layout.workdir, {**self.spec.env, **(env or {})})
        status = StatusPipe()
        proc = BwrapProcess(self.layout.argv(argv, lim, full_env, status_fd=status.write_fd),
                            status=status, buffer_cap=lim.max_output_bytes)
        self._processes.add(proc)
        self._uid_used = True
        return proc

    async def _stop_processes(self) -> None:
        procs, self._processes = list(self._processes), set()
        await asyncio.gather(*(p.kill() for p in procs), return_exceptions=True)

    async def end_processes(self) -> None:
        """Kill the long-lived processes and the zygote; the workspace stays. Every process of
        this sandbox lives in the PID namespace of one of them or of an exec (which ended with
        its exec), so killing their namespaces' pid 1 leaves nothing (tested); reset() and
        destroy() still sweep the uid."""
        self._check_alive()
        await self._stop_processes()  # not under the lock: a running exec_python may hold it
        async with self._lock:
            await self._stop_processes()
            if self._zygote is not None:
                await self._zygote.stop()
                self._zygote = None

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
            await self._stop_processes()
            zygote = self._zygote
            if zygote is not None and (not zygote.alive or zygote.tampered()):  # two tiny /proc reads
                await zygote.stop()  # a run changed its scheduling (nice, affinity): start afresh
                zygote = self._zygote = None
            spare = {zygote.host_pid} if zygote is not None and zygote.host_pid else set()
            await asyncio.to_thread(self._wipe, spare, self._uid_used or zygote is None)
            self._uid_used = False
            if self.spec.files:
                await asyncio.to_thread(hostfs.write_files, self.host_workdir, self.spec.files,
                                        self.uid, self.layout.workdir)

    def _wipe(self, spare: Collection[int] = (), scan: bool = True) -> None:
        if self.uid is not None and scan:
            kill_uid(self.uid, spare)  # belt and braces: the PID namespace already killed them
        if spare:
            # The zygote's namespace has the workspace bind-mounted: a new tmpfs would not
            # reach it, so empty the directory instead (no process of the uid but the
            # zygote is left, and the zygote itself never writes there).
            hostfs.wipe_dir(self.host_workdir)
            os.chmod(self.host_workdir, 0o700)
            if self.uid is not None:
                os.chown(self.host_workdir, self.uid, self.uid)
            return
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
        await self._stop_processes()  # not under the lock: a running exec_python may hold it
        async with self._lock:
            if self._zygote is not None:
                await self._zygote.stop()
                self._zygote = None
            await self._stop_processes()
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
    ``extra_ro_binds`` (more host dirs to expose read-only).

    ``ceiling``: the hard limits this process inherited, read once here; no sandbox asks
    the kernel for more (sandboxes/ceiling.py)."""

    name = "process"

    def __init__(self, *, python: str | None = None, root_dir: str | None = None,
                 workdir_size_mb: int = 512, uid_base: int = DEFAULT_UID_BASE,
                 uid_count: int = DEFAULT_UID_COUNT, bwrap: str = "bwrap",
                 extra_ro_binds: Sequence[str] = (), python_zygote: bool = True) -> None:
        self.bwrap = shutil.which(bwrap) or bwrap
        self.privileged = hostfs.is_root()
        default_root = ("/run/verigym-sandboxes" if self.privileged
                        else os.path.join(tempfile.gettempdir(), f"verigym-sandboxes-{os.getuid()}"))
        self.root_dir = Path(root_dir or default_root)
        self.workdir_size_mb = workdir_size_mb
        self.uid_base, self.uid_count = uid_base, uid_count
        self.extra_ro_binds = tuple(extra_ro_binds)
        self.python_zygote = python_zygote
        self._python_path = python
        self._python: PythonInstall | None = None if python else PythonInstall.current()
        self._live: set[ProcessSandbox] = set()
        self.ceiling = Ceiling.inherited()

    async def _python_install(self) -> PythonInstall:
        if self._python is None:
            assert self._python_path is not None
            try:
                proc = await asyncio.create_subprocess_exec(
                    *probe_command(self._python_path), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            except OSError as exc:
                raise SandboxError(f"python {self._python_path!r} unusable: {exc}") from exc
            out, err = await proc.communicate()
            if proc.returncode != 0:
                raise SandboxError(f"python {self._python_path!r} unusable: {err.decode()[-500:]}")
            self._python = PythonInstall.from_probe(out.decode())
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
        tmpfs = False
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
                                 extra_ro_binds=self.extra_ro_binds, ceiling=self.ceiling)
            sandbox = ProcessSandbox(self, spec, layout, state_dir, lease, tmpfs)
            if spec.files:
                hostfs.write_files(work, spec.files, uid, spec.workdir)
        except BaseException:
            if tmpfs:  # unmounting what was never mounted fails unprivileged and would hide the real error
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

    async def describe(self) -> dict:
        info = await super().describe()
        info["mode"] = "root (a uid per sandbox)" if self.privileged else "unprivileged (user namespace)"
        try:
            info["interpreter"] = (await self._python_install()).describe()
        except SandboxError as exc:
            info["interpreter"] = {"error": str(exc)}
        return info

    async def close(self) -> None:
        for sb in list(self._live):
            await sb.destroy()
