"""Decode throughput of the one decode engine (servers/model/engine.py), against the memory-bandwidth
limit of the shape, transformers' own ``generate`` on the same prompts, and the train step's
throughput and model-FLOP utilisation on the same sequences. One JSON object.

A random-init model of a named geometry (``tiny``: the trainer's preset; ``qwen2.5-0.5b`` /
``qwen2.5-1.5b``: those checkpoints' shapes, no download), ``--prompts`` random prompts of
``--prompt-tokens`` tokens, each sampled ``--generations`` times (a GRPO group: rows = prompts x
generations), ``--new-tokens`` tokens per row (end tokens ignored, temperature 1, top_p 1).

* ``engine``: ``DecodeEngine.run`` in process; ``server``: the same batch as HTTP requests to
  ``envs model serve`` (one request per prompt with ``n`` = generations), the trainer's path; each
  is run once to warm up (compilation, CUDA graph capture) and then timed; with ``--compile`` both
  decode through ``torch.compile``d steps and ``engine_uncompiled`` is the same engine without, run
  first in the same process (``compile_speedup`` = the ratio);
* ``bandwidth_limit_tokens_s``: rows / (bytes a decode step must read: every weight once + the mean
  KV cache of the rows / the device's memory bandwidth); ``fraction_of_limit`` = tokens/s / that;
* ``generate``: ``model.generate`` (sampling, same shape), the baseline;
* ``train_step``: forward + backward + AdamW step over the rows' full sequences (prompt + new
  tokens) with a per-token policy-gradient loss — the cost of the GRPO update on these samples
  without its bookkeeping; ``mfu`` = (6 x matmul parameters + 12 x layers x hidden x sequence) FLOPs
  per token x tokens/s / the device's dense bf16 peak (no peak is known for a CPU: null).

Defaults are a small CPU shape; on a GPU run e.g.
``python benchmarks/gpu_decode.py --geometry qwen2.5-0.5b --prompts 16 --generations 8
--prompt-tokens 96 --new-tokens 256 --device cuda``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

GEOMETRIES = {  # Qwen2.5's published configs (hidden, layers, heads, kv heads, mlp, vocab; tied embeddings)
    "qwen2.5-0.5b": dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                         intermediate_size=4864, vocab_size=151936),
    "qwen2.5-1.5b": dict(hidden_size=1536, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                         intermediate_size=8960, vocab_size=151936),
}
# Datasheet figures: HBM bandwidth (bytes/s) and dense bf16 peak (FLOP/s), matched on the device name.
DEVICES = [("H200", 4.8e12, 989e12), ("H100 PCIe", 2.0e12, 756e12), ("H100", 3.35e12, 989e12),
           ("A100-SXM4-80GB", 2.039e12, 312e12), ("A100", 1.555e12, 312e12), ("L40S", 0.864e12, 362e12)]


def build(geometry: str, dtype: torch.dtype, device: str) -> tuple[Any, Any]:
    from servers.model.tiny import TinyModelConfig, build_tiny_model, build_tiny_tokenizer

    if geometry == "tiny":
        tok = build_tiny_tokenizer()
        return build_tiny_model(tok, TinyModelConfig(), 0).to(device=device, dtype=dtype).eval(), tok
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    g = GEOMETRIES[geometry]
    core = Tokenizer(models.WordLevel({f"t{i}": i for i in range(g["vocab_size"])}, unk_token="t0"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="t1", pad_token="t0")
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM(Qwen2Config(**g, tie_word_embeddings=True, max_position_embeddings=32768,
                                             eos_token_id=1, pad_token_id=0, torch_dtype=dtype))
    return model.to(dtype=dtype).eval(), tok


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def device_figures(device: str) -> tuple[float, str, float | None]:
    """(memory bandwidth B/s, where it came from, dense bf16 peak FLOP/s or None)."""
    if device.startswith("cuda"):
        name = torch.cuda.get_device_name(device)
        for key, bandwidth, peak in DEVICES:
            if key in name:
                return bandwidth, f"datasheet ({name})", peak
    n = 64 * 1024 * 1024  # unknown device (a CPU): measure a large copy (read + write)
    src = torch.ones(n, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    sync(device)
    t = time.perf_counter()
    for _ in range(5):
        dst.copy_(src)
    sync(device)
    return 5 * 2 * n * 4 / (time.perf_counter() - t), "measured (tensor copy)", None


def bandwidth_limit(model: Any, rows: int, prompt: int, new: int, bandwidth: float) -> dict[str, float]:
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    cfg = model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    kv_per_token = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * head_dim * next(model.parameters()).element_size()
    mean_context = prompt + new / 2
    step_bytes = weight_bytes + rows * mean_context * kv_per_token
    return {"weight_bytes": weight_bytes, "kv_bytes_per_step_mean": rows * mean_context * kv_per_token,
            "bandwidth_limit_tokens_s": rows * bandwidth / step_bytes}


def run_engine(model: Any, tok: Any, prompts: list[list[int]], k: int, new: int, eager: bool, device: str,
               compile: bool = False) -> dict:
    from servers.model.engine import DecodeEngine, EngineRequest
    from servers.model.sampling import SamplingParams

    engine = DecodeEngine(model, tok, graphs=not eager, compile=compile)
    requests = [EngineRequest(p, SamplingParams(max_new_tokens=new, temperature=1.0, seed=i * k + j, ignore_eos=True))
                for i, p in enumerate(prompts) for j in range(k)]
    t = time.perf_counter()
    engine.run(requests)  # warm-up: compilation, graph capture, allocations
    sync(device)
    cold = time.perf_counter() - t
    engine.stats.update(prefill_s=0.0, decode_s=0.0, host_syncs=0, decode_steps=0)
    t = time.perf_counter()
    outs = engine.run(requests)
    sync(device)
    wall = time.perf_counter() - t
    tokens = sum(len(o.token_ids) for o in outs)
    result = {"tokens_s": tokens / wall, "first_batch_tokens_s": tokens / cold, "first_batch_s": cold, "tokens": tokens,
              "seconds": wall, "prefill_s": engine.stats["prefill_s"], "host_syncs": engine.stats["host_syncs"],
              "decode_steps": engine.stats["decode_steps"], "decode": engine.kind}
    del engine  # its KV cache and captured graphs, before the next engine allocates its own
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return result


def run_server(model: Any, tok: Any, prompts: list[list[int]], k: int, new: int, eager: bool, device: str,
               geometry: str, threads: int, compile: bool = False) -> dict:
    from servers.model.rl_client import GenerationClient

    with tempfile.TemporaryDirectory() as tmp:
        source = "tiny"
        if geometry != "tiny":
            source = str(Path(tmp) / "model")
            model.save_pretrained(source)
            tok.save_pretrained(source)
        ready = Path(tmp) / "ready.json"
        cmd = [sys.executable, "-m", "servers.cli", "model", "serve", source, "--port", "0", "--device", device,
               "--dtype", str(next(model.parameters()).dtype).split(".")[-1], "--max-batch-size",
               str(len(prompts) * k), "--max-wait-ms", "200", "--ready-file", str(ready), "--engine", "verigym",
               "--cpu-threads", str(threads)]
        log = open(Path(tmp) / "server.log", "wb")
        proc = subprocess.Popen(cmd + (["--enforce-eager"] if eager else []) + (["--compile"] if compile else []),
                                cwd=REPO, stderr=log,
                                env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])})
        try:
            deadline = time.monotonic() + 600
            while not ready.exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    tail = (Path(tmp) / "server.log").read_text(errors="replace")[-2000:]
                    raise SystemExit(f"envs model serve did not start; its log ends:\n{tail}")
                time.sleep(0.2)
            url = json.loads(ready.read_text())["url"]

            async def batch() -> int:
                async with GenerationClient(url, timeout_s=3600) as c:
                    outs = await asyncio.gather(*(c.complete(p, max_tokens=new, temperature=1.0, n=k, seed=i,
                                                             ignore_eos=True) for i, p in enumerate(prompts)))
                return sum(len(o.token_ids) for choices in outs for o in choices)

            t = time.perf_counter()
            asyncio.run(batch())
            cold = time.perf_counter() - t
            t = time.perf_counter()
            tokens = asyncio.run(batch())
            wall = time.perf_counter() - t
        finally:
            proc.terminate()
            proc.wait(timeout=60)
            log.close()
    return {"tokens_s": tokens / wall, "first_batch_tokens_s": tokens / cold, "tokens": tokens, "seconds": wall}


def run_generate(model: Any, tok: Any, prompts: list[list[int]], k: int, new: int, device: str) -> dict:
    ids = torch.tensor([p for p in prompts for _ in range(k)], device=device)
    kw = dict(attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new, do_sample=True,
              top_p=1.0, top_k=0, temperature=1.0, pad_token_id=tok.pad_token_id)
    with torch.no_grad():
        model.generate(ids, **{**kw, "max_new_tokens": 4, "min_new_tokens": 4})  # warm-up
        sync(device)
        t = time.perf_counter()
        out = model.generate(ids, **kw)
        sync(device)
    wall = time.perf_counter() - t
    tokens = (out.shape[1] - ids.shape[1]) * ids.shape[0]
    return {"tokens_s": tokens / wall, "tokens": tokens, "seconds": wall}


def run_train_step(model: Any, rows: int, seq: int, device: str, peak: float | None) -> dict:
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
    ids = torch.randint(1, model.config.vocab_size, (rows, seq), device=device)
    advantages = torch.randn(rows, 1, device=device)

    def step() -> None:  # micro-batches of 8 rows (full-vocabulary logits of 128 rows do not fit), one optimizer step
        for i in range(0, rows, 8):
            mb = ids[i:i + 8]
            logits = model(input_ids=mb).logits[:, :-1].float()
            logp = torch.log_softmax(logits, -1).gather(2, mb[:, 1:].unsqueeze(2)).squeeze(2)
            (-(logp * advantages[i:i + 8]).sum() / (rows * (seq - 1))).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()  # warm-up: optimizer state, allocator
    sync(device)
    t = time.perf_counter()
    step()
    sync(device)
    wall = time.perf_counter() - t
    model.eval()
    cfg = model.config
    matmul_params = sum(p.numel() for p in model.parameters()) - (
        0 if cfg.tie_word_embeddings else model.get_input_embeddings().weight.numel())
    flops_per_token = 6 * matmul_params + 12 * cfg.num_hidden_layers * cfg.hidden_size * seq
    tokens_s = rows * seq / wall
    return {"tokens_s": tokens_s, "seconds": wall, "flops_per_token": flops_per_token,
            "mfu": tokens_s * flops_per_token / peak if peak else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--geometry", choices=("tiny", *GEOMETRIES), default="tiny")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--generations", type=int, default=4, help="samples per prompt (rows = prompts x generations)")
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--device", default="auto", help="auto (cuda if visible), cpu, cuda, cuda:N")
    ap.add_argument("--dtype", default="auto", help="auto (bfloat16 on CUDA, float32 on CPU), bfloat16, float32")
    ap.add_argument("--enforce-eager", action="store_true", help="decode steps eagerly (no CUDA graphs)")
    ap.add_argument("--compile", action="store_true",
                    help="decode steps through torch.compile (engine and server); the engine is also run without, "
                         "in the same process, for the ratio")
    ap.add_argument("--skip", default="", help="comma-separated parts to skip: server,generate,train")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads here and in the server (0: torch's default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    dtype = getattr(torch, args.dtype if args.dtype != "auto" else ("bfloat16" if device.startswith("cuda")
                                                                      else "float32"))
    skip = set(filter(None, args.skip.split(",")))
    model, tok = build(args.geometry, dtype, device)
    gen = torch.Generator().manual_seed(1)
    high = min(model.config.vocab_size, len(tok))
    prompts = [torch.randint(2, high, (args.prompt_tokens,), generator=gen).tolist() for _ in range(args.prompts)]
    rows = args.prompts * args.generations
    bandwidth, source, peak = device_figures(device)
    limit = bandwidth_limit(model, rows, args.prompt_tokens, args.new_tokens, bandwidth)
    plain = run_engine(model, tok, prompts, args.generations, args.new_tokens, args.enforce_eager, device) \
        if args.compile else None
    engine = run_engine(model, tok, prompts, args.generations, args.new_tokens, args.enforce_eager, device,
                        compile=args.compile)
    result: dict[str, Any] = {
        "benchmark": "gpu_decode", "device": torch.cuda.get_device_name(device) if device.startswith("cuda") else
        "cpu", "torch": torch.__version__, "geometry": args.geometry, "dtype": str(dtype).split(".")[-1],
        "parameters": sum(p.numel() for p in model.parameters()), "rows": rows, "prompt_tokens": args.prompt_tokens,
        "new_tokens": args.new_tokens, "bandwidth_bytes_s": bandwidth, "bandwidth_source": source, **limit,
        "engine": engine, "fraction_of_limit": engine["tokens_s"] / limit["bandwidth_limit_tokens_s"]}
    if plain is not None:
        result["engine_uncompiled"] = plain
        result["compile_speedup"] = engine["tokens_s"] / plain["tokens_s"]
    if "server" not in skip:
        server = run_server(model, tok, prompts, args.generations, args.new_tokens, args.enforce_eager, device,
                            args.geometry, args.threads, compile=args.compile)
        result["server"] = {**server, "fraction_of_limit": server["tokens_s"] / limit["bandwidth_limit_tokens_s"]}
    if "generate" not in skip:
        result["generate"] = run_generate(model, tok, prompts, args.generations, args.new_tokens, device)
        result["engine_vs_generate"] = engine["tokens_s"] / result["generate"]["tokens_s"]
    if "train" not in skip:
        try:
            result["train_step"] = run_train_step(model, rows, args.prompt_tokens + args.new_tokens, device, peak)
        except torch.OutOfMemoryError as e:  # the decode figures above still stand
            result["train_step"] = {"error": f"out of memory: {str(e)[:200]}"}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
