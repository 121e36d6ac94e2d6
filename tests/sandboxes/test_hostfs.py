"""Uploads into a workspace the program has changed: what is the program's doing
(SandboxPathError) and what is the host's (SandboxError), never a raw OSError."""

from __future__ import annotations

import errno
import os

import pytest

from sandboxes import SandboxError, SandboxPathError, SandboxSpec
from sandboxes import hostfs


@pytest.mark.parametrize("setup, path", [
    (lambda root: (root / "check.sh").mkdir(), "check.sh"),                       # a directory where the file goes
    (lambda root: (root / "check.sh").symlink_to(root / "elsewhere"), "check.sh"),  # a symlink (never followed)
    (lambda root: (root / "sub").write_text("x"), "sub/check.sh"),                 # a file where a directory goes
])
def test_blocked_paths_are_path_errors(tmp_path, setup, path):
    setup(tmp_path)
    with pytest.raises(SandboxPathError, match="cannot upload"):
        hostfs.write_files(tmp_path, {path: "exit 0\n"}, None, "/workspace")
    assert not (tmp_path / "elsewhere").exists()


def test_escaping_symlink_is_a_path_error(tmp_path):
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "out").symlink_to(tmp_path)
    with pytest.raises(SandboxPathError, match="escapes"):
        hostfs.write_files(tmp_path / "work", {"out/x": "1"}, None, "/workspace")


def test_other_os_errors_are_infrastructure(tmp_path, monkeypatch):
    def broken_open(*_args, **_kwargs):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(hostfs.os, "open", broken_open)
    with pytest.raises(SandboxError) as caught:
        hostfs.write_files(tmp_path, {"a.txt": "1"}, None, "/workspace")
    assert not isinstance(caught.value, SandboxPathError) and "Input/output error" in str(caught.value)


async def test_upload_over_what_the_program_made(sandbox):
    res = await sandbox.exec("mkdir -p check.sh/inner && ln -s /etc/passwd link && echo x > plain")
    assert res.ok, res.text("stderr")
    for path in ("check.sh", "link", "plain/under"):
        with pytest.raises(SandboxPathError):
            await sandbox.upload({path: "exit 0\n"})
    await sandbox.upload({"fine/new.txt": "ok"})  # everything else still works
    assert await sandbox.download("fine/new.txt") == b"ok"
    assert os.path.isdir(sandbox.host_workdir / "check.sh")


async def test_upload_over_a_fifo_or_socket_does_not_block(sandbox):
    res = await sandbox.exec("mkfifo pipe && python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('sock')\"")
    assert res.ok, res.text("stderr")
    for path in ("pipe", "sock"):  # opening a FIFO without a reader for writing used to block forever
        with pytest.raises(SandboxPathError):
            await sandbox.upload({path: "exit 0\n"})


async def test_create_with_colliding_spec_files(process_backend):
    with pytest.raises(SandboxPathError):
        await process_backend.create(SandboxSpec(files={"a": "1", "a/b": "2"}))


def test_wipe_removes_what_the_program_made_unreadable(tmp_path):
    """A program may chmod its folders to 000 and the workspace to read-only; the reset still
    empties it (as root modes do not matter; unprivileged the wipe gives itself the bits back)."""
    work = tmp_path / "work"
    (work / "d" / "e").mkdir(parents=True)
    (work / "d" / "e" / "f").write_text("x")
    (work / "top").write_text("y")
    os.chmod(work / "d" / "e", 0)
    os.chmod(work / "d", 0)
    os.chmod(work, 0o500)
    hostfs.wipe_dir(work)
    assert list(work.iterdir()) == []
