"""In-process verify throughput of the rule environments, at a given concurrency.

    python benchmarks/rule_envs_throughput.py [--envs instruction_following,structured_outputs]
                                              [--concurrency 64] [--seconds 3]

Cycles through each environment's scored example rows (its ``data/example.jsonl``, 422
rows left out) through ``EnvService.verify`` — the same validation and scoring path the
HTTP server runs, minus the socket — and prints one JSON object: verifications/s per env.
For the over-HTTP figure use the shared load generator (``envs bench``) against a server.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import time

from servers import registry
from servers.examples import load_examples
from servers.service import EnvService


async def measure(name: str, concurrency: int, seconds: float) -> dict[str, float]:
    env = registry.instantiate(name)
    service = EnvService(env)
    await service.start()
    try:
        rows = [row for _, row in load_examples(registry.get(name).example_path)
                if row.get("_expected", {}).get("status", 200) == 200]
        feed = itertools.cycle(rows)
        done = 0
        deadline = time.perf_counter() + seconds

        async def worker() -> None:
            nonlocal done
            while time.perf_counter() < deadline:
                status, _ = await service.verify(next(feed))
                assert status == 200
                done += 1
                await asyncio.sleep(0)  # let the other workers interleave, as sockets would

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - start
        return {"verifications_per_s": round(done / elapsed, 1), "verifications": done, "rows": len(rows)}
    finally:
        await service.stop()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--envs", default="instruction_following,structured_outputs")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    results = {name: await measure(name, args.concurrency, args.seconds) for name in args.envs.split(",")}
    print(json.dumps({"benchmark": "rule_envs_throughput", "mode": "in-process", "concurrency": args.concurrency,
                      "targets_per_s": {"instruction_following": 1000, "structured_outputs": 2000,
                                        "calendar": 2000, "next_action": 2000},
                      "results": results}))


if __name__ == "__main__":
    asyncio.run(main())
