"""The ``apptainer`` backend: ``apptainer exec`` of a SIF image per exec, for clusters
(Slurm nodes without a container daemon, as NeMo-RL's SWE stages use).

Every exec runs ``apptainer exec --containall --cleanenv --net --network none --pid
--no-home --pwd WORKDIR --bind HOSTDIR:WORKDIR IMAGE prlimit ... -- /bin/sh -c ...``:
``--containall`` gives private /tmp, /dev, IPC and PID namespace and no host home;
``--net --network none`` a network namespace with loopback only; ``--cleanenv`` an empty
environment plus the ``--env`` values we pass. Limits come from ``prlimit`` inside the
image (util-linux), the wall clock and the output caps from the same launcher supervisor
as the process backend.

UNTESTED where no ``apptainer`` binary exists (this development host): the command line is
unit-tested, ``health()`` reports the binary missing, and ``create()`` refuses to run.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Mapping, Sequence

from . import hostfs
from .base import ExecResult, Limits, Sandbox, SandboxBackend, SandboxError, SandboxSpec, run_terms
from .bwrap import THREAD_ENV, limits_argv
from .ceiling import Ceiling
from .runner import run_launcher
from .verdicts import classify


def apptainer_argv(binary: str, image: str, host_workdir: str, workdir: str, cmd: Sequence[str],
                   limits: Limits, env: Mapping[str, str], network: bool = False,
                   extra_binds: Sequence[str] = (), ceiling: Ceiling = Ceiling()) -> list[str]:
    """The exact command line for one exec (pure: unit-tested without apptainer)."""
    argv = [binary, "exec", "--containall", "--cleanenv", "--no-home", "--pid", "--ipc"]
    if not network:
        argv += ["--net", "--network", "none"]
    argv += ["--pwd", workdir, "--bind", f"{host_workdir}:{workdir}:rw"]
    for bind in extra_binds:
        argv += ["--bind", bind]
    for key, value in sorted(env.items()):
        argv += ["--env", f"{key}={value}"]
    argv.append(image)
    return argv + limits_argv(limits, None, ceiling) + list(cmd)


class ApptainerSandbox(Sandbox):
    def __init__(self, backend: "ApptainerBackend", spec: SandboxSpec, image: str, state_dir: Path) -> None:
        self.spec, self._backend, self.image = spec, backend, image
        self._state_dir = state_dir
        self.host_workdir = state_dir / "work"
        self._lock = asyncio.Lock()
        self._destroyed = False

    def command(self, cmd: Sequence[str] | str, limits: Limits | None = None,
                env: Mapping[str, str] | None = None) -> list[str]:
        argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        full_env = {"HOME": self.spec.workdir, "LANG": "C.UTF-8", **THREAD_ENV, **self.spec.env, **(env or {})}
        return apptainer_argv(self._backend.binary, self.image, str(self.host_workdir), self.spec.workdir,
                              argv, limits or self.spec.limits, full_env, self.spec.network,
                              self._backend.extra_binds, self._backend.ceiling)

    async def exec(self, cmd: Sequence[str] | str, *, stdin: bytes | str | None = None,
                   timeout: float | None = None, limits: Limits | None = None,
                   env: Mapping[str, str] | None = None) -> ExecResult:
        self._check_alive()
        lim, deadline, data = run_terms(self.spec.limits, limits, timeout, stdin)
        lim = self._backend.ceiling.clamp(lim)
        async with self._lock:
            raw = await run_launcher(self.command(cmd, lim, env), stdin=data, timeout=deadline,
                                     max_output=lim.max_output_bytes, env={"PATH": os.environ.get("PATH", "")},
                                     wall_stretch=lim.wall_stretch, cpu_s=lim.cpu_s)
        return classify(raw, lim)

    async def upload(self, files: Mapping[str, bytes | str]) -> None:
        async with self._lock:
            await asyncio.to_thread(hostfs.write_files, self.host_workdir, files, None, self.spec.workdir)

    async def download(self, path: str, *, max_bytes: int = 16 << 20) -> bytes:
        async with self._lock:
            return await asyncio.to_thread(hostfs.read_file, self.host_workdir, path, max_bytes,
                                           self.spec.workdir)

    async def reset(self) -> None:
        # Each exec is a new container instance (PID namespace dies with it), so the
        # workspace is the only state that survives between execs.
        async with self._lock:
            await asyncio.to_thread(hostfs.wipe_dir, self.host_workdir)
            if self.spec.files:
                await asyncio.to_thread(hostfs.write_files, self.host_workdir, self.spec.files, None,
                                        self.spec.workdir)

    async def destroy(self) -> None:
        if not self._destroyed:
            self._destroyed = True
            await asyncio.to_thread(shutil.rmtree, self._state_dir, True)


class ApptainerBackend(SandboxBackend):
    """Options: ``binary`` (apptainer or singularity), ``image`` (SIF path used when a spec
    names none), ``root_dir`` (host workspaces), ``extra_binds`` ("src:dst[:ro]")."""

    name = "apptainer"

    def __init__(self, *, binary: str = "apptainer", image: str | None = None, root_dir: str | None = None,
                 extra_binds: Sequence[str] = ()) -> None:
        self.binary, self.image = binary, image
        self.root_dir = Path(root_dir or os.path.join(tempfile.gettempdir(), f"verigym-apptainer-{os.getuid()}"))
        self.extra_binds = tuple(extra_binds)
        self.ceiling = Ceiling.inherited()  # apptainer runs as our child: it inherits our limits

    def _resolve(self, spec: SandboxSpec) -> str:
        image = spec.image or self.image
        if not image:
            raise SandboxError("apptainer backend needs an image (SIF path) in SandboxSpec.image or image=...")
        return image

    def sandbox_for(self, spec: SandboxSpec) -> ApptainerSandbox:
        """Build the sandbox object (workspace on disk) without checking the binary: used by
        ``create`` and by the command-line unit tests."""
        state = self.root_dir / f"sbx-{uuid.uuid4().hex[:12]}"
        (state / "work").mkdir(parents=True, mode=0o700)
        sb = ApptainerSandbox(self, spec, self._resolve(spec), state)
        if spec.files:
            hostfs.write_files(sb.host_workdir, spec.files, None, spec.workdir)
        return sb

    async def create(self, spec: SandboxSpec) -> ApptainerSandbox:
        if shutil.which(self.binary) is None:
            raise SandboxError(f"{self.binary!r} not found: install Apptainer to use this backend")
        image = self._resolve(spec)
        if "://" not in image and not os.path.exists(image):
            raise SandboxError(f"SIF image {image!r} not found")
        return await asyncio.to_thread(self.sandbox_for, spec)

    async def health(self) -> dict:
        path = shutil.which(self.binary)
        if path is None:
            # A binary that is not there will not appear while the server runs: "permanent"
            # makes the server's /health fatal, so `envs serve` stops at once with this line.
            return {"backend": self.name, "ok": False, "permanent": True,
                    "error": f"{self.binary!r} is not installed (not on PATH): install Apptainer on this machine, or "
                             "serve with sandbox_backend=container (Podman's or Docker's API)"}
        proc = await asyncio.create_subprocess_exec(path, "--version", stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.STDOUT)
        out, _ = await proc.communicate()
        return {"backend": self.name, "ok": proc.returncode == 0, "binary": path, "version": out.decode().strip()}
