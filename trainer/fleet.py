"""Start and stop the environment servers a blend needs, as loopback subprocesses.

Each server is its own process (as in production: one deployable per environment). The
child binds port 0 and prints the URL it got, so there is no free-port race; the parent
then waits for ``GET /health`` = 200 before handing the URL out. Servers are stopped
with SIGTERM (they drain in-flight work), then SIGKILL after a grace period; ``Fleet``
is a context manager, so an interrupted run does not leave servers behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

READY_MARK = "VERIGYM_SERVER_READY"

# The child: build the environment through the registry, serve it until signalled, and
# announce the bound URL on stdout. Config overrides arrive as JSON in argv[2].
_CHILD = (
    "import asyncio, json, sys\n"
    "from servers import registry\n"
    "from servers.app import serve_until_signalled\n"
    "env = registry.instantiate(sys.argv[1], overrides=json.loads(sys.argv[2]))\n"
    f"ready = lambda url: print('{READY_MARK}', url, flush=True)\n"
    "asyncio.run(serve_until_signalled(env, '127.0.0.1', 0, on_ready=ready))\n"
)


class FleetError(RuntimeError):
    pass


@dataclass
class ServerProcess:
    env: str
    process: subprocess.Popen
    url: str
    log_path: Path

    def alive(self) -> bool:
        return self.process.poll() is None


class Fleet:
    """``with Fleet(["math", "mcqa"]) as fleet: fleet.urls`` -> ``{"math": "http://127.0.0.1:P", ...}``."""

    def __init__(self, envs: list[str], *, overrides: dict[str, dict[str, Any]] | None = None,
                 start_timeout_s: float = 120.0, log_dir: str | Path | None = None):
        self.envs = list(dict.fromkeys(envs))
        self.overrides = overrides or {}
        self.start_timeout_s = start_timeout_s
        self.log_dir = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix="verigym-fleet-"))
        self.servers: dict[str, ServerProcess] = {}

    @property
    def urls(self) -> dict[str, str]:
        return {name: server.url for name, server in self.servers.items()}

    def __enter__(self) -> "Fleet":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *_: Any) -> None:
        self.stop()

    def start(self) -> None:
        # Launch all first, then wait: servers import and warm up in parallel.
        pending: dict[str, tuple[subprocess.Popen, Path]] = {}
        try:
            for env in self.envs:
                if env not in self.servers:
                    pending[env] = self._launch(env)
            for env, (process, log_path) in list(pending.items()):
                url = self._await_ready(env, process, log_path)
                self.servers[env] = ServerProcess(env, process, url, log_path)
                del pending[env]
        except BaseException:  # a failed or interrupted start leaves no half-started server behind
            for process, _ in pending.values():
                _kill_group(process)
            raise

    def _launch(self, env: str) -> tuple[subprocess.Popen, Path]:
        log_path = self.log_dir / f"{env}.log"
        log = open(log_path, "wb")
        process = subprocess.Popen(
            [sys.executable, "-c", _CHILD, env, json.dumps(self.overrides.get(env, {}))],
            stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, env={**os.environ, "PYTHONUNBUFFERED": "1"},
            start_new_session=True,  # a Ctrl-C in the driver's terminal is handled by the driver, not each server
        )
        log.close()
        return process, log_path

    def _await_ready(self, env: str, process: subprocess.Popen, log_path: Path) -> str:
        found: list[str] = []

        def read() -> None:
            assert process.stdout is not None
            for raw in process.stdout:  # keep draining after the mark so the child never blocks on a full pipe
                line = raw.decode(errors="replace").strip()
                if line.startswith(READY_MARK) and not found:
                    found.append(line.split()[1])

        threading.Thread(target=read, daemon=True, name=f"fleet-{env}").start()
        deadline = time.monotonic() + self.start_timeout_s
        while not found:
            if process.poll() is not None:
                tail = log_path.read_text(errors="replace")[-3000:]
                raise FleetError(f"environment server {env!r} exited with {process.returncode} before it was ready:\n{tail}")
            if time.monotonic() > deadline:
                process.kill()
                raise FleetError(f"environment server {env!r} not ready after {self.start_timeout_s:g}s (log: {log_path})")
            time.sleep(0.05)
        url = found[0]
        while True:
            try:
                with urllib.request.urlopen(url + "/health", timeout=5) as reply:
                    if reply.status == 200:
                        return url
            except OSError:
                pass
            if time.monotonic() > deadline or process.poll() is not None:
                raise FleetError(f"environment server {env!r} at {url} never became healthy (log: {log_path})")
            time.sleep(0.1)


    def kill(self, env: str) -> None:
        """Kill one server hard (tests simulate a crashed environment with it)."""
        server = self.servers[env]
        server.process.kill()
        server.process.wait()

    def kill_now(self) -> None:
        """SIGKILL every server with its process group (its CPU pool): a forced exit, no draining."""
        for server in self.servers.values():
            _kill_group(server.process)

    def stop(self, grace_s: float = 10.0) -> None:
        for server in self.servers.values():
            if server.alive():
                server.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for server in self.servers.values():
            try:
                server.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _kill_group(server.process)
        self.servers.clear()


def _kill_group(process: subprocess.Popen) -> None:
    """Each server leads its own session (``start_new_session``), so its pid is its group id."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def fetch_info(url: str, timeout_s: float = 10.0) -> dict[str, Any]:
    """``GET /info`` of a running server (stateful flag, row fields, tools)."""
    with urllib.request.urlopen(url.rstrip("/") + "/info", timeout=timeout_s) as reply:
        return json.loads(reply.read())
