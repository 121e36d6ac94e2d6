"""Weight transport from the trainer to the generators, behind one interface.

* ``shm``: one machine. The trainer writes a safetensors file into ``/dev/shm`` (atomic
  rename); generators memory-map it. No copy through a socket, no pickling. The folder is named
  ``verigym-weights-<driver pid>-<run id>``: a run killed with SIGKILL cannot remove it, so each new
  transport removes the folders whose owner pid is no longer alive (:func:`remove_stale_weight_dirs`).
* ``ray``: across machines. The state dict goes into the Ray object store; the handle is the
  ObjectRef (wrapped in a list so Ray passes the reference, not the value).

Both are CPU-friendly (no NCCL, trainer-peers.md §7) and every fetch is bounded by a timeout,
so a failed sync raises instead of hanging (peers §6.1).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Protocol

import torch


class WeightTransport(Protocol):
    def publish(self, version: int, state: dict[str, torch.Tensor]) -> Any: ...
    def fetch(self, handle: Any, timeout_s: float) -> dict[str, torch.Tensor]: ...
    def close(self) -> None: ...


SHM_PREFIX = "verigym-weights-"


def shm_base() -> Path:
    return Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by someone else
        return True
    return True


def remove_stale_weight_dirs(base: Path | None = None) -> list[Path]:
    """Remove ``verigym-weights-<pid>-<id>`` folders whose owner pid is dead (a run killed with
    SIGKILL, or a crashed one). Folders of live runs, and names without a pid, are left alone."""
    removed = []
    for d in (base or shm_base()).glob(SHM_PREFIX + "*"):
        pid = d.name[len(SHM_PREFIX):].split("-", 1)[0]
        if d.is_dir() and pid.isdigit() and "-" in d.name[len(SHM_PREFIX):] and not _pid_alive(int(pid)):
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


class SharedMemoryTransport:
    """Built in the driver (its pid names the folder), then pickled into the trainer and generators."""

    def __init__(self, run_id: str, keep: int = 3, base: Path | None = None):
        base = base or shm_base()
        self.removed_stale = remove_stale_weight_dirs(base)
        self.dir = base / f"{SHM_PREFIX}{os.getpid()}-{run_id}"
        self.keep = keep

    def publish(self, version: int, state: dict[str, torch.Tensor]) -> str:
        from safetensors.torch import save_file

        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / f"v{version:06d}.safetensors"
        tmp = path.with_suffix(".tmp")
        save_file({k: v.detach().clone().contiguous().cpu() for k, v in state.items()}, str(tmp))  # clone: tied weights share storage
        os.replace(tmp, path)
        for old in sorted(self.dir.glob("v*.safetensors"))[:-self.keep]:
            old.unlink(missing_ok=True)
        return str(path)

    def fetch(self, handle: str, timeout_s: float) -> dict[str, torch.Tensor]:
        from safetensors.torch import load_file

        if not Path(handle).exists():
            raise TimeoutError(f"weights {handle} are gone (superseded or the run was cleaned up)")
        return load_file(handle)

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


class ObjectStoreTransport:
    def publish(self, version: int, state: dict[str, torch.Tensor]) -> list[Any]:
        import ray

        return [ray.put({k: v.detach().cpu() for k, v in state.items()})]

    def fetch(self, handle: list[Any], timeout_s: float) -> dict[str, torch.Tensor]:
        import ray

        return ray.get(handle[0], timeout=timeout_s)

    def close(self) -> None:
        pass


def make_transport(kind: str, run_id: str, on_cluster: bool) -> WeightTransport:
    if kind == "auto":
        kind = "ray" if on_cluster else "shm"
    return ObjectStoreTransport() if kind == "ray" else SharedMemoryTransport(run_id)
