"""One limit policy for every backend (sandboxes/ceiling.py): never above the inherited hard
limits, per-run limits clamped, an unusable limit named at start.

Repro of issue 13: under ``prlimit --nproc=1024`` every zygote run failed with "prlimit:
failed to set the NPROC resource limit: Operation not permitted" (the zygote asked for
4,096 processes, above the inherited hard limit, without the capability to raise it).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys

import pytest

from sandboxes import Limits
from sandboxes.ceiling import LAUNCHER_PROCS, MIB, Ceiling
from tests.deploy.deployments import REPO

SCRIPT = """
import asyncio, json
from sandboxes import Limits, SandboxSpec, open_backend

async def main():
    backend = open_backend("process")
    big = Limits(max_processes=5000, max_open_files=5000)
    async with await backend.create(SandboxSpec()) as sb:
        zyg = await sb.exec_python(code="import resource; print(resource.getrlimit(resource.RLIMIT_NPROC)[1], "
                                        "resource.getrlimit(resource.RLIMIT_NOFILE)[1])", limits=big)
        ex = await sb.exec(["/bin/sh", "-c", "ulimit -Hn"], limits=big)
        proc = await sb.start_process(["/bin/sh", "-c", "ulimit -Hn; echo END"], limits=big)
        started = await proc.read_until(b"END", timeout=30)
        await proc.kill()
    await backend.close()
    print(json.dumps({"zygote": [zyg.verdict.value, zyg.exit_code, zyg.text(), zyg.text("stderr")],
                      "exec": [ex.verdict.value, ex.exit_code, ex.text(), ex.text("stderr")],
                      "process": started.data.decode()}))

asyncio.run(main())
"""


def test_clamp_lowers_every_field_to_the_inherited_hard_limits():
    ceiling = Ceiling({"nproc": 100, "nofile": 200, "as": 512 * MIB, "cpu": 5, "fsize": 8 * MIB}, "test")
    asked = Limits(cpu_s=10, memory_mb=1024, max_processes=500, max_file_mb=64, max_open_files=1000)
    got = ceiling.clamp(asked)
    assert (got.cpu_s, got.memory_mb, got.max_processes, got.max_file_mb, got.max_open_files) == (4, 512, 98, 8, 200)
    rl = ceiling.rlimits(asked)
    for name, (soft, hard) in rl.items():
        assert soft <= hard <= ceiling.of(name), (name, soft, hard)
    assert rl["cpu"] == (4, 5) and rl["nproc"] == (100, 100)
    assert set(ceiling.clamped(asked)) == {"cpu_s", "memory_mb", "max_processes", "max_file_mb", "max_open_files"}


def test_limits_under_the_ceiling_are_unchanged():
    small = Limits(cpu_s=2, memory_mb=256, max_processes=8, max_file_mb=1, max_open_files=64)
    roomy = Ceiling({"nproc": 4096, "nofile": 4096, "as": None, "cpu": 3600, "fsize": 1 << 40}, "t")
    assert roomy.clamp(small) == small and roomy.shortfalls() == []
    assert Ceiling().clamp(Limits()) == Limits() and Ceiling().clamped(Limits()) == {}
    assert Ceiling({"nproc": 8 + LAUNCHER_PROCS}, "t").rlimits(small)["nproc"] == (10, 10)


def test_a_container_ceiling_is_the_lower_of_both():
    base = Ceiling({"nproc": 512, "nofile": None}, "server")
    lowered = base.lowered("container ulimits", nproc=1024, nofile=256)
    assert (lowered.of("nproc"), lowered.of("nofile"), lowered.source) == (512, 256, "container ulimits")


@pytest.mark.parametrize(("hard", "needle"), [({"nproc": 3}, "RLIMIT_NPROC"), ({"nofile": 16}, "RLIMIT_NOFILE"),
                                             ({"as": 64 * MIB}, "RLIMIT_AS"), ({"cpu": 1}, "RLIMIT_CPU")])
def test_shortfalls_name_the_limit_its_value_and_how_to_raise_it(hard, needle):
    (reason,) = Ceiling(hard, "inherited by the server process").shortfalls()
    assert needle in reason and "raise it" in reason


@pytest.mark.parametrize("nproc", [1024, 512])
def test_sandbox_runs_under_an_inherited_process_limit(nproc):
    """The issue's repro: the zygote, an exec and a long-lived process all run, and none of
    them has a hard limit above the inherited one (5,000 asked, clamped)."""
    hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    if os.geteuid() != 0 and hard != resource.RLIM_INFINITY and hard < nproc:
        pytest.skip(f"this suite already runs under a hard RLIMIT_NPROC of {hard}, which a user cannot raise to {nproc}")
    result = subprocess.run(["prlimit", f"--nproc={nproc}", "--nofile=1024", sys.executable, "-c", SCRIPT],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    verdict, code, text, err = out["zygote"]
    assert (verdict, code) == ("ok", 0), err
    assert text.split() == [str(nproc), "1024"]
    assert out["exec"][:3] == ["ok", 0, "1024\n"], out["exec"]
    assert out["process"].startswith("1024"), out["process"]


def _serve(*args: str, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    return subprocess.run([*prefix, sys.executable, "-m", "servers.cli", "serve", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def test_envs_serve_stops_at_once_when_the_inherited_process_limit_is_unusable():
    result = _serve("code", prefix=("prlimit", "--nproc=3"))
    assert result.returncode == 1
    assert "cannot work here" in result.stderr and "RLIMIT_NPROC" in result.stderr and "is 3" in result.stderr


def test_envs_serve_stops_at_once_when_the_canary_fails():
    result = _serve("code", "python=/nonexistent/python3")
    assert result.returncode == 1
    assert "start-up canary failed" in result.stderr and "/nonexistent/python3" in result.stderr
