"""What ``envs model serve PATH_OR_PRESET`` can load, and loading it.

* ``tiny`` — the trainer's tiny preset (:mod:`servers.model.tiny`), seeded, built in memory;
* a Hugging Face checkpoint folder (``config.json`` + weights + tokenizer), which is what
  ``driver run`` writes for every checkpoint step (``<log_dir>/checkpoints/step_000040``);
* a trainer checkpoint root (a folder with a ``latest`` pointer), or that pointer file
  (``<log_dir>/checkpoints/latest``): the step it names;
* a hub id, when the machine can reach the hub (``AutoModelForCausalLM`` resolves it).

torch and transformers come with the ``[train]`` extra; without them this says so instead of
failing on an import deep inside.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TINY = "tiny"
_DTYPES = ("float32", "bfloat16", "float16")


class ModelLoadError(Exception):
    """The model cannot be loaded for a reason the user can fix (printed without a traceback)."""


def require_torch() -> None:
    missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
    if missing:
        raise ModelLoadError(
            f"the local model server needs {' and '.join(missing)}, which come with the [train] extra: "
            "pip install -e '.[train]' (on a CPU-only machine install torch's CPU wheel first, see README)")


def resolve_source(source: str) -> str:
    """``tiny``, a checkpoint folder (a trainer checkpoint root, or its ``latest`` pointer file,
    resolves to the step it names), or a hub id. The one resolver of model paths: ``envs model
    serve``, ``driver rollout --model`` and ``driver run policy.model_name=`` all use it."""
    if source == TINY:
        return TINY
    path = Path(source).expanduser()
    if not path.exists():
        if source.startswith((".", "/", "~")) or source.count("/") > 1:
            raise ModelLoadError(f"{source} does not exist (give 'tiny', a checkpoint folder or a hub id)")
        return source  # a hub id such as Qwen/Qwen3-0.6B
    if path.is_file() and path.name == "latest":  # the trainer's pointer: <checkpoints>/latest holds a step's name
        path = path.parent
    if not path.is_dir():
        raise ModelLoadError(f"{source} is a file; give the checkpoint folder that holds config.json")
    pointer = path / "latest"
    if not (path / "config.json").exists() and pointer.is_file():
        step = pointer.read_text().strip()
        if not (path / step).is_dir():
            raise ModelLoadError(f"{pointer} names {step!r}, which is not in {path} (deleted?); give a step folder, "
                                 f"e.g. {path}/step_NNNNNN")
        path = path / step
    if not (path / "config.json").exists():
        weights = (path / "model.safetensors").exists()
        raise ModelLoadError(
            f"{path} has no config.json" + (
                ": a trainer checkpoint written before checkpoints were Hugging Face folders; resave it, "
                "or rerun the step" if weights else "; give a Hugging Face checkpoint folder or 'tiny'"))
    return str(path)


@dataclass
class LoadedModel:
    model: Any
    tokenizer: Any
    name: str  # the id served on /v1/models
    device: str
    max_context: int  # prompt + new tokens must fit in this

    @property
    def stop_token_ids(self) -> list[int]:
        return model_stop_ids(self.model, self.tokenizer)


def model_stop_ids(model: Any, tokenizer: Any) -> list[int]:
    """The tokens that end a turn: EOS of the tokenizer and the generation config, plus ChatML's
    end-of-turn marker."""
    ids = {tokenizer.eos_token_id}
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids.update(eos if isinstance(eos, list) else [eos])
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if isinstance(im_end, int) and im_end != tokenizer.unk_token_id:
        ids.add(im_end)
    return sorted(i for i in ids if isinstance(i, int))


def pick_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError(f"--device {device}: no CUDA device is visible to torch")
    return device


def load_model(source: str, *, device: str = "auto", dtype: str = "auto", seed: int = 0,
               served_name: str | None = None) -> LoadedModel:
    """Load ``source`` (after :func:`resolve_source`) for generation: eval mode, left padding."""
    require_torch()
    import torch

    if dtype not in ("auto", *_DTYPES):
        raise ModelLoadError(f"--dtype {dtype}: choose auto, {', '.join(_DTYPES)}")
    where = pick_device(device)
    # auto: bfloat16 on a GPU (what checkpoints are trained in), float32 on a CPU (bf16 matmuls are slow there)
    torch_dtype = getattr(torch, dtype if dtype != "auto" else ("bfloat16" if where.startswith("cuda") else "float32"))
    resolved = resolve_source(source)
    if resolved == TINY:
        from servers.model.tiny import TinyModelConfig, build_tiny_model, build_tiny_tokenizer

        tokenizer = build_tiny_tokenizer()
        model = build_tiny_model(tokenizer, TinyModelConfig(), seed)
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        try:
            tokenizer = AutoTokenizer.from_pretrained(resolved)
            model = AutoModelForCausalLM.from_pretrained(resolved, dtype=torch_dtype)
        except OSError as exc:  # missing files, unreachable hub
            raise ModelLoadError(f"cannot load {resolved}: {exc}") from None
        if tokenizer.chat_template is None:
            from servers.model.tiny import CHATML_TOOLS_TEMPLATE

            tokenizer.chat_template = CHATML_TOOLS_TEMPLATE  # ChatML: what base checkpoints are usually tuned on
    tokenizer.padding_side = "left"  # batched generation continues every row from its last prompt token
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = model.to(device=where, dtype=torch_dtype).eval()
    name = served_name or (TINY if resolved == TINY else _default_name(resolved))
    max_context = int(getattr(model.config, "max_position_embeddings", 0) or 4096)
    return LoadedModel(model=model, tokenizer=tokenizer, name=name, device=where, max_context=max_context)


def _default_name(resolved: str) -> str:
    path = Path(resolved)
    if path.is_dir():
        # a trainer step folder: name it after the run (<run>/checkpoints/step_000040 -> <run>/step_000040)
        if path.parent.name == "checkpoints":
            return f"{path.parent.parent.name}/{path.name}"
        return path.name
    return resolved
