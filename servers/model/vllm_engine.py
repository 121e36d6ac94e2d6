"""The vLLM path of ``envs model serve``: where vLLM is installed and a GPU is present, the
model is served by ``vllm serve`` (same OpenAI routes, continuous batching, paged attention)
instead of verigym's own decode engine.

The process is replaced by vLLM's (``exec``), so signals, logs and the exit code are vLLM's own.
The tiny preset has no files; it is exported once to a cache folder as a Hugging Face checkpoint
(config, safetensors, tokenizer, chat template), which vLLM loads like any other.

Not exercised by this repository's tests (no GPU/vLLM on CI); the command line it builds is.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

from servers.model.loading import TINY, resolve_source


def vllm_available() -> bool:
    if importlib.util.find_spec("vllm") is None or importlib.util.find_spec("torch") is None:
        return False
    import torch

    return torch.cuda.is_available()


def export_tiny(folder: Path, seed: int) -> Path:
    """Write the tiny preset (seeded weights) as a Hugging Face folder, once."""
    target = folder / f"tiny-seed{seed}"
    if (target / "config.json").exists():
        return target
    from servers.model.tiny import TinyModelConfig, build_tiny_model, build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(tokenizer, TinyModelConfig(), seed)
    staging = folder / f".tiny-seed{seed}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(str(staging))
    tokenizer.save_pretrained(str(staging))
    os.replace(staging, target)
    return target


def vllm_command(source: str, *, host: str, port: int, served_name: str | None, dtype: str, seed: int,
                 cache_dir: Path, extra: list[str]) -> list[str]:
    resolved = resolve_source(source)
    model_path = str(export_tiny(cache_dir, seed)) if resolved == TINY else resolved
    name = served_name or (TINY if resolved == TINY else None)
    exe = shutil.which("vllm")
    cmd = [exe, "serve", model_path] if exe else [sys.executable, "-m", "vllm.entrypoints.openai.api_server",
                                                  "--model", model_path]
    cmd += ["--host", host, "--port", str(port), "--dtype", dtype]
    if name:
        cmd += ["--served-model-name", name]
    return cmd + extra


def exec_vllm(cmd: list[str]) -> None:
    print("envs model serve: vLLM and a GPU are present; running " + " ".join(cmd), file=sys.stderr, flush=True)
    os.execv(cmd[0], cmd)
