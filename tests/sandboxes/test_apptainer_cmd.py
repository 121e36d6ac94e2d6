"""Apptainer backend: the exact command line it runs (no apptainer binary on this host)."""

from __future__ import annotations

import shutil

import pytest

from sandboxes import Limits, SandboxError, SandboxSpec, open_backend
from sandboxes.apptainer import apptainer_argv


def test_command_line_isolation_flags_and_limits():
    argv = apptainer_argv("apptainer", "/images/x.sif", "/host/w", "/workspace", ["python3", "a.py"],
                          Limits(cpu_s=2.5, memory_mb=256, max_processes=10, max_file_mb=2, max_open_files=32),
                          {"B": "2", "A": "1"})
    img = argv.index("/images/x.sif")
    head, tail = argv[:img], argv[img + 1:]
    assert head[:2] == ["apptainer", "exec"]
    for flag in ("--containall", "--cleanenv", "--no-home", "--pid", "--ipc"):
        assert flag in head
    assert head[head.index("--net"):head.index("--net") + 3] == ["--net", "--network", "none"]
    assert head[head.index("--pwd") + 1] == "/workspace"
    assert "/host/w:/workspace:rw" in head
    assert [head[i + 1] for i, a in enumerate(head) if a == "--env"] == ["A=1", "B=2"]
    assert tail[0] == "prlimit"
    assert "--cpu=3:4" in tail and f"--as={256 << 20}:{256 << 20}" in tail
    assert "--nproc=12:12" in tail and f"--fsize={2 << 20}:{2 << 20}" in tail and "--nofile=32:32" in tail
    assert tail[-2:] == ["python3", "a.py"] and tail[tail.index("--") + 1] == "python3"
    assert "setpriv" not in tail  # apptainer already runs as the calling user


def test_network_flag_only_when_spec_allows():
    argv = apptainer_argv("apptainer", "i.sif", "/h", "/w", ["true"], Limits(), {}, network=True)
    assert "--network" not in argv


async def test_sandbox_command_uses_spec_env_workdir_and_shell(tmp_path):
    backend = open_backend("apptainer", root_dir=str(tmp_path), image="/img.sif")
    sb = backend.sandbox_for(SandboxSpec(env={"SECRET_FREE": "1"}, files={"a.py": "print(1)"}))
    argv = sb.command("echo hi")
    assert argv[-3:] == ["/bin/sh", "-c", "echo hi"]
    assert "SECRET_FREE=1" in argv and "HOME=/workspace" in argv and "OPENBLAS_NUM_THREADS=1" in argv
    assert f"{sb.host_workdir}:/workspace:rw" in argv
    assert (sb.host_workdir / "a.py").read_text() == "print(1)"
    await sb.upload({"b.txt": "x"})
    assert await sb.download("b.txt") == b"x"
    await sb.reset()
    assert sorted(p.name for p in sb.host_workdir.iterdir()) == ["a.py"]
    await sb.destroy()
    assert not sb.host_workdir.exists()


@pytest.mark.skipif(shutil.which("apptainer") is not None, reason="apptainer present: health is real")
async def test_health_reports_missing_binary_and_create_refuses(tmp_path):
    backend = open_backend("apptainer", root_dir=str(tmp_path), image="/img.sif")
    h = await backend.health()
    assert h["ok"] is False and "not installed" in h["error"]
    with pytest.raises(SandboxError, match="not found"):
        await backend.create(SandboxSpec())
