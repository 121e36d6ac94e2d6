"""A container's workspace as a tar archive, and back: how a check moves a session's workspace into a
fresh container (``ContainerSandbox.archive_workspace`` / ``extract_workspace``)."""

from __future__ import annotations

import io
from typing import Any

from .base import SandboxError, SandboxPathError


def archive_dir(container: Any, path: str, max_bytes: int) -> bytes:
    """The contents of ``path`` (symlinks as links); SandboxPathError past ``max_bytes``."""
    try:
        stream, _ = container.get_archive(path.rstrip("/") + "/.")
        buf = io.BytesIO()
        for chunk in stream:
            buf.write(chunk)
            if buf.tell() > max_bytes:
                raise SandboxPathError(f"the workspace holds more than {max_bytes} bytes")
    except SandboxError:
        raise
    except Exception as exc:
        raise SandboxError(f"cannot archive the workspace: {exc}") from exc
    return buf.getvalue()


def replace_dir(api: Any, container: Any, user: str, path: str, archive: bytes) -> None:
    """Empty ``path`` in ``container``, then unpack ``archive`` there."""
    try:
        kid = api.exec_create(container.id, ["find", path, "-mindepth", "1", "-delete"], user=user)
        api.exec_start(kid)
        if not container.put_archive(path, archive):
            raise SandboxError("put_archive of the workspace failed")
    except SandboxError:
        raise
    except Exception as exc:
        raise SandboxError(f"cannot extract the workspace: {exc}") from exc
