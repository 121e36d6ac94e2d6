"""What every environment that runs code in a sandbox shares: its config keys and the
backend's life cycle (open at setup, health, close).

Mixins, so an environment stays one class with one config::

    class TerminalConfig(SandboxLimitsConfig, EnvConfig): ...
    class TerminalEnv(SandboxedEnvironment, Environment):   # mixin first: its setup/close/health win
        Config = TerminalConfig

This module knows nothing of ``servers`` (sandboxes and servers import nothing of each
other); it relies only on the environment having a ``config`` with the keys below.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from . import open_backend
from .base import Limits, SandboxBackend


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

    ``backend`` opens on first use; ``setup()`` uses it at once so a bad backend name or
    missing options fail at server start, unless ``open_backend_at_setup`` is False (swe:
    the server starts without a container engine and ``/health`` says what is missing).
    """

    config: Any  # a SandboxConfig; set by servers.environment.Environment.__init__
    open_backend_at_setup: bool = True
    _sandbox_backend: SandboxBackend | None = None

    @property
    def backend(self) -> SandboxBackend:
        if self._sandbox_backend is None:
            self._sandbox_backend = open_backend(self.config.sandbox_backend, **self.config.sandbox_options)
        return self._sandbox_backend

    async def setup(self) -> None:
        if self.open_backend_at_setup:
            self.backend  # noqa: B018 - opens it

    async def close(self) -> None:
        if self._sandbox_backend is not None:
            await self._sandbox_backend.close()

    async def health(self) -> dict[str, Any]:
        try:
            return await self.backend.health()
        except Exception as exc:  # noqa: BLE001 - e.g. the docker SDK missing: report, do not crash /health
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
