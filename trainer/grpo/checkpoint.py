"""Checkpoints: safetensors weights, optimizer, RNG, and the collector's state (consumed prompt ids,
prompts in flight, data cursor). A checkpoint directory is written under a temporary name and
renamed into place, so a run killed at any moment leaves either the previous or the new one.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch


def save_trainer_state(path: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None,
                       tokenizer: Any | None = None) -> None:
    """Weights, optimizer and RNG; with ``tokenizer``, also config.json, generation_config.json and
    the tokenizer files, so the step folder is a plain Hugging Face checkpoint that
    ``AutoModelForCausalLM``, ``policy.model_name=<dir>`` and ``envs model serve <dir>`` load."""
    from safetensors.torch import save_file

    p = Path(path)
    p.mkdir(parents=True, exist_ok=True)
    # tied embeddings share storage; safetensors refuses shared tensors, so clone each one
    save_file({k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}, str(p / "model.safetensors"),
              metadata={"format": "pt"})
    if tokenizer is not None:
        model.config.save_pretrained(str(p))
        model.generation_config.save_pretrained(str(p))
        tokenizer.save_pretrained(str(p))
    if optimizer is not None:
        torch.save(optimizer.state_dict(), p / "optimizer.pt")
    torch.save({"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()},
               p / "rng.pt")


def load_trainer_state(path: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> None:
    from safetensors.torch import load_file

    p = Path(path)
    model.load_state_dict(load_file(str(p / "model.safetensors")))
    if optimizer is not None and (p / "optimizer.pt").exists():
        optimizer.load_state_dict(torch.load(p / "optimizer.pt", weights_only=False))
    rng = torch.load(p / "rng.pt", weights_only=False)
    torch.set_rng_state(rng["torch"])
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])


def staging_dir(root: str | Path, step: int) -> Path:
    p = Path(root) / f".tmp_step_{step:06d}"
    shutil.rmtree(p, ignore_errors=True)
    p.mkdir(parents=True)
    return p


def finalize(root: str | Path, staging: Path, step: int, state: dict[str, Any], keep: int | None) -> Path:
    """Write ``state.json`` and move the staged directory into place atomically."""
    (staging / "state.json").write_text(json.dumps(state))
    final = Path(root) / f"step_{step:06d}"
    shutil.rmtree(final, ignore_errors=True)
    os.replace(staging, final)
    tmp = Path(root) / "latest.tmp"
    tmp.write_text(final.name)
    os.replace(tmp, Path(root) / "latest")
    if keep:
        for old in sorted(Path(root).glob("step_*"))[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    return final


def latest(root: str | Path) -> tuple[Path, dict[str, Any]] | None:
    pointer = Path(root) / "latest"
    if not pointer.exists():
        return None
    d = Path(root) / pointer.read_text().strip()
    if not (d / "state.json").exists():
        return None
    return d, json.loads((d / "state.json").read_text())
