"""Shared-memory weight folders: named by the driver pid, folders of dead runs removed by the next run."""
import os
import subprocess
import sys
from pathlib import Path

from trainer.grpo.weight_sync import SHM_PREFIX, SharedMemoryTransport, remove_stale_weight_dirs


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_weight_folders_are_named_by_pid_and_dead_owners_are_cleaned(tmp_path):
    dead = tmp_path / f"{SHM_PREFIX}{_dead_pid()}-aaaa"
    live = tmp_path / f"{SHM_PREFIX}{os.getppid()}-bbbb"   # our parent is alive
    legacy = tmp_path / f"{SHM_PREFIX}cccc"                 # no pid in the name: not ours to judge
    for d in (dead, live, legacy):
        d.mkdir()
        (d / "v000001.safetensors").write_bytes(b"x")
    t = SharedMemoryTransport("dddd", base=tmp_path)
    assert t.removed_stale == [dead] and not dead.exists() and live.exists() and legacy.exists()
    assert t.dir.name == f"{SHM_PREFIX}{os.getpid()}-dddd"
    import torch

    handle = t.publish(1, {"w": torch.ones(2)})
    assert Path(handle).parent == t.dir and remove_stale_weight_dirs(tmp_path) == []  # we are alive
    t.close()
    assert not t.dir.exists()

