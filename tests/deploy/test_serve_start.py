"""``envs serve`` while a server cannot become healthy: Ctrl-C / SIGTERM stop it within
seconds with the reason (issue 13: it used to ignore them for up to 180 s). A real
subprocess: swe with no container engine answers /health 503 (not fatal: an engine may
come up later), so the start waits.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from servers import registry
from servers.service import EnvService
from tests.deploy.deployments import REPO

NO_ENGINE = {"DOCKER_HOST": "unix:///nonexistent/verigym-test.sock"}


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_a_start_that_waits_for_health(sig):
    proc = subprocess.Popen([sys.executable, "-m", "servers.cli", "serve", "swe"], cwd=REPO,
                            env={**os.environ, **NO_ENGINE}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    waiting = threading.Event()

    def read() -> None:
        for line in proc.stderr:  # type: ignore[union-attr]
            lines.append(line)
            if "not ready yet" in line:
                waiting.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert waiting.wait(60), "".join(lines)[-3000:]
        sent = time.monotonic()
        proc.send_signal(sig)
        code = proc.wait(20)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(5)
    text = "".join(lines)
    assert code == 128 + sig, text[-3000:]
    assert took < 15, took
    assert f"{signal.Signals(sig).name} received while starting" in text
    assert "swe: waiting for http://" in text and "503" in text  # where it was, with the last answer


async def test_swe_checks_its_backend_answers_without_starting_a_sandbox():
    env = registry.instantiate("swe", overrides={"sandbox_options": {"base_url": NO_ENGINE["DOCKER_HOST"]}})
    service = EnvService(env)
    await service.start()
    try:
        canary = service.info()[1]["sandbox"]["canary"]
        assert canary["ok"] is False and "no sandbox started" in canary["checked"] and canary["error"]
        status, body = await service.health()
        assert status == 503 and "fatal" not in body["checks"]["environment"]  # waits for the engine
    finally:
        await service.stop()


def test_swe_on_apptainer_without_the_binary_stops_at_once_with_the_hint():
    """A missing binary cannot appear while the server waits: /health is fatal, envs serve exits 1
    at once (before, it waited its whole 180 s ready timeout on a 503 that could not change)."""
    result = subprocess.run([sys.executable, "-m", "servers.cli", "serve", "swe", "sandbox_backend=apptainer",
                             "sandbox_options.binary=verigym-no-such-apptainer"], cwd=REPO, capture_output=True,
                            text=True, timeout=150)  # under the 180 s it used to wait
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 1, result.stderr[-2000:]
    assert last.startswith("envs serve: swe: /health 503, cannot work here: ")
    assert "'verigym-no-such-apptainer' is not installed" in last and "sandbox_backend=container" in last
