"""One async interface for every isolation backend (process/bubblewrap, container, apptainer).

Environments depend on this module only; they pick a backend by name from config
(``sandboxes.open_backend("process", ...)``) and never import a backend's internals.

Contract
--------
* ``await backend.create(spec) -> Sandbox`` — a fresh, isolated workspace.
* ``await sandbox.exec(cmd, stdin=..., timeout=..., limits=...) -> ExecResult`` — never
  raises for anything the *program* does (crash, timeout, output flood, fork bomb): that
  is reported in ``ExecResult.verdict``. It raises :class:`SandboxError` only when the
  *infrastructure* fails (backend missing, container died), which callers map to the
  ``sandbox_error`` failure class.
* ``upload(files)``, ``download(path)``, ``reset()``, ``destroy()``.
"""

from __future__ import annotations

import abc
import enum
from dataclasses import dataclass, field
from typing import Mapping, Sequence


class SandboxError(RuntimeError):
    """Infrastructure failure (not the sandboxed program's fault). Maps to failure class ``sandbox_error``."""


class ResourceVerdict(str, enum.Enum):
    OK = "ok"                      # exited on its own (any exit code)
    TIMEOUT = "timeout"            # wall-clock deadline: whole process tree killed
    CPU_LIMIT = "cpu_limit"        # RLIMIT_CPU hit (SIGXCPU / SIGKILL)
    MEMORY_LIMIT = "memory_limit"  # address-space / cgroup memory limit hit (MemoryError, ENOMEM, OOM kill)
    OUTPUT_LIMIT = "output_limit"  # stdout/stderr over the cap: truncated and the program killed
    SIGNALED = "signaled"          # killed by another signal (segfault, abort, ...)


@dataclass(frozen=True)
class Limits:
    """Per-exec resource limits. Defaults are safe for model-written competition code."""

    wall_s: float = 10.0
    cpu_s: float = 10.0
    memory_mb: int = 1024          # address space (process) / memory cgroup (container)
    max_processes: int = 64        # RLIMIT_NPROC-equivalent inside the sandbox
    max_file_mb: int = 64          # largest file the program may write
    max_open_files: int = 256
    max_output_bytes: int = 1 << 20  # per stream; beyond it the output is truncated and the program killed


@dataclass(frozen=True)
class SandboxSpec:
    """What to create. ``image`` is backend-specific (container image, SIF path; ignored by process)."""

    image: str | None = None
    files: Mapping[str, bytes | str] = field(default_factory=dict)  # relative path -> content, put in workdir
    workdir: str = "/workspace"
    env: Mapping[str, str] = field(default_factory=dict)  # the ONLY environment variables the program sees
    limits: Limits = field(default_factory=Limits)
    network: bool = False  # always False for model code; True only for trusted setup steps where a backend allows


@dataclass
class ExecResult:
    exit_code: int | None          # None when killed before exiting
    stdout: bytes
    stderr: bytes
    wall_s: float
    cpu_s: float
    verdict: ResourceVerdict
    stdout_truncated: bool = False
    stderr_truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.verdict is ResourceVerdict.OK and self.exit_code == 0

    def text(self, stream: str = "stdout") -> str:
        return getattr(self, stream).decode("utf-8", errors="replace")


class Sandbox(abc.ABC):
    """A live isolated workspace. Use as ``async with``: destroyed on exit."""

    @abc.abstractmethod
    async def exec(self, cmd: Sequence[str] | str, *, stdin: bytes | str | None = None,
                   timeout: float | None = None, limits: Limits | None = None,
                   env: Mapping[str, str] | None = None) -> ExecResult:
        """Run ``cmd`` (argv list, or a string run by ``/bin/sh -c``) in the workspace."""

    @abc.abstractmethod
    async def upload(self, files: Mapping[str, bytes | str]) -> None:
        """Write files (paths relative to the workdir)."""

    @abc.abstractmethod
    async def download(self, path: str, *, max_bytes: int = 16 << 20) -> bytes:
        """Read a file from the workspace (relative to the workdir)."""

    @abc.abstractmethod
    async def reset(self) -> None:
        """Return to the just-created state: nothing of earlier runs may remain (files, processes)."""

    @abc.abstractmethod
    async def destroy(self) -> None:
        """Kill everything inside and free all resources. Idempotent."""

    async def __aenter__(self) -> "Sandbox":
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.destroy()


class SandboxBackend(abc.ABC):
    name: str = ""

    @abc.abstractmethod
    async def create(self, spec: SandboxSpec) -> Sandbox:
        ...

    @abc.abstractmethod
    async def health(self) -> dict:
        """``{"ok": bool, ...}`` — is the backend usable here (binary present, daemon reachable)?"""

    async def close(self) -> None:
        """Release backend-wide resources (pools, clients)."""
