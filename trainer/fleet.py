"""Start and stop the environment servers a blend needs, as loopback subprocesses.

One ``envs serve ENV --ready-file F`` per environment — the same launcher a user or a cluster
job runs (servers/cli_serve.py; trainer/launch/fleet_steps.py uses it on every fleet node), so
there is one way an environment server starts, binds, reports and stops. Each server binds
port 0 and ``envs serve`` writes the URL it actually got to the ready file once ``/health``
answers 200, so there is no free-port race and no second ready protocol. Servers are stopped
with SIGTERM (``envs serve`` forwards it: in-flight work drains), then SIGKILL of the process
group after a grace period; ``Fleet`` is a context manager, so an interrupted run does not
leave servers behind, and each server gets SIGTERM from the kernel if the process that started it
dies without stopping it (trainer/child_servers.py). :meth:`Fleet.check` raises
:class:`~trainer.child_servers.ServerExited` for a server that is no longer running.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.child_servers import check_running, ending_with_this_process


def override_pairs(overrides: dict[str, Any], prefix: str = "") -> list[str]:
    """``{judges: {genrm: {base_url: U}}}`` -> ``["judges.genrm.base_url=U"]`` (what ``envs serve
    NAME key=value`` takes; values as JSON, which its YAML parsing reads back unchanged)."""
    pairs: list[str] = []
    for key, value in overrides.items():
        if isinstance(value, dict) and value:
            pairs += override_pairs(value, f"{prefix}{key}.")
        else:
            pairs.append(f"{prefix}{key}={json.dumps(value)}")
    return pairs


class FleetError(RuntimeError):
    """A server that did not start. ``str()``: what happened and the end of its log; ``line``: what
    happened in one line, with where its log is and the log's last line."""

    def __init__(self, message: str, log_path: Path | None = None, tail: str = ""):
        super().__init__(f"{message}:\n{tail}" if tail else message)
        last = tail.strip().splitlines()[-1].strip() if tail.strip() else ""
        self.line = (message + (f"; its log: {log_path}" if log_path else "")
                     + (f" (last line: {last[:300]})" if last else ""))


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
                 start_timeout_s: float = 300.0, log_dir: str | Path | None = None):
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

    def _ready_file(self, env: str) -> Path:
        return self.log_dir / f"{env}.ready.json"

    def _launch(self, env: str) -> tuple[subprocess.Popen, Path]:
        log_path = self.log_dir / f"{env}.log"
        ready = self._ready_file(env)
        ready.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "servers.cli", "serve", env, *override_pairs(self.overrides.get(env, {})),
               "--host", "127.0.0.1", "--workers", "1", "--ready-file", str(ready)]
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                ending_with_this_process(cmd), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                start_new_session=True,  # a Ctrl-C in the driver's terminal is handled by the driver, not each server
            )
        return process, log_path

    def _await_ready(self, env: str, process: subprocess.Popen, log_path: Path) -> str:
        """The URL from ``envs serve``'s ready file (written once ``/health`` is 200)."""
        ready = self._ready_file(env)
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            if ready.exists():
                try:
                    return json.loads(ready.read_text())["urls"][env]
                except (ValueError, KeyError):
                    pass  # written whole then renamed, so this is a file of someone else's: keep waiting
            if process.poll() is not None:
                tail = log_path.read_text(errors="replace")[-3000:]
                raise FleetError(f"environment server {env!r} exited with {process.returncode} before it was ready",
                                 log_path, tail)
            if time.monotonic() > deadline:
                _kill_group(process)
                raise FleetError(f"environment server {env!r} not ready after {self.start_timeout_s:g}s", log_path)
            time.sleep(0.05)

    def check(self) -> None:
        """Raise :class:`~trainer.child_servers.ServerExited` if a started server has exited."""
        for server in self.servers.values():
            check_running(f"the environment server {server.env!r}", "envs serve", server.process, server.log_path)

    def kill(self, env: str) -> None:
        """Kill one server hard, with its ``envs serve`` supervisor (tests simulate a crashed
        environment with it)."""
        _kill_group(self.servers[env].process)

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
                pass
            _kill_group(server.process)  # what outlived it in its group (the workers of a supervisor that was killed)
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
