"""The process sandbox finds the interpreter wherever it lives (sandboxes/interpreter.py).

Repro of issue 13: with the server's venv under /tmp, every run failed with "setpriv:
failed to execute /tmp/x/venv/bin/python3: No such file or directory": the sandbox's
private /tmp was mounted over the venv's bind.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sandboxes import SandboxError, SandboxSpec, open_backend
from sandboxes.bwrap import BwrapLayout
from sandboxes.interpreter import PythonInstall
from servers import registry
from servers.service import EnvService


@pytest.fixture(scope="module")
def tmp_venv(tmp_path_factory) -> Path:
    """A venv under /tmp reached through a symlinked folder (/tmp/.../link -> real)."""
    root = tmp_path_factory.mktemp("interp")
    assert str(root).startswith("/tmp/")
    real = root / "real"
    real.mkdir()
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(real / "venv")],
                   check=True, timeout=120)
    (root / "link").symlink_to(real)
    # A module only this venv has: runs must see the venv's own packages, not just the base's.
    site = real / "venv" / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    (site / "verigym_venv_only.py").write_text("WHERE = 'venv'\n")
    return root / "link" / "venv"


def test_install_paths_are_resolved_and_system_folders_left_out(tmp_venv):
    py = PythonInstall.of(str(tmp_venv / "bin" / "python3"), [str(tmp_venv), "/usr", sys.base_prefix],
                          ["/usr/lib/x86_64-linux-gnu", str(tmp_venv / "lib")])
    real_venv = os.path.realpath(tmp_venv)
    # The executable keeps its own name (a venv's python3 must be started by that path).
    assert py.executable == f"{real_venv}/bin/python3"
    assert real_venv in py.roots and "/usr" not in py.roots
    assert not any(r.startswith("/usr/") for r in py.roots)
    assert py.lib_dirs == ()  # the venv's lib is inside a root already


def test_an_install_the_sandbox_would_hide_is_refused_with_the_fix():
    py = PythonInstall.of("/workspace/venv/bin/python3", ["/workspace/venv"])
    with pytest.raises(SandboxError, match=r"python=PATH"):
        BwrapLayout(bwrap="bwrap", host_workdir=Path("/nonexistent"), workdir="/workspace", etc_dir=Path("/x"),
                    python=py, uid=None)


async def test_a_venv_under_tmp_runs_in_the_sandbox_and_survives_the_scrub(tmp_venv):
    backend = open_backend("process", python=str(tmp_venv / "bin" / "python3"))
    try:
        async with await backend.create(SandboxSpec()) as sb:
            for _ in range(3):  # after each zygote run the scrub cleans /tmp: the venv's bind stays
                r = await sb.exec_python(code="import sys, verigym_venv_only; print(sys.prefix)")
                assert r.ok, r.text("stderr")
                assert r.text().strip() == os.path.realpath(tmp_venv)
            r = await sb.exec([sb.python, "-I", "-c", "import sys, verigym_venv_only; print(sys.prefix)"])
            assert r.ok and r.text().strip() == os.path.realpath(tmp_venv), r.text("stderr")
        assert (tmp_venv / "pyvenv.cfg").is_file()  # the host's venv untouched
        info = await backend.describe()
        assert info["interpreter"]["executable"] == os.path.realpath(tmp_venv) + "/bin/python3"
    finally:
        await backend.close()


async def test_the_code_environment_reports_the_configured_interpreter(tmp_venv):
    env = registry.instantiate("code", overrides={"sandbox_options": {"python": str(tmp_venv / "bin" / "python3")}})
    service = EnvService(env)
    await service.start()
    try:
        status, info = service.info()
        sandbox = info["sandbox"]
        assert sandbox["canary"]["ok"], sandbox
        assert sandbox["interpreter"]["executable"].startswith(os.path.realpath(tmp_venv))
        assert (await service.health())[0] == 200
    finally:
        await service.stop()
