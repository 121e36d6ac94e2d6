"""The fleet image (deploy/Containerfile), built with Podman and run as users deploy it.

Builds ``verigym-fleet`` with ``scripts/build_fleet_image.sh`` (registry-free: mmdebstrap
bases cached in /var/cache/verigym, dependencies from PyPI), runs ``math`` and ``code`` in
it with the image's default ulimits and user (non-root) and the documented run flags
(``unmask=/proc/*`` and the seccomp profile of ``deploy/seccomp_profile.py``),
waits for the image's own HEALTHCHECK, and scores both environments' example rows over HTTP
(right answers 1, wrong 0, malformed rows 422). Without the flags, the sandboxed ``code``
environment must refuse to report healthy and say why.

Root + Podman only (CI: scripts/test.sh starts Podman); elsewhere it skips with the reason.
The first build takes minutes (two rootfs tarballs, then pip); later ones reuse the caches.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from servers import registry
from servers.client import EnvClient
from servers.examples import check_http, load_examples

# The first build (two mmdebstrap rootfs + pip) takes minutes: more than the suite default.
pytestmark = [pytest.mark.podman, pytest.mark.timeout(1800)]

ROOT = Path(__file__).resolve().parents[1]
IMAGE = "verigym-fleet:test"


def _podman(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout, check=check)


@pytest.fixture(scope="module")
def sandbox_flags(tmp_path_factory) -> list[str]:
    """The documented minimum for bubblewrap inside the container (docs/deploying.md): /proc
    unmasked, and the engine's default seccomp profile plus the calls bubblewrap needs."""
    profile = tmp_path_factory.mktemp("seccomp") / "fleet-seccomp.json"
    made = subprocess.run([sys.executable, str(ROOT / "deploy/seccomp_profile.py")], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"no default seccomp profile to derive from: {made.stderr.strip()}")
    profile.write_text(made.stdout)
    return ["--security-opt", f"seccomp={profile}", "--security-opt", "unmask=/proc/*"]


@pytest.fixture(scope="module")
def fleet_image() -> str:
    if shutil.which("podman") is None:
        pytest.skip("podman not installed (apt-get install podman runc)")
    if os.geteuid() != 0:
        pytest.skip("building the fleet image needs root Podman (CI runs as root)")
    if shutil.which("mmdebstrap") is None and _podman("image", "exists", "verigym-fleet-base:bookworm",
                                                       check=False).returncode != 0:
        pytest.skip("no mmdebstrap to build the Debian base (apt-get install mmdebstrap)")
    build = subprocess.run(["bash", str(ROOT / "scripts/build_fleet_image.sh"), "--tag", IMAGE],
                           capture_output=True, text=True, timeout=1500, cwd=ROOT)
    assert build.returncode == 0, build.stderr[-4000:]
    assert build.stdout.strip().splitlines()[-1] == IMAGE
    return IMAGE


class Container:
    def __init__(self, image: str, envs: list[str], flags: list[str], ports: int):
        self.name = f"verigym-fleet-test-{uuid.uuid4().hex[:8]}"
        publish = [arg for port in range(8000, 8000 + ports) for arg in ("-p", f"127.0.0.1::{port}")]
        _podman("run", "-d", "--name", self.name, *flags, *publish, image, *envs)

    def url(self, port: int) -> str:
        host_port = _podman("port", self.name, f"{port}/tcp").stdout.strip().rsplit(":", 1)[1]
        return f"http://127.0.0.1:{host_port}"

    def state(self) -> str:
        return _podman("inspect", "-f", "{{.State.Status}}", self.name, check=False).stdout.strip()

    def logs(self) -> str:
        out = _podman("logs", self.name, check=False)
        return out.stdout + out.stderr

    def wait_healthy(self, timeout_s: float = 420) -> None:
        """Poll the image's own HEALTHCHECK (no systemd timers here, so run it by hand)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.state() != "running":
                raise AssertionError(f"container stopped before healthy:\n{self.logs()[-4000:]}")
            if _podman("healthcheck", "run", self.name, check=False, timeout=60).returncode == 0:
                return
            time.sleep(2)
        raise AssertionError(f"not healthy after {timeout_s:g}s:\n{self.logs()[-4000:]}")

    def remove(self) -> None:
        _podman("rm", "-f", "-t", "5", self.name, check=False)


async def test_fleet_image_serves_math_and_code_and_scores_their_examples(fleet_image, sandbox_flags):
    container = Container(fleet_image, ["math", "code"], sandbox_flags, ports=2)
    try:
        container.wait_healthy()
        user = _podman("exec", container.name, "id", "-u").stdout.strip()
        assert user == "10001", "the fleet must not run as root inside the container"
        urls = {"math": container.url(8000), "code": container.url(8001)}
        async with EnvClient(urls, retries=1) as client:
            for name in ("math", "code"):
                status, health = await client.get(name, "/health")
                assert status == 200 and health["status"] == "ok", health
                rows = load_examples(registry.get(name).example_path)
                results = await check_http(client, name, rows, stateful=False)
                failed = [f"line {r.line}: {'; '.join(r.problems)}" for r in results if not r.ok]
                assert not failed, f"{name} in the container:\n" + "\n".join(failed)
                rewards = {r.got.get("reward") for r in results if "reward" in r.expected}
                assert {0.0, 1.0} <= rewards, f"{name}: examples must score both right (1) and wrong (0)"
                assert not any(r.got.get("_ng_failure_class") for r in results
                               if "failure_class" not in r.expected), f"{name}: unexpected failure class"
    finally:
        container.remove()


def test_without_the_sandbox_flags_code_says_why_instead_of_serving(fleet_image):
    container = Container(fleet_image, ["code"], [], ports=1)
    try:
        deadline = time.monotonic() + 360  # generous: CI machines are shared
        while container.state() == "running" and time.monotonic() < deadline:
            assert _podman("healthcheck", "run", container.name, check=False,
                           timeout=60).returncode != 0, "healthy without a working sandbox"
            time.sleep(2)
        logs = container.logs()
        assert container.state() != "running", f"still running after 360 s:\n{logs[-3000:]}"
        assert "cannot run sandboxed code" in logs and "bwrap" in logs, logs[-3000:]
    finally:
        container.remove()
