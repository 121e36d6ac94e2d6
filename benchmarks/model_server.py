"""The local model server's request batching: throughput of concurrent chat requests with
batching on (``--max-batch-size 16``) vs off (``--max-batch-size 1``), same model (the tiny
preset on CPU unless ``--source``), same requests. One JSON object.

Each run starts ``envs model serve`` as a subprocess, sends ``--requests`` chat completions with
``--concurrency`` in flight (greedy, ``--max-tokens`` new tokens each), and reads the server's own
counters (batches, rows) from /metrics. ``speedup`` = batched req/s / unbatched req/s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

REPO = Path(__file__).resolve().parent.parent


def start(source: str, batch: int, ready: Path, threads: int) -> tuple[subprocess.Popen, dict]:
    proc = subprocess.Popen([sys.executable, "-m", "servers.cli", "model", "serve", source, "--port", "0",
                             "--max-batch-size", str(batch), "--ready-file", str(ready),
                             "--cpu-threads", str(threads)], cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"model server (batch {batch}) did not start")
        time.sleep(0.2)
    return proc, json.loads(ready.read_text())


async def load(info: dict, requests: int, concurrency: int, max_tokens: int) -> dict:
    slots = asyncio.Semaphore(concurrency)
    latencies: list[float] = []
    async with aiohttp.ClientSession() as session:
        async def one(i: int) -> None:
            body = {"model": info["model"], "messages": [{"role": "user", "content": f"Question {i}: what is {i} + 1?"}],
                    "max_tokens": max_tokens, "temperature": 0}
            async with slots:
                t = time.perf_counter()
                async with session.post(info["base_url"] + "/chat/completions", json=body) as r:
                    assert r.status == 200, await r.text()
                    await r.read()
                latencies.append(time.perf_counter() - t)

        start_t = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(requests)))
        wall = time.perf_counter() - start_t
        async with session.get(info["url"] + "/metrics") as r:
            text = await r.text()
    counters = {m.group(1): float(m.group(2)) for m in
                re.finditer(r"^verigym_model_(batches_total|batch_rows_total)\{[^}]*\} (\S+)$", text, re.M)}
    latencies.sort()
    return {"requests_per_s": round(requests / wall, 2), "p50_latency_s": round(latencies[len(latencies) // 2], 3),
            "batches": int(counters["batches_total"]),
            "mean_batch_rows": round(counters["batch_rows_total"] / max(counters["batches_total"], 1), 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", default="tiny", help="what to serve (default: the tiny preset)")
    ap.add_argument("--requests", type=int, default=256)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--cpu-threads", type=int, default=0, help="the server's torch CPU threads (0: torch's default)")
    args = ap.parse_args()
    out: dict = {"source": args.source, "requests": args.requests, "concurrency": args.concurrency,
                 "max_tokens": args.max_tokens, "cpu_threads": args.cpu_threads}
    with tempfile.TemporaryDirectory() as tmp:
        for label, batch in (("unbatched", 1), ("batched", 16)):
            proc, info = start(args.source, batch, Path(tmp) / f"{label}.json", args.cpu_threads)
            try:
                out[label] = asyncio.run(load(info, args.requests, args.concurrency, args.max_tokens))
            finally:
                proc.terminate()
                proc.wait(timeout=30)
    out["speedup"] = round(out["batched"]["requests_per_s"] / out["unbatched"]["requests_per_s"], 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
