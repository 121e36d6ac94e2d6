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
* ``upload(files)``, ``download(path)``, ``reset()``, ``destroy()``. A path the workspace's
  contents make unusable (a directory or symlink where a file goes) raises
  :class:`SandboxPathError`, a subclass of ``SandboxError`` callers can tell apart.
* ``await sandbox.exec_python(path=... | code=..., ...) -> ExecResult`` — run Python with the
  sandbox's interpreter; a backend may serve it from a pre-forked interpreter (the process
  backend's zygote: no interpreter start-up per run). Same verdicts as ``exec``.
* ``await sandbox.start_process(argv, limits=...) -> SandboxProcess`` — a long-lived process
  (notebook kernel, shell) talked to over stdin/stdout; killed by ``reset()``/``destroy()``.
  Backends without it raise :class:`SandboxError` and set ``supports_processes = False``.
* ``await sandbox.end_processes()`` — kill everything the sandbox runs (long-lived processes
  and whatever earlier execs left in the background), keeping the workspace: a verifier calls
  it before it writes and runs a checker, so nothing of the program can still act.
* ``system_writable`` — True where a program can change files outside the workspace that
  later runs use (a container's ``/usr``, ``/etc``); such a sandbox's interpreter and tools
  are no longer the image's, and ``archive_workspace``/``extract_workspace`` move the
  workspace into a fresh sandbox for a check.
"""

from __future__ import annotations

import abc
import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping, Sequence

if TYPE_CHECKING:
    from .ceiling import Ceiling


class SandboxError(RuntimeError):
    """Infrastructure failure (not the sandboxed program's fault). Maps to failure class ``sandbox_error``."""


class LostOutputError(SandboxError):
    """What a run printed was lost between the program and the server (the container backend: the
    wrapper's end marks never came): the program ran, so its side effects stand, but its output is
    unknown. Infrastructure, never
    the program's result; a caller may run a command again only if it has no side effects, or
    use ``exit_code`` (the runtime's record of how the run ended) where that is all it needs."""

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class SandboxPathError(SandboxError):
    """A workspace path cannot be written or read as asked because of what is there: a
    directory, a symlink or a file where the program (or the caller's own files) put one,
    or a path leading out of the workspace. The program's doing, not infrastructure: a
    caller scoring the program catches it before :class:`SandboxError`. A subclass so that
    code which only knows ``SandboxError`` still fails cleanly."""


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
    # > 1: the deadline counts the run's own time (wall minus the time it waited for a CPU other
    # processes held), within this many times the deadline of wall clock (process and apptainer
    # backends; the container backend keeps the plain wall clock).
    wall_stretch: float = 1.0


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
    # Timed out: the run's own time when it was stopped (wall minus waited_s, the time it waited
    # for a CPU other processes held; waited_s is measured for Limits.wall_stretch runs only).
    # Below the deadline it asked for, the wall-clock cap stopped it on a busy machine.
    own_s: float | None = None
    waited_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.verdict is ResourceVerdict.OK and self.exit_code == 0

    def text(self, stream: str = "stdout") -> str:
        return getattr(self, stream).decode("utf-8", errors="replace")


@dataclass
class ReadResult:
    """What :meth:`SandboxProcess.read_until` got. ``reason``: ``marker`` (found; ``data``
    ends with it), ``timeout``, ``eof`` (the process closed the stream / exited) or
    ``max_bytes`` (that much arrived without the marker; ``data`` holds it)."""

    data: bytes
    reason: str

    @property
    def found(self) -> bool:
        return self.reason == "marker"


class SandboxProcess(abc.ABC):
    """A long-lived process inside a sandbox (see :meth:`Sandbox.start_process`).

    Its limits hold for its whole life (CPU seconds are cumulative); per-request deadlines
    are the ``timeout`` of :meth:`read_until`, after which the caller decides (usually
    :meth:`kill` and start a new one). Output is buffered up to a cap per stream; past it
    the process is blocked on write until the caller reads, never buffered without bound.
    """

    @abc.abstractmethod
    async def write_stdin(self, data: bytes) -> None:
        """Send bytes to the process's stdin; SandboxError if it has exited."""

    @abc.abstractmethod
    async def read_until(self, marker: bytes, *, timeout: float, max_bytes: int = 1 << 20,
                         stream: str = "stdout") -> ReadResult:
        """Consume ``stream`` up to and including ``marker``."""

    @abc.abstractmethod
    def take(self, stream: str = "stderr") -> bytes:
        """Return and drop whatever is buffered on ``stream`` right now."""

    @property
    @abc.abstractmethod
    def returncode(self) -> int | None:
        """None while running; the exit status once it has ended (128+N: signal N)."""

    @abc.abstractmethod
    async def kill(self) -> None:
        """Kill the process and everything it started. Idempotent."""

    @abc.abstractmethod
    async def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the process to end by itself: its ``returncode``, or None on timeout."""


def run_terms(spec_limits: Limits, limits: Limits | None, timeout: float | None,
              stdin: bytes | str | None) -> tuple[Limits, float, bytes | None]:
    """What one run gets: the call's limits (else the spec's), its deadline (``timeout``, else
    the limits' wall clock) and its stdin as bytes."""
    lim = limits or spec_limits
    return lim, (timeout if timeout is not None else lim.wall_s), (stdin.encode() if isinstance(stdin, str) else stdin)


class Sandbox(abc.ABC):
    """A live isolated workspace. Use as ``async with``: destroyed on exit."""

    supports_processes: bool = False  # start_process available (False: it raises SandboxError)
    system_writable: bool = False     # a program can change the system files later runs use (container)
    _destroyed: bool = False  # set by destroy(); every later use raises
    # The interpreter's path inside the sandbox (what exec_python runs): the image's python3,
    # or for the process backend the server's own (or the configured) interpreter.
    python: str = "python3"

    def _check_alive(self) -> None:
        if self._destroyed:
            raise SandboxError("sandbox already destroyed")

    @abc.abstractmethod
    async def exec(self, cmd: Sequence[str] | str, *, stdin: bytes | str | None = None,
                   timeout: float | None = None, limits: Limits | None = None,
                   env: Mapping[str, str] | None = None) -> ExecResult:
        """Run ``cmd`` (argv list, or a string run by ``/bin/sh -c``) in the workspace."""

    async def exec_python(self, *, path: str | None = None, code: str | None = None,
                          args: Sequence[str] = (), stdin: bytes | str | None = None,
                          timeout: float | None = None, limits: Limits | None = None,
                          env: Mapping[str, str] | None = None) -> ExecResult:
        """Run a workspace script (``path``) or source text (``code``) with the sandbox's
        Python in isolated mode (``-I``). This default is a plain ``exec``; backends may
        override it with something faster that gives the same result."""
        if (path is None) == (code is None):
            raise ValueError("give exactly one of path= or code=")
        argv = [self.python, "-I", *((path,) if path is not None else ("-c", code)), *args]
        return await self.exec(argv, stdin=stdin, timeout=timeout, limits=limits, env=env)

    async def start_process(self, argv: Sequence[str], *, limits: Limits | None = None,
                            env: Mapping[str, str] | None = None) -> SandboxProcess:
        """Start a long-lived process in the workspace (see :class:`SandboxProcess`)."""
        raise SandboxError(f"{type(self).__name__} cannot run long-lived processes")

    async def end_processes(self) -> None:
        """Kill every process of this sandbox, keep the workspace. This default serves backends
        where nothing outlives an exec (apptainer: each exec is its own PID namespace) and no
        long-lived process exists; backends with either override it."""
        self._check_alive()

    async def archive_workspace(self, *, max_bytes: int) -> bytes:
        """The workspace as a tar archive (symlinks as links), for :meth:`extract_workspace` in
        another sandbox. :class:`SandboxPathError` when it holds more than ``max_bytes``."""
        raise SandboxError(f"{type(self).__name__} cannot archive its workspace")

    async def extract_workspace(self, archive: bytes) -> None:
        """Replace this sandbox's workspace with an :meth:`archive_workspace` archive."""
        raise SandboxError(f"{type(self).__name__} cannot extract a workspace archive")

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
    # Set by every backend's constructor: the hard limits its sandboxes inherit. No run asks
    # the kernel for more (sandboxes/ceiling.py, one policy for every backend).
    ceiling: "Ceiling"

    async def describe(self) -> dict:
        """What this backend gives its sandboxes on this host (start-up log, ``/info``)."""
        return {"backend": self.name, "inherited_hard_limits": self.ceiling.describe()}

    @abc.abstractmethod
    async def create(self, spec: SandboxSpec) -> Sandbox:
        ...

    @abc.abstractmethod
    async def health(self) -> dict:
        """``{"ok": bool, ...}`` — is the backend usable here (binary present, daemon reachable)?"""

    async def close(self) -> None:
        """Release backend-wide resources (pools, clients)."""
