"""The generation server a run starts for itself: ``envs model serve`` on loopback.

With ``policy.generation.backend=server`` and no ``policy.generation.server.url``, the driver starts
one ``envs model serve`` for the run (:meth:`GenerationServer.for_run`) — the same command a user
runs, with the RL routes on (``--weight-transfer-config '{"backend": "disk"}'``) — and hands its URL
to the generators (:attr:`GenerationServer.config`, the run config with the URL filled in). It
serves the policy's model (``tiny`` with the run's seed; a tiny geometry from
``hf_config_overrides`` as a folder written under the log dir; any other ``policy.model_name`` as
is); which weights it starts with does not matter, the trainer pushes its own before the first
batch. It binds port 0 and says its URL through ``--ready-file``; its output goes to
``<log_dir>/generation_server.log``. It runs in its own session (a Ctrl-C in the driver's terminal
is the driver's to handle) and is stopped with SIGTERM, then SIGKILL of its process group; it gets
SIGTERM from the kernel if the driver dies without stopping it, and :meth:`GenerationServer.check`
raises :class:`~trainer.child_servers.ServerExited` once it is no longer running
(trainer/child_servers.py).

Placement (:func:`placement`): the trainer on ``policy.device``; the server on
``policy.generation.server.device`` (``auto``: the trainer's device, one GPU shared) or another
device of this machine (``cuda:1``: generation and training on separate GPUs).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer.child_servers import ServerExited, check_running, ending_with_this_process

if TYPE_CHECKING:
    from trainer.config import MasterConfig


class GenerationServerError(RuntimeError):
    pass


def server_device(cfg: "MasterConfig") -> str:
    """The started server's ``--device``: ``policy.generation.server.device``, ``auto`` meaning the trainer's."""
    device = cfg.policy.generation.server.device
    return cfg.policy.device if device == "auto" else device


def _here(device: str) -> str:
    """``auto`` with what it is on this machine."""
    from trainer.policy import resolve_device

    try:
        resolved = str(resolve_device(device))
    except ValueError:
        return f"{device} (torch sees no such device here)"
    return device if resolved == device else f"{device} ({resolved} here)"


def placement(cfg: "MasterConfig") -> str:
    """One line for the plan: where the trainer and the generation run."""
    gc = cfg.policy.generation
    trainer = f"trainer on policy.device={_here(cfg.policy.device)}"
    compiled = ", compiled decode steps" if gc.compile else ""
    if gc.backend == "local":
        return f"placement: {trainer}; generation in the generator actors on the same device (backend local{compiled})"
    if gc.server.url:
        return f"placement: {trainer}; generation on the server at {gc.server.url} (backend server, not started here)"
    device = server_device(cfg)
    shared = "one device shared with the trainer" if device == cfg.policy.device else "its own device"
    return (f"placement: {trainer}; generation on `envs model serve` started on loopback, --device "
            f"{_here(device)} ({shared}), --cpu-threads {gc.server.cpu_threads}{' --compile' if gc.compile else ''} (backend server)")


class GenerationServer:
    def __init__(self, cfg: "MasterConfig", log_dir: str | Path, *, start_timeout_s: float = 300.0):
        self.log_dir = Path(log_dir)
        self.start_timeout_s = start_timeout_s
        self.process: subprocess.Popen | None = None
        self.url: str | None = None
        self._cfg = cfg

    @classmethod
    def for_run(cls, cfg: "MasterConfig", log_dir: str | Path) -> "GenerationServer | None":
        """The server a run must start (started), or None: backend local, or a URL given."""
        gc = cfg.policy.generation
        if gc.backend != "server" or gc.server.url:
            return None
        server = cls(cfg, log_dir)
        server.start()
        return server

    @property
    def config(self) -> "MasterConfig":
        """The run config with this server's URL as ``policy.generation.server.url``."""
        cfg = self._cfg.model_copy(deep=True)
        cfg.policy.generation.server.url = self.url
        return cfg

    def argv(self) -> list[str]:
        cfg = self._cfg
        gc = cfg.policy.generation
        source, seed = self._source()
        return [sys.executable, "-m", "servers.cli", "model", "serve", source, *seed, "--host", "127.0.0.1", "--port", "0",
                "--engine", "verigym", "--device", server_device(cfg), "--dtype", cfg.policy.precision,
                "--cpu-threads", str(gc.server.cpu_threads), *(["--compile"] if gc.compile else []),
                # one generator's lockstep batch: every row it sends at once decodes as one batch
                "--max-batch-size", str(cfg.policy.generation_batch_size * cfg.grpo.num_generations_per_prompt),
                "--weight-transfer-config", json.dumps({"backend": "disk"}),
                "--ready-file", str(self._ready_file)]

    @property
    def _ready_file(self) -> Path:
        return self.log_dir / "generation_server.ready.json"

    def _source(self) -> tuple[str, list[str]]:
        p = self._cfg.policy
        if p.model_name != "tiny":
            return p.model_name, []
        if not p.hf_config_overrides:
            return "tiny", ["--seed", str(self._cfg.grpo.seed)]
        from trainer.policy import load_policy  # the run's tiny geometry, as a folder the server loads

        folder = self.log_dir / "generation_server_model"
        load_policy(self._cfg, None, device="cpu").save(folder)
        return str(folder.resolve()), []

    @property
    def log_path(self) -> Path:
        return self.log_dir / "generation_server.log"

    def check(self) -> None:
        """Raise :class:`~trainer.child_servers.ServerExited` if the started server has exited."""
        check_running("the generation server", "envs model serve", self.process, self.log_path)

    def start(self) -> str:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._ready_file.unlink(missing_ok=True)
        log_path = self.log_path
        with open(log_path, "wb") as log:
            self.process = subprocess.Popen(ending_with_this_process(self.argv()), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            env={**os.environ, "PYTHONUNBUFFERED": "1"}, start_new_session=True)
        deadline = time.monotonic() + self.start_timeout_s
        while self.url is None:
            if self._ready_file.exists():
                try:
                    self.url = json.loads(self._ready_file.read_text())["url"]
                    break
                except (ValueError, KeyError):
                    pass  # being written: read it again
            if self.process.poll() is not None:  # one line: how it ended, its log and the log's last line
                exited = ServerExited("the generation server", "envs model serve", self.process.pid,
                                      self.process.returncode, log_path)
                raise GenerationServerError(f"{exited} before it was ready; {exited.where_to_look()}")
            if time.monotonic() > deadline:
                self.kill()
                raise GenerationServerError(f"the generation server was not ready after {self.start_timeout_s:g}s "
                                            f"(log: {log_path})")
            time.sleep(0.05)
        return self.url

    def kill(self) -> None:
        """SIGKILL the server with its process group (a forced exit; tests simulate a crash with it)."""
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    def stop(self, grace_s: float = 10.0) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        self.kill()
        self.process = None

    def __enter__(self) -> "GenerationServer":
        if self.process is None:
            self.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self.stop()
