"""deploy/: the fleet HEALTHCHECK against real servers, and the derived seccomp profile.

The image itself is built and run in tests/test_fleet_image.py (root + Podman); these run
anywhere.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from servers import registry
from servers.app import start_server

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "deploy"))
from seccomp_profile import BWRAP_SYSCALLS, sandbox_profile  # noqa: E402


async def _healthcheck(ready_file: Path) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(ROOT / "deploy/healthcheck.py"), env={"VERIGYM_READY_FILE": str(ready_file)},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await process.communicate()
    return process.returncode, out.decode()


async def test_healthcheck_is_healthy_only_when_every_served_env_answers_200(tmp_path):
    ready = tmp_path / "ready.json"
    code, out = await _healthcheck(ready)
    assert code == 1 and "not ready" in out  # still starting: no ready file yet
    servers = [await start_server(registry.instantiate(name)) for name in ("mcqa", "structured_outputs")]
    try:
        # envs serve writes the URLs as bound; 0.0.0.0 is asked on loopback
        urls = {"mcqa": servers[0].url.replace("127.0.0.1", "0.0.0.0"), "structured_outputs": servers[1].url}
        ready.write_text(json.dumps({"urls": urls}))
        code, out = await _healthcheck(ready)
        assert code == 0 and "healthy: mcqa, structured_outputs" in out, out
        servers[1].server.service.draining = True  # a draining server answers 503
        code, out = await _healthcheck(ready)
        assert code == 1 and "unhealthy: structured_outputs" in out and "503" in out, out
    finally:
        for server in servers:
            await server.stop(drain_timeout=1)
    code, out = await _healthcheck(ready)
    assert code == 1 and "unhealthy: mcqa" in out  # servers gone


def test_seccomp_profile_allows_exactly_bubblewraps_calls_and_keeps_the_rest():
    default = {"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [
        {"names": ["read", "write", "mount"], "action": "SCMP_ACT_ALLOW"},
        {"names": ["sethostname", "setns"], "action": "SCMP_ACT_ALLOW", "includes": {"caps": ["CAP_SYS_ADMIN"]}},
        {"names": ["sethostname", "setns"], "action": "SCMP_ACT_ERRNO", "excludes": {"caps": ["CAP_SYS_ADMIN"]}},
        {"names": ["kexec_load"], "action": "SCMP_ACT_ERRNO"},
    ]}
    profile = sandbox_profile(default)
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO"
    rules = profile["syscalls"]
    assert {"names": ["read", "write"], "action": "SCMP_ACT_ALLOW"} in rules
    assert {"names": ["kexec_load"], "action": "SCMP_ACT_ERRNO"} in rules
    assert not any(set(r["names"]) & set(BWRAP_SYSCALLS) for r in rules[:-1])  # no conditional rule left
    assert rules[-1]["action"] == "SCMP_ACT_ALLOW" and set(rules[-1]["names"]) == set(BWRAP_SYSCALLS)
    missing = subprocess.run([sys.executable, str(ROOT / "deploy/seccomp_profile.py"), "--input", "/nonexistent"],
                             capture_output=True, text=True)
    assert missing.returncode == 2 and "--input" in missing.stderr
