"""``envs model serve PATH_OR_PRESET``: the local OpenAI-compatible model server from the command line."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import signal
import sys
from pathlib import Path

EPILOG = """examples:
  envs model serve tiny --port 8100                      # the trainer's tiny preset, on CPU
  envs model serve runs/tiny/checkpoints --port 8100     # a trained policy: the run's latest step
  envs model serve runs/tiny/checkpoints/step_000040     # one checkpoint step
  envs model serve Qwen/Qwen3-0.6B --device cuda         # any Hugging Face causal LM
  curl -s localhost:8100/v1/chat/completions -H 'Content-Type: application/json' \\
       -d '{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16}'

Point a judge at it with judge.base_url=http://127.0.0.1:8100/v1 (judge.model = the served name).
Engine: vLLM (`vllm serve`) when vLLM is installed and a GPU is visible, else verigym's own decode
engine (static KV cache, CUDA graphs on a GPU; concurrent requests share a batch, see
--max-batch-size/--max-wait-ms). Both speak vLLM's RL surface for a trainer: /v1/completions with
token ids and logprobs, and with --weight-transfer-config '{"backend": "disk"}' (or "ipc" on a GPU)
POST /pause?mode=keep, /resume and the weight-transfer routes (docs/model-server.md).
On a cluster, point base_url at your vLLM judges instead. Needs the [train] extra (torch, transformers).
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    model = sub.add_parser("model", help="serve a model behind an OpenAI-compatible API (judges, agents)",
                           formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG)
    model_sub = model.add_subparsers(dest="model_command", required=True, metavar="SUBCOMMAND")
    p = model_sub.add_parser("serve", help="serve 'tiny', a checkpoint folder or a hub id on /v1/completions, "
                             "/v1/chat/completions, /v1/responses, /v1/models", formatter_class=argparse.RawDescriptionHelpFormatter,
                             epilog=EPILOG)
    p.add_argument("source", metavar="PATH_OR_PRESET",
                   help="'tiny', a Hugging Face checkpoint folder, a driver checkpoints/ folder (latest step), or a hub id")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8100, help="port (default 8100; 0 = a free port, printed)")
    p.add_argument("--engine", choices=("auto", "verigym", "vllm"), default="auto",
                   help="auto (default): vllm when installed and a GPU is visible, else verigym's decode engine")
    p.add_argument("--served-model-name", help="the model id clients send (default: 'tiny' or the folder name)")
    p.add_argument("--device", default="auto", help="verigym engine: auto (cuda if visible), cpu, cuda, cuda:1...")
    p.add_argument("--dtype", default="auto", help="auto (bfloat16 on GPU, float32 on CPU), float32, bfloat16, float16")
    p.add_argument("--seed", type=int, default=None, help="weights seed of the tiny preset (default 0; tiny only)")
    p.add_argument("--max-batch-size", type=int, default=16, help="sequences per batched generate (default 16)")
    p.add_argument("--max-wait-ms", type=float, default=10.0,
                   help="how long the first waiting request waits for others to join its batch (default 10)")
    p.add_argument("--max-queued", type=int, default=1024, help="waiting sequences beyond which requests get 503")
    p.add_argument("--max-tokens", type=int, default=512, help="new tokens when a request sets no limit (default 512)")
    p.add_argument("--weight-transfer-config", metavar="JSON",
                   help="enable the RL routes (pause/resume, weight transfer) with this backend, as vLLM's flag: "
                        "'{\"backend\": \"disk\"}' (safetensors directory; any device) or "
                        "'{\"backend\": \"ipc\"}' (CUDA IPC from a trainer on the same GPU)")
    p.add_argument("--cpu-threads", type=int, default=0,
                   help="torch's intra-op CPU threads (default 0: torch's own choice, one per core). On a shared or "
                        "busy CPU, 1 avoids threads spinning against other processes")
    p.add_argument("--enforce-eager", action="store_true",
                   help="verigym engine: run decode steps eagerly instead of as captured CUDA graphs")
    p.add_argument("--compile", action="store_true",
                   help="verigym engine: decode steps through torch.compile (fused kernels, captured after on a GPU); "
                        "each new batch shape compiles first (seconds on CPU, tens of seconds on a GPU)")
    p.add_argument("--ready-file", help="write {\"url\", \"model\"} here once serving")
    p.add_argument("--vllm-args", default="", help="extra arguments for `vllm serve`, one quoted string")
    p.set_defaults(func=cmd_model_serve)


def _backend(raw: str | None) -> str | None:
    from servers.model.loading import ModelLoadError
    from servers.model.weight_transfer import BACKENDS

    if raw is None:
        return None
    try:
        config = json.loads(raw)
    except ValueError:
        raise ModelLoadError(f"--weight-transfer-config is not JSON: {raw!r} (e.g. '{{\"backend\": \"disk\"}}')") from None
    if not isinstance(config, dict) or set(config) != {"backend"} or config["backend"] not in BACKENDS:
        raise ModelLoadError(f"--weight-transfer-config takes {{\"backend\": ...}} with one of {', '.join(BACKENDS)}")
    return config["backend"]


def cmd_model_serve(args: argparse.Namespace) -> int:
    from servers.model.loading import ModelLoadError, require_torch, resolve_source

    try:
        require_torch()
        args.backend = _backend(args.weight_transfer_config)
        resolve_source(args.source)  # a wrong path fails before anything loads
        if args.max_batch_size < 1 or args.max_queued < 1 or args.max_tokens < 1 or args.max_wait_ms < 0 \
                or args.cpu_threads < 0:
            raise ModelLoadError("--max-batch-size, --max-queued and --max-tokens must be >= 1, --max-wait-ms and "
                                 "--cpu-threads >= 0")
        if args.seed is not None and args.source != "tiny":
            raise ModelLoadError("--seed seeds the tiny preset's weights; a checkpoint has its own")
        args.seed = args.seed or 0
        from servers.model.vllm_engine import exec_vllm, vllm_available, vllm_command

        if args.engine == "vllm" or (args.engine == "auto" and vllm_available()):
            if not vllm_available():
                raise ModelLoadError("--engine vllm needs the vllm package and a visible GPU")
            unused = [flag for flag, value, default in (
                ("--device", args.device, "auto"), ("--max-batch-size", args.max_batch_size, 16),
                ("--max-wait-ms", args.max_wait_ms, 10.0), ("--max-queued", args.max_queued, 1024),
                ("--max-tokens", args.max_tokens, 512), ("--enforce-eager", args.enforce_eager, False),
                ("--compile", args.compile, False),
                ("--cpu-threads", args.cpu_threads, 0))
                if value != default]
            if unused:
                raise ModelLoadError(f"{', '.join(unused)} set the verigym engine; vLLM schedules its own "
                                     "batches: pass its flags with --vllm-args, or use --engine verigym")
            extra = shlex.split(args.vllm_args)
            if args.weight_transfer_config:  # vLLM serves the RL routes in its dev mode only
                os.environ["VLLM_SERVER_DEV_MODE"] = "1"
                extra += ["--weight-transfer-config", args.weight_transfer_config]
            cache = Path.home() / ".cache" / "verigym" / "models"
            cache.mkdir(parents=True, exist_ok=True)
            exec_vllm(vllm_command(args.source, host=args.host, port=args.port or 8100,
                                   served_name=args.served_model_name,
                                   dtype=args.dtype, seed=args.seed, cache_dir=cache, extra=extra))
        return asyncio.run(_serve(args))
    except ModelLoadError as exc:
        print(f"envs model serve: {exc}", file=sys.stderr)
        return 2


async def _serve(args: argparse.Namespace) -> int:
    from aiohttp import web

    from servers.model.loading import load_model
    from servers.model.server import ModelServer

    if args.cpu_threads:
        import torch

        torch.set_num_threads(args.cpu_threads)
    print(f"envs model serve: loading {args.source} ...", file=sys.stderr, flush=True)
    loaded = await asyncio.to_thread(load_model, args.source, device=args.device, dtype=args.dtype, seed=args.seed,
                                     served_name=args.served_model_name)
    try:
        server = ModelServer(loaded, max_batch_size=args.max_batch_size, max_wait_ms=args.max_wait_ms,
                             max_queued=args.max_queued, default_max_tokens=args.max_tokens,
                             weight_transfer=args.backend, enforce_eager=args.enforce_eager, compile=args.compile)
    except ValueError as exc:  # --compile on a model only the transformers forward runs
        print(f"envs model serve: --compile: {exc}", file=sys.stderr)
        return 2
    runner = web.AppRunner(server.make_app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, args.host, args.port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        print(f"envs model serve: cannot bind {args.host}:{args.port}: {exc.strerror}", file=sys.stderr)
        return 1
    port = site._server.sockets[0].getsockname()[1]  # the real port when --port 0
    url = f"http://{args.host}:{port}"
    params = sum(p.numel() for p in loaded.model.parameters())
    print(f"envs model serve: {loaded.name} ({params / 1e6:.1f}M parameters, {loaded.device}) on {url}/v1 "
          f"[{server.engine.kind}, batch <= {args.max_batch_size}, wait {args.max_wait_ms:g} ms"
          + (f", weight transfer: {args.backend}" if args.backend else "") + "]", file=sys.stderr, flush=True)
    if args.ready_file:
        Path(args.ready_file).write_text(json.dumps({"url": url, "base_url": f"{url}/v1", "model": loaded.name}))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    print("envs model serve: stopping", file=sys.stderr, flush=True)
    await runner.cleanup()
    return 0
