"""The ``container`` backend: one container per sandbox through the Docker Engine API.

Works against Docker or Podman's Docker-compatible service (``scripts/ci_podman.sh``).
The container idles on ``sleep infinity``; each exec is an API exec wrapped in
``prlimit`` (CPU seconds, address space, file size, open files) and a shell that reports
the exit status and the children's CPU times. Container-wide: ``network_mode="none"``,
``mem_limit`` (= ``memswap_limit``), ``nano_cpus``, ``pids_limit``, all capabilities
dropped, ``no-new-privileges``.

``reset()`` replaces the container with a fresh one from the same image: a container's
writable layer can be changed anywhere, so wiping only the workdir could leave state.
Background processes started by one exec keep running until ``reset()``/``destroy()``
(session tools such as a terminal rely on that); ``exec`` kills everything on timeout or
output overflow.
"""

from __future__ import annotations

import asyncio
import io
import os
import re
import tarfile
import threading
import time
import uuid
from typing import Any, Mapping, Sequence

from .base import (ExecResult, Limits, LostOutputError, ResourceVerdict, Sandbox, SandboxBackend, SandboxError,
                   SandboxSpec, run_terms)
from .bwrap import THREAD_ENV, limits_argv
from .ceiling import Ceiling
from .container_archive import archive_dir, replace_dir
from .exec_stream import STDERR, STDOUT, start_attached
from .longlived import ContainerProcess
from .runner import RawOutcome
from .verdicts import classify

PODMAN_SOCKET = "/run/verigym-podman.sock"
_TIMES_MARK = b"\n__verigym_times__\n"
# `times` prints the shell's own times, then its children's: "0m0.01s 0m0.00s".
_TIMES_RE = re.compile(rb"(\d+)m([\d.]+)s (\d+)m([\d.]+)s\s*$")
# The wrapper's last line on each stream: an exec whose wrapper exited by itself without them lost
# output between the program and us (exec_stream.py closes the one way this was seen to happen; the
# marks keep any other from passing for a program's empty output) -- an infrastructure failure.
_OUT_END = b"\n__verigym_end__\n"
_ERR_END = b"\n__verigym_end__\n"
_KILL_GRACE_S = 10.0


def _docker():  # type: ignore[no-untyped-def]
    try:
        import docker  # noqa: PLC0415 - optional at import time of the package
    except ImportError as exc:
        raise SandboxError("the container backend needs the docker SDK: pip install docker") from exc
    return docker


def _tar_of(files: Mapping[str, bytes | str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for rel, content in files.items():
            name = os.path.normpath(rel).lstrip("/")
            if name.startswith(".."):
                raise SandboxError(f"cannot upload to {rel!r}: outside the workdir")
            data = content.encode() if isinstance(content, str) else bytes(content)
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class ContainerSandbox(Sandbox):
    supports_processes = True
    system_writable = True  # the container's root filesystem belongs to whoever runs in it

    def __init__(self, backend: "ContainerBackend", spec: SandboxSpec, container: Any) -> None:
        self.spec, self._backend, self._container = spec, backend, container
        # The container's own ulimits are the hard limits its execs inherit.
        self.ceiling = backend.container_ceiling(spec)
        self._lock = asyncio.Lock()
        self._destroyed = False
        self._processes: set[ContainerProcess] = set()

    async def start_process(self, argv: Sequence[str], *, limits: Limits | None = None,
                            env: Mapping[str, str] | None = None) -> ContainerProcess:
        """A long-lived exec with stdin attached, in its own process group (``setsid``, from
        util-linux like ``prlimit``). Killed by ``kill()``, ``reset()`` (the container is
        replaced), ``destroy()``, and by an ``exec`` that hits its deadline or output cap
        (that kills every process but the container's pid 1)."""
        self._check_alive()
        argv = list(argv)
        if not argv:
            raise ValueError("empty command")
        lim = self.ceiling.clamp(limits or self.spec.limits)
        pidfile = f"/tmp/.verigym-proc-{uuid.uuid4().hex}"
        wrapped = limits_argv(lim, None, self.ceiling) + [
            "setsid", "-w", "/bin/sh", "-c", f'echo $$ > {pidfile}; exec "$@"', "sh", *argv]
        full_env = {"HOME": self.spec.workdir, "LANG": "C.UTF-8", **THREAD_ENV, **self.spec.env, **(env or {})}
        api, user = self._backend.client.api, self._backend.user or ""
        try:
            exec_id = await asyncio.to_thread(
                api.exec_create, self._container.id, wrapped, stdin=True, stdout=True, stderr=True, tty=False,
                workdir=self.spec.workdir, environment=full_env, user=user)
            attached = await asyncio.to_thread(start_attached, api, exec_id)
        except Exception as exc:
            raise SandboxError(f"cannot start a process in the container: {exc}") from exc
        proc = ContainerProcess(api=api, container_id=self._container.id, exec_id=exec_id, attached=attached,
                                pidfile=pidfile, user=user, buffer_cap=lim.max_output_bytes)
        self._processes.add(proc)
        return proc

    async def _stop_processes(self) -> None:
        procs, self._processes = list(self._processes), set()
        await asyncio.gather(*(p.kill() for p in procs), return_exceptions=True)

    async def end_processes(self) -> None:
        """Kill the long-lived processes, then every process but the container's pid 1 (what
        earlier execs left in the background). The workspace stays."""
        self._check_alive()
        await self._stop_processes()
        async with self._lock:
            try:
                await asyncio.to_thread(self._kill_all_but_init)
            except Exception as exc:  # the engine failed us, not the program
                raise SandboxError(f"cannot end the container's processes: {exc}") from exc

    def _kill_all_but_init(self) -> None:
        api = self._backend.client.api
        # kill -1 reaches every process the caller may signal except init and itself; twice,
        # for processes forked between the scan and the signal.
        kid = api.exec_create(self._container.id, ["/bin/sh", "-c", "kill -9 -1; kill -9 -1; true"],
                              user=self._backend.user or "")
        api.exec_start(kid)

    async def archive_workspace(self, *, max_bytes: int) -> bytes:
        self._check_alive()
        async with self._lock:
            return await asyncio.to_thread(archive_dir, self._container, self.spec.workdir, max_bytes)

    async def extract_workspace(self, archive: bytes) -> None:
        self._check_alive()
        async with self._lock:
            await asyncio.to_thread(replace_dir, self._backend.client.api, self._container, self._backend.user or "",
                                    self.spec.workdir, archive)

    @property
    def container_id(self) -> str:
        return self._container.id

    async def exec(self, cmd: Sequence[str] | str, *, stdin: bytes | str | None = None,
                   timeout: float | None = None, limits: Limits | None = None,
                   env: Mapping[str, str] | None = None) -> ExecResult:
        self._check_alive()
        argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        lim, deadline, data = run_terms(self.spec.limits, limits, timeout, stdin)
        lim = self.ceiling.clamp(lim)
        async with self._lock:
            stdin_path = None
            if data:
                # Stdin goes in as a file: half-closing a hijacked exec socket is not
                # reliable across Docker/Podman versions, a file redirect is.
                stdin_path = f"/tmp/.verigym-stdin-{uuid.uuid4().hex}"
                await asyncio.to_thread(self._put, "/tmp", {stdin_path[5:]: data})
            raw = await self._run(argv, lim, deadline, env or {}, stdin_path)
        result = classify(raw, lim)
        if (result.verdict is ResourceVerdict.SIGNALED and raw.exit_code == 128 + 9
                and raw.cpu_s < 0.9 * lim.cpu_s):
            # Nothing but the memory cgroup's OOM killer sends SIGKILL inside the container
            # when we did not (timeouts and output overflow are already classified).
            result.verdict = ResourceVerdict.MEMORY_LIMIT
        return result

    def _put(self, path: str, files: Mapping[str, bytes | str]) -> None:
        if not self._container.put_archive(path, _tar_of(files)):
            raise SandboxError(f"put_archive to {path} failed")

    async def _run(self, argv: list[str], lim: Limits, deadline: float,
                   env: Mapping[str, str], stdin_path: str | None) -> RawOutcome:
        api = self._backend.client.api
        redirect = f' < "{stdin_path}"' if stdin_path else " < /dev/null"
        script = (f'"$@"{redirect}; rc=$?; ' + (f'rm -f "{stdin_path}"; ' if stdin_path else "")
                  + "printf '" + _OUT_END.decode().replace("\n", "\\n") + "'; "
                  + "printf '" + _TIMES_MARK.decode().replace("\n", "\\n") + "' >&2; times >&2; "
                  + "printf '" + _ERR_END.decode().replace("\n", "\\n") + "' >&2; exit $rc")
        wrapped = limits_argv(lim, None, self.ceiling) + ["/bin/sh", "-c", script, "sh", *argv]
        full_env = {"HOME": self.spec.workdir, "LANG": "C.UTF-8", **THREAD_ENV, **self.spec.env, **env}
        start = time.monotonic()
        try:
            exec_id = await asyncio.to_thread(
                api.exec_create, self._container.id, wrapped, stdout=True, stderr=True,
                workdir=self.spec.workdir, environment=full_env, user=self._backend.user or "")
        except Exception as exc:
            raise SandboxError(f"exec_create failed: {exc}") from exc
        limit = lim.max_output_bytes
        # stderr may carry our CPU-times trailer on top of the program's capped output.
        caps = {"out": limit + len(_OUT_END), "err": limit + len(_TIMES_MARK) + len(_ERR_END) + 128}
        bufs = {"out": bytearray(), "err": bytearray()}
        flags = {"output_limited": False, "timed_out": False, "killed": False,
                 "out_truncated": False, "err_truncated": False}
        kill_lock = threading.Lock()

        def kill() -> None:
            with kill_lock:
                if flags["killed"]:
                    return
                flags["killed"] = True
            # Kill everything but the container's pid 1 (kill -1 skips init and itself).
            try:
                kid = api.exec_create(self._container.id, ["/bin/sh", "-c", "kill -9 -1"],
                                      user=self._backend.user or "")
                api.exec_start(kid)
            except Exception:  # the stream read below still ends when the container dies
                self._backend.client.api.kill(self._container.id)

        def pump() -> None:
            attached = start_attached(api, exec_id)
            try:
                for stream, chunk in attached.frames():
                    key = {STDOUT: "out", STDERR: "err"}.get(stream)
                    if key is None or not chunk:
                        continue
                    buf, room = bufs[key], caps[key] - len(bufs[key])
                    buf += chunk[:max(room, 0)]
                    if len(chunk) > room:
                        flags[f"{key}_truncated"] = True
                        if not flags["output_limited"]:
                            flags["output_limited"] = True
                            threading.Thread(target=kill, daemon=True).start()
            finally:
                attached.close()

        pump_task = asyncio.ensure_future(asyncio.to_thread(pump))
        try:
            await asyncio.wait_for(asyncio.shield(pump_task), timeout=max(deadline, 0.001))
        except asyncio.TimeoutError:
            flags["timed_out"] = not flags["killed"]
            await asyncio.to_thread(kill)
            try:
                await asyncio.wait_for(pump_task, timeout=_KILL_GRACE_S)
            except asyncio.TimeoutError as exc:
                raise SandboxError("container did not stop the timed-out exec") from exc
        wall = time.monotonic() - start
        info = await asyncio.to_thread(api.exec_inspect, exec_id)
        exit_code = info.get("ExitCode")
        stdout, stderr, cpu = bytes(bufs["out"]), bytes(bufs["err"]), 0.0
        # Processes the program left running may still write after the wrapper's marks.
        out_end, mark = stdout.rfind(_OUT_END), stderr.rfind(_TIMES_MARK)
        if ((out_end < 0 or mark < 0 or _ERR_END not in stderr[mark:]) and not flags["killed"]
                and isinstance(exit_code, int) and 0 <= exit_code < 128 and not info.get("Running")):
            # The wrapper exited by itself (a kill from inside would make it 128 + signal) yet its
            # end marks never came: output was lost on the way.
            raise LostOutputError(f"the output of an exec was lost on its way from the container (exit {exit_code}; "
                                  f"stdout {len(stdout)} B, stderr {len(stderr)} B arrived without the end mark)",
                                  exit_code=exit_code)
        if out_end >= 0:
            stdout = stdout[:out_end] + stdout[out_end + len(_OUT_END):]
        if mark >= 0:
            m = _TIMES_RE.search(stderr[mark + len(_TIMES_MARK):].split(_ERR_END)[0])
            if m:
                cpu = int(m[1]) * 60 + float(m[2]) + int(m[3]) * 60 + float(m[4])
            stderr = stderr[:mark]
        status = None if flags["killed"] or exit_code is None else (exit_code & 0xFF) << 8
        return RawOutcome(status=status, stdout=stdout[:limit], stderr=stderr[:limit],
                          stdout_truncated=flags["out_truncated"] or len(stdout) > limit,
                          stderr_truncated=flags["err_truncated"] or len(stderr) > limit,
                          timed_out=flags["timed_out"], output_limited=flags["output_limited"],
                          wall_s=wall, cpu_s=cpu)

    async def upload(self, files: Mapping[str, bytes | str]) -> None:
        self._check_alive()
        rel = {}
        for path, content in files.items():
            if os.path.isabs(path):
                if not path.startswith(self.spec.workdir.rstrip("/") + "/"):
                    raise SandboxError(f"cannot upload to {path!r}: outside the workdir")
                path = os.path.relpath(path, self.spec.workdir)
            rel[path] = content
        async with self._lock:
            await asyncio.to_thread(self._put, self.spec.workdir, rel)

    async def download(self, path: str, *, max_bytes: int = 16 << 20) -> bytes:
        self._check_alive()
        full = path if os.path.isabs(path) else os.path.join(self.spec.workdir, path)
        async with self._lock:
            return await asyncio.to_thread(self._get, full, max_bytes)

    def _get(self, full: str, max_bytes: int) -> bytes:
        docker = _docker()
        try:
            stream, stat = self._container.get_archive(full)
        except docker.errors.NotFound as exc:
            raise FileNotFoundError(full) from exc
        if stat.get("size", 0) > max_bytes:
            raise SandboxError(f"{full!r} is larger than max_bytes={max_bytes}")
        buf = io.BytesIO()
        for chunk in stream:
            buf.write(chunk)
            if buf.tell() > max_bytes + (1 << 20):  # tar headers add a little
                raise SandboxError(f"{full!r} is larger than max_bytes={max_bytes}")
        buf.seek(0)
        with tarfile.open(fileobj=buf) as tar:
            member = tar.next()
            if member is None or not member.isfile():
                raise SandboxError(f"{full!r} is not a regular file")
            return tar.extractfile(member).read()  # type: ignore[union-attr]

    async def reset(self) -> None:
        self._check_alive()
        async with self._lock:
            await self._stop_processes()
            old = self._container
            self._container = await self._backend._start(self.spec)
            await asyncio.to_thread(self._backend._remove, old)

    async def destroy(self) -> None:
        if self._destroyed:
            return
        self._destroyed = True
        await self._stop_processes()
        async with self._lock:
            await asyncio.to_thread(self._backend._remove, self._container)
        self._backend._live.discard(self)


class ContainerBackend(SandboxBackend):
    """Options: ``base_url`` (default ``$DOCKER_HOST``, else the verigym Podman socket if it
    exists, else Docker's default), ``image`` (used when a spec names none), ``cpus``,
    ``user``, ``cap_add``, ``extra_run_kwargs`` (passed to ``containers.run``)."""

    name = "container"

    def __init__(self, *, base_url: str | None = None, image: str | None = None, cpus: float = 1.0,
                 user: str | None = None, cap_add: Sequence[str] = (), timeout_s: float = 120,
                 extra_run_kwargs: Mapping[str, Any] | None = None) -> None:
        if base_url is None and not os.environ.get("DOCKER_HOST") and os.path.exists(PODMAN_SOCKET):
            base_url = f"unix://{PODMAN_SOCKET}"
        self.base_url, self.image, self.cpus, self.user = base_url, image, cpus, user
        self.cap_add, self.timeout_s = tuple(cap_add), timeout_s
        self.extra_run_kwargs = dict(extra_run_kwargs or {})
        self._client: Any = None
        self._live: set[ContainerSandbox] = set()
        # What this server inherited: the container ulimits it asks the engine for stay under
        # it (a local rootless engine started from the same job inherits the same limits).
        self.ceiling = Ceiling.inherited()

    def container_ulimits(self, spec: SandboxSpec) -> dict[str, int]:
        """nofile and nproc of a sandbox's container. nproc explicit, or Podman's compat API
        asks runc for the service's own (higher) nproc and the kernel refuses; pids_limit is
        the real process cap. Neither above what this server inherited."""
        cap = self.ceiling.clamp(spec.limits)
        nproc = self.ceiling.of("nproc")
        return {"nofile": cap.max_open_files, "nproc": min(1024, nproc) if nproc is not None else 1024}

    def container_ceiling(self, spec: SandboxSpec) -> Ceiling:
        return self.ceiling.lowered("container ulimits", **self.container_ulimits(spec))

    @property
    def client(self) -> Any:
        if self._client is None:
            docker = _docker()
            try:
                self._client = (docker.DockerClient(base_url=self.base_url, timeout=int(self.timeout_s))
                                if self.base_url else docker.from_env(timeout=int(self.timeout_s)))
            except docker.errors.DockerException as exc:
                raise SandboxError(f"cannot reach the Docker API: {exc}") from exc
        return self._client

    async def _start(self, spec: SandboxSpec) -> Any:
        image = spec.image or self.image
        if not image:
            raise SandboxError("container backend needs an image (SandboxSpec.image or image=...)")
        lim = self.ceiling.clamp(spec.limits)
        ulimits = self.container_ulimits(spec)
        docker = _docker()
        kwargs: dict[str, Any] = dict(
            command=["sleep", "infinity"], network_mode=None if spec.network else "none",
            mem_limit=f"{lim.memory_mb}m", memswap_limit=f"{lim.memory_mb}m",
            nano_cpus=int(self.cpus * 1e9), pids_limit=lim.max_processes + 8,
            ulimits=[docker.types.Ulimit(name="nofile", soft=ulimits["nofile"], hard=ulimits["nofile"]),
                     docker.types.Ulimit(name="core", soft=0, hard=0),
                     docker.types.Ulimit(name="nproc", soft=ulimits["nproc"], hard=ulimits["nproc"])],
            cap_drop=["ALL"], cap_add=list(self.cap_add) or None, security_opt=["no-new-privileges"],
            labels={"verigym.sandbox": "1"}, user=self.user, hostname="sandbox",
            working_dir=spec.workdir,  # the engine creates it (root without caps may not)
            environment={"HOME": spec.workdir, **spec.env}, **self.extra_run_kwargs)
        container = None
        try:
            container = await asyncio.to_thread(self.client.containers.create, image, **kwargs)
            await asyncio.to_thread(container.start)
            if spec.files:
                await asyncio.to_thread(container.put_archive, spec.workdir, _tar_of(spec.files))
        except BaseException as exc:
            if container is not None:  # created but not usable: never leak it
                await asyncio.to_thread(self._remove, container)
            if isinstance(exc, docker.errors.ImageNotFound):
                raise SandboxError(f"image {image!r} not found locally and not pullable: {exc}") from exc
            if isinstance(exc, docker.errors.DockerException):
                raise SandboxError(f"container start failed: {exc}") from exc
            raise
        return container

    def _remove(self, container: Any) -> None:
        docker = _docker()
        try:
            container.remove(force=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.DockerException as exc:
            raise SandboxError(f"container removal failed: {exc}") from exc

    async def create(self, spec: SandboxSpec) -> ContainerSandbox:
        sb = ContainerSandbox(self, spec, await self._start(spec))
        self._live.add(sb)
        return sb

    async def health(self) -> dict:
        info: dict = {"backend": self.name, "base_url": self.base_url or os.environ.get("DOCKER_HOST")}
        try:
            ok = await asyncio.to_thread(self.client.ping)
            version = await asyncio.to_thread(self.client.version)
        except Exception as exc:  # any failure to talk to the daemon is "not healthy"
            return {**info, "ok": False, "error": str(exc)}
        return {**info, "ok": bool(ok), "engine": version.get("Version"),
                "components": [c.get("Name") for c in version.get("Components", [])]}

    async def close(self) -> None:
        for sb in list(self._live):
            await sb.destroy()
        if self._client is not None:
            self._client.close()
            self._client = None
