"""The code environment under load: example rows over HTTP at a fixed concurrency.

Starts a real server on loopback (process/bubblewrap sandbox), sends the scorable rows of
environments/code/data/example.jsonl (cycled) with ``--concurrency`` requests in flight, and
prints ONE JSON object: verifications/s, latency percentiles, unit tests/s, and whether
every reward matched the row's ``_expected`` (a wrong reward under load is a bug, not noise).

    python benchmarks/code_env.py --concurrency 32 --requests 128
    python benchmarks/code_env.py --compare   # exec vs zygote vs zygote + warm pool, interleaved

Config variants (``--set key=value``, YAML values): ``python=<path>`` forces a fresh
interpreter per verification (the pre-zygote path); ``sandbox_pool_size=N`` keeps N warm
sandboxes (each with its zygote) and resets them between verifications.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from servers import registry  # noqa: E402
from servers.app import start_server  # noqa: E402
from servers.client import EnvClient  # noqa: E402
from servers.examples import load_examples  # noqa: E402


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, int(round(q / 100 * len(ordered) + 0.5)) - 1))
    return ordered[index]


async def run(concurrency: int, requests: int, overrides: dict | None = None) -> dict:
    rows = [row for _, row in load_examples(registry.get("code").example_path)
            if row.get("_expected", {}).get("status", 200) == 200]
    env = registry.instantiate("code", overrides=overrides or {})
    server = await start_server(env)
    if env.pool is not None:
        await env.pool.start()  # warm before the timed window, like a server that has been up
    latencies: list[float] = []
    mismatches: list[str] = []
    failures: dict[str, int] = {}
    tests_run = 0
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(requests):
        queue.put_nowait(i)
    try:
        async with EnvClient({"code": server.url}, max_concurrency_per_server=concurrency, retries=2) as client:
            async def worker() -> None:
                nonlocal tests_run
                while not queue.empty():
                    i = queue.get_nowait()
                    row = rows[i % len(rows)]
                    start = time.perf_counter()
                    reply = await client.verify("code", row)
                    latencies.append(time.perf_counter() - start)
                    tests_run += len(reply.get("verdicts") or [])
                    failure = reply.get("_ng_failure_class")
                    if failure:
                        failures[failure] = failures.get(failure, 0) + 1
                    want = row["_expected"].get("reward")
                    if want is not None and abs(reply.get("reward", -1) - want) > 1e-6:
                        mismatches.append(f"row {i % len(rows)}: reward {reply.get('reward')} != {want}")

            wall_start = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(concurrency)))
            wall = time.perf_counter() - wall_start
    finally:
        await server.stop()
    return {
        "benchmark": "code_env", "backend": env.config.sandbox_backend, "overrides": overrides or {},
        "concurrency": concurrency,
        "requests": requests, "distinct_rows": len(rows), "wall_s": round(wall, 3),
        "verifications_per_s": round(requests / wall, 2), "unit_tests_per_s": round(tests_run / wall, 1),
        "latency_s": {"p50": round(statistics.median(latencies), 3), "p90": round(_percentile(latencies, 90), 3),
                      "p99": round(_percentile(latencies, 99), 3), "max": round(max(latencies), 3)},
        "reward_mismatches": mismatches[:10], "failure_classes": failures,
        "host": {"cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2)},
        "caveat": "shared 2-core machine under load from other work; numbers are indicative",
    }


VARIANTS = {"exec": {"python": sys.executable}, "zygote": {},
            "zygote_pool": {"sandbox_pool_size": 8, "sandbox_pool_max": 32}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--requests", type=int, default=128)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")
    parser.add_argument("--compare", action="store_true", help="run every variant, interleaved, --rounds times")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if not args.compare:
        overrides = {k: yaml.safe_load(v) for k, v in (item.split("=", 1) for item in args.set)}
        print(json.dumps(asyncio.run(run(args.concurrency, args.requests, overrides))))
        return
    results: dict[str, list[dict]] = {name: [] for name in VARIANTS}
    for _ in range(args.rounds):
        for name, overrides in VARIANTS.items():
            results[name].append(asyncio.run(run(args.concurrency, args.requests, overrides)))
    summary = {name: {"verifications_per_s": [r["verifications_per_s"] for r in rs],
                      "p99_s": [r["latency_s"]["p99"] for r in rs], "p50_s": [r["latency_s"]["p50"] for r in rs],
                      "load_avg_1m": [r["host"]["load_avg_1m"] for r in rs],
                      "reward_mismatches": sum(len(r["reward_mismatches"]) for r in rs),
                      "failure_classes": [r["failure_classes"] for r in rs]}
               for name, rs in results.items()}
    print(json.dumps({"benchmark": "code_env_compare", "concurrency": args.concurrency, "requests": args.requests,
                      "variants": {k: v for k, v in VARIANTS.items()}, "results": summary}))


if __name__ == "__main__":
    main()
