"""Deployments of the sandboxed environments as users run them (issue 13), as real processes.

A :class:`Deployment` is how the server process is started: an argv prefix (``prlimit``,
``unshare`` + ``setpriv``) and an interpreter (a venv under ``/tmp``). ``served()`` starts
``envs serve`` that way, waits for its ``VERIGYM-READY`` line and stops it with SIGTERM.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pytest

REPO = Path(__file__).resolve().parents[2]
READY_MARK = "VERIGYM-READY "


@dataclass
class Deployment:
    name: str
    python: str = sys.executable
    prefix: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    def argv(self, *args: str) -> list[str]:
        return [*self.prefix, self.python, *args]

    def run(self, *args: str, timeout: float) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(*args), cwd=REPO, env={**os.environ, **self.env}, capture_output=True,
                              text=True, timeout=timeout)


@contextlib.contextmanager
def served(deployment: Deployment, *names: str, overrides: tuple[str, ...] = (),
           timeout_s: float = 120) -> Iterator[dict[str, str]]:
    """``envs serve NAMES`` started the deployment's way; yields ``{name: url}``."""
    proc = subprocess.Popen(deployment.argv("-m", "servers.cli", "serve", *names, *overrides), cwd=REPO,
                            env={**os.environ, **deployment.env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    lines: list[str] = []
    ready: dict = {}
    got = threading.Event()

    def read_stdout() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            if line.startswith(READY_MARK) and not got.is_set():
                ready.update(json.loads(line[len(READY_MARK):]))
                got.set()
        got.set()

    def read_stderr() -> None:
        lines.extend(proc.stderr)  # type: ignore[arg-type]

    threads = [threading.Thread(target=read_stdout, daemon=True), threading.Thread(target=read_stderr, daemon=True)]
    for t in threads:
        t.start()
    try:
        got.wait(timeout_s)
        assert ready.get("urls"), (f"{deployment.name}: envs serve {' '.join(names)} did not get ready "
                                   f"(exit {proc.poll()}):\n{''.join(lines)[-4000:]}")
        yield ready["urls"]
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for t in threads:
            t.join(5)


def spare_uid() -> int:
    """A uid no process runs as and no passwd entry names (below the sandbox uid range)."""
    with open("/etc/passwd") as f:
        taken = {int(line.split(":")[2]) for line in f if line.count(":") >= 3}
    running = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                running.add(os.stat(f"/proc/{name}").st_uid)
            except FileNotFoundError:
                continue
    for uid in range(61000 + os.getpid() % 1000, 65000):
        if uid not in taken and uid not in running:
            return uid
    raise RuntimeError("no spare uid")


@contextlib.contextmanager
def unprivileged(tmp: Path) -> Iterator[Deployment]:
    """The server as a spare uid with a HOME of its own (``tests/deploy/as_user.py``)."""
    if os.geteuid() != 0:
        pytest.skip("switching to a spare uid needs root (CI runs as root)")
    for tool in ("unshare", "setpriv", "mount"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not installed (util-linux)")
    uid = spare_uid()
    home = Path(tempfile.mkdtemp(prefix="verigym-home-"))  # pytest's own tmp folders are root-only
    stage = tmp / "stage"
    stage.mkdir()
    os.chown(home, uid, uid)
    prefix = ["unshare", "--mount", "--propagation", "private", sys.executable, str(REPO / "tests/deploy/as_user.py"),
              str(uid), str(home), str(stage), "--"]
    try:
        yield Deployment(f"uid {uid}", prefix=prefix, env={"TMPDIR": "/tmp"})
    finally:
        # What the uid's processes left: its HOME, the sandboxes' state folder, pytest's temp.
        for path in (home, Path(f"/tmp/verigym-sandboxes-{uid}"), Path(f"/tmp/pytest-of-uid{uid}")):
            shutil.rmtree(path, ignore_errors=True)


def venv_under_tmp(tmp: Path) -> Deployment:
    """A venv under /tmp (pytest's tmp folders are there) that sees this interpreter's
    packages: the interpreter path is the point, not a fresh install."""
    assert str(tmp.resolve()).startswith("/tmp/"), tmp
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True,
                   timeout=120)
    # --system-site-packages sees the *base* interpreter's packages; when this suite itself runs in
    # a venv (a user's setup), the packages are in that venv: a .pth file adds its site folders.
    here = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    inner = subprocess.run([str(venv / "bin" / "python3"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                           check=True, capture_output=True, text=True, timeout=60).stdout.strip()
    Path(inner, "verigym-outer-env.pth").write_text("".join(f"{p}\n" for p in here))
    return Deployment(f"venv {venv}", python=str(venv / "bin" / "python3"))


def limited() -> Deployment:
    if shutil.which("prlimit") is None:
        pytest.skip("prlimit not installed (util-linux)")
    return Deployment("prlimit --nproc=512 --nofile=1024", prefix=["prlimit", "--nproc=512", "--nofile=1024"])
