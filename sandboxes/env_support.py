"""What every environment that runs code in a sandbox shares: its config keys, the backend's
life cycle (open at setup, health, close) and the start-up check.

Mixins, so an environment stays one class with one config::

    class TerminalConfig(SandboxLimitsConfig, EnvConfig): ...
    class TerminalEnv(SandboxedEnvironment, Environment):   # mixin first: its setup/close/health win
        Config = TerminalConfig

Start-up check (``setup``): the backend's inherited hard limits are compared with what one
sandboxed run needs (:mod:`sandboxes.ceiling`), the environment's run limits are clamped to
them, and a **canary** — one trivial program through the environment's real path
(:meth:`SandboxedEnvironment.sandbox_canary`) — must succeed. The outcome is one log line,
``/info["sandbox"]``, and ``/health``: when the environment cannot work here, ``/health``
answers 503 with ``fatal`` set to the reason (``envs serve`` prints it and stops) instead of
a healthy server that fails every request.

This module knows nothing of ``servers`` (sandboxes and servers import nothing of each
other); it relies only on the environment having a ``config`` with the keys below and a
``name``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from pydantic import BaseModel, Field

from . import open_backend
from .base import Limits, SandboxBackend, SandboxSpec
from .ceiling import RUN_MINIMUM, effective_limits

log = logging.getLogger("verigym.sandbox")

# The canary is one trivial run; this is generous for a first interpreter start on a loaded host.
CANARY_TIMEOUT_S = 60.0


class CanaryFailed(RuntimeError):
    """The start-up canary ran but did not give the expected result."""


class SandboxConfig(BaseModel):
    """Which backend runs the environment's code, and how it is opened."""

    sandbox_backend: str = Field("process", description="sandboxes.open_backend name: process | container | apptainer.")
    sandbox_options: dict[str, Any] = Field(default_factory=dict, description="Backend constructor options.")


class SandboxLimitsConfig(SandboxConfig):
    """Plus the per-process caps of a command; environments redeclare a key to change its default."""

    memory_mb: int = Field(2048, ge=64, description="Address-space limit per process.")
    max_processes: int = Field(64, ge=4, description="Processes at once inside the sandbox.")
    max_output_bytes: int = Field(1 << 20, ge=1024, description="Output captured per stream; past it the command is killed.")

    def limits(self, wall_s: float) -> Limits:
        """Limits of one command: ``wall_s`` of wall clock and as many CPU seconds (a busy loop
        and a sleep are both stopped), the configured caps for the rest."""
        return Limits(wall_s=wall_s, cpu_s=wall_s, memory_mb=self.memory_mb, max_processes=self.max_processes,
                      max_output_bytes=self.max_output_bytes)


class SandboxedEnvironment:
    """The sandbox backend of an environment whose config is a :class:`SandboxConfig`.

    ``backend`` opens on first use; ``setup()`` opens it at once and runs the start-up check,
    unless ``open_backend_at_setup`` is False (swe: the server starts without a container
    engine; its check is the backend's reachability, reported but not fatal, and
    ``/health`` says what is missing until the engine answers).
    """

    config: Any  # a SandboxConfig; set by servers.environment.Environment.__init__
    name: str
    open_backend_at_setup: bool = True
    _sandbox_backend: SandboxBackend | None = None
    _sandbox_report: dict[str, Any] | None = None  # what the start-up check found (/info "sandbox")
    _sandbox_fatal: str | None = None             # why this environment cannot work here

    @property
    def backend(self) -> SandboxBackend:
        if self._sandbox_backend is None:
            self._sandbox_backend = open_backend(self.config.sandbox_backend, **self.sandbox_backend_options())
        return self._sandbox_backend

    # ---- what an environment may override ------------------------------------------------
    def sandbox_backend_options(self) -> dict[str, Any]:
        """The backend's constructor options: ``sandbox_options`` from the config; an
        environment adds its own (terminal: a read-only folder of its check's helpers)."""
        return dict(self.config.sandbox_options)

    def sandbox_run_limits(self) -> Limits:
        """The limits of this environment's usual sandboxed run (reported, clamped, at start)."""
        limits = getattr(self.config, "limits", None)
        return limits(10.0) if callable(limits) else Limits()

    async def sandbox_canary(self) -> str:
        """Run one trivial program through the environment's real sandbox path; return what
        was checked, raise (:class:`CanaryFailed`, ``SandboxError``...) when it failed."""
        sandbox = await self.backend.create(SandboxSpec(limits=self.sandbox_run_limits()))
        try:
            result = await sandbox.exec_python(code="print(6 * 7)", timeout=30)
        finally:
            await sandbox.destroy()
        if not (result.ok and result.stdout.strip() == b"42"):
            raise CanaryFailed(f"python in the sandbox gave {result.verdict.value}, exit {result.exit_code}: "
                               f"{(result.stdout + result.stderr).decode('utf-8', 'replace')[-800:]}")
        return "python ran in a sandbox"

    # ---- life cycle ----------------------------------------------------------------------
    async def setup(self) -> None:
        if self.open_backend_at_setup:
            await self.check_sandbox()
        else:
            await self._report_reachability()

    async def check_sandbox(self) -> None:
        """The start-up check: inherited limits, effective run limits, canary. Never raises:
        a problem is logged, kept for ``/health`` (503 + ``fatal``) and ``/info``."""
        problems: list[str] = []
        try:
            backend = self.backend
            report: dict[str, Any] = await backend.describe()
        except Exception as exc:  # noqa: BLE001 - a backend that cannot even open is the finding
            self._set_fatal({"backend": self.config.sandbox_backend}, [f"the {self.config.sandbox_backend} "
                                                                       f"sandbox backend cannot open: {exc}"])
            return
        run = self.sandbox_run_limits()
        report["run_needs_at_least"] = dict(RUN_MINIMUM)  # below any of these: unusable (fatal)
        report["effective_limits"] = effective_limits(run, backend.ceiling)
        report["clamped"] = backend.ceiling.clamped(run)
        problems += backend.ceiling.shortfalls()
        if not problems:
            started = time.monotonic()
            try:
                checked = await asyncio.wait_for(self.sandbox_canary(), CANARY_TIMEOUT_S)
                report["canary"] = {"ok": True, "checked": checked, "seconds": round(time.monotonic() - started, 3)}
            except Exception as exc:  # noqa: BLE001 - whatever broke, the server must say so, not crash
                took = time.monotonic() - started
                detail = f"{type(exc).__name__}: {exc}" if str(exc) else f"{type(exc).__name__} after {took:.0f}s"
                report["canary"] = {"ok": False, "error": detail}
                problems.append(f"start-up canary failed: {detail}")
        if problems:
            self._set_fatal(report, problems)
            return
        self._sandbox_report = report
        log.log(logging.WARNING if report["clamped"] else logging.INFO, "%s: %s", self.name, _summary(report))

    def _set_fatal(self, report: dict[str, Any], problems: list[str]) -> None:
        self._sandbox_fatal = f"{self.name} cannot run sandboxed code here: " + "; ".join(problems)
        report["fatal"] = self._sandbox_fatal
        self._sandbox_report = report
        log.error("%s", self._sandbox_fatal)

    async def _report_reachability(self) -> None:
        """Backends opened lazily (swe): describe them and check they answer, without
        creating a sandbox (an image pull can take many minutes). Not fatal, unless the backend
        says its problem is permanent (a missing binary)."""
        try:
            report = await self.backend.describe()
            health = await asyncio.wait_for(self.backend.health(), CANARY_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001
            report = {"backend": self.config.sandbox_backend}
            health = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        report["canary"] = {"ok": bool(health.get("ok")), "checked": "the backend answers (no sandbox started)",
                            **({} if health.get("ok") else {"error": health.get("error")})}
        if not health.get("ok") and health.get("permanent"):  # e.g. no apptainer binary: waiting cannot help
            self._set_fatal(report, [str(health.get("error"))])
            return
        self._sandbox_report = report
        log.log(logging.INFO if health.get("ok") else logging.WARNING, "%s: %s", self.name, _summary(report))

    async def close(self) -> None:
        if self._sandbox_backend is not None:
            await self._sandbox_backend.close()

    async def health(self) -> dict[str, Any]:
        if self._sandbox_fatal is not None:
            return {"ok": False, "fatal": self._sandbox_fatal, "error": self._sandbox_fatal}
        try:
            return await self.backend.health()
        except Exception as exc:  # noqa: BLE001 - e.g. the docker SDK missing: report, do not crash /health
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}

    def runtime_info(self) -> dict[str, Any]:
        return {"sandbox": self._sandbox_report} if self._sandbox_report is not None else {}


def _summary(report: dict[str, Any]) -> str:
    """The start-up log line: backend, interpreter, inherited limits, what a run gets."""
    inherited = report.get("inherited_hard_limits", {})
    hard = " ".join(f"{k}={'unlimited' if inherited.get(k) is None else inherited[k]}"
                    for k in ("nproc", "nofile", "as", "cpu", "fsize"))
    eff = report.get("effective_limits", {})
    run = " ".join(f"{k}={eff[k]}" for k in ("max_processes", "max_open_files", "memory_mb", "cpu_s", "max_file_mb")
                   if k in eff)
    interp = report.get("interpreter", {})
    parts = [f"sandbox {report.get('backend')}" + (f" ({report['mode']})" if "mode" in report else "")]
    if interp.get("executable"):
        parts.append(f"python {interp['executable']} {interp.get('version', '')}".rstrip())
    parts.append(f"inherited hard limits: {hard}")
    if run:
        parts.append(f"per run: {run}")
    for name, change in report.get("clamped", {}).items():
        parts.append(f"{name} lowered from {change['asked']} to {change['effective']} by the inherited limits")
    canary = report.get("canary")
    if canary:
        parts.append(f"canary ok ({canary['checked']}, {canary.get('seconds', 0)}s)" if canary["ok"]
                     else f"canary FAILED: {canary.get('error')}")
    return "; ".join(parts)
