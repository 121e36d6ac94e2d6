"""Isolated execution behind one async interface (see :mod:`sandboxes.base`).

    backend = sandboxes.open_backend("process")          # bubblewrap, no daemon
    async with await backend.create(SandboxSpec(files={"a.py": "print(1)"})) as sb:
        result = await sb.exec(["python3", "a.py"])
        result = await sb.exec_python(path="a.py")          # process backend: a zygote fork
        kernel = await sb.start_process(["python3", "-i"])  # long-lived, over stdin/stdout

Backends: ``process`` (bubblewrap), ``container`` (Docker Engine API: Docker or Podman),
``apptainer``. Backends are imported lazily so a host without the docker SDK can still use
the process backend.
"""

from __future__ import annotations

from typing import Any

from .base import (ExecResult, Limits, LostOutputError, ReadResult, ResourceVerdict, Sandbox, SandboxBackend,
                   SandboxError, SandboxPathError, SandboxProcess, SandboxSpec)

BACKENDS = ("process", "container", "apptainer")


def open_backend(name: str, **options: Any) -> SandboxBackend:
    """Instantiate a backend by name; ``options`` go to its constructor."""
    if name == "process":
        from .process import ProcessBackend
        return ProcessBackend(**options)
    if name == "container":
        from .container import ContainerBackend
        return ContainerBackend(**options)
    if name == "apptainer":
        from .apptainer import ApptainerBackend
        return ApptainerBackend(**options)
    raise ValueError(f"unknown sandbox backend {name!r}; choose one of {', '.join(BACKENDS)}")


__all__ = ["BACKENDS", "ExecResult", "Limits", "ReadResult", "ResourceVerdict", "Sandbox", "SandboxBackend",
           "SandboxError", "SandboxPathError", "LostOutputError", "SandboxProcess", "SandboxSpec", "open_backend"]
