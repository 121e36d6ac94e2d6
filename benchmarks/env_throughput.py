"""Throughput and latency of one environment server process on loopback.

Starts ``NAME`` in a child process (``envs serve``'s child), drives ``POST /verify`` with the
closed-loop load generator at ``--concurrency``, and prints ONE JSON object:
env, concurrency, requests, req_per_s, p50/p95/p99 ms, errors, plus the issue's target for
the environment (if it has one) and whether this run met it.

    python benchmarks/env_throughput.py --env mcqa --concurrency 64 --requests 20000
    python benchmarks/env_throughput.py --env math --concurrency 64 --requests 3000

Client and server share the machine: on a 2-core box the load generator takes a good part
of one core, so the server's own capacity is higher than what this prints.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from servers import registry  # noqa: E402
from servers.app import run_event_loop  # noqa: E402
from servers.cli_bench import bench_rows, run_bench  # noqa: E402

# Targets at concurrency 64 on one server process (issue 2: mcqa, math).
TARGETS = {"mcqa": {"req_per_s": 3000.0, "p99_ms": 50.0}, "math": {"req_per_s": 300.0},
           # Issue 16: rule-based environments, >= 2,000 verifications/s on one server.
           "calendar": {"req_per_s": 2000.0}, "next_action": {"req_per_s": 2000.0}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", required=True, help="environment name (see `envs list`)")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--requests", type=int, default=10000)
    parser.add_argument("--data", type=Path, help="JSONL rows with 'response' (default: the env's examples)")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="server config overrides")
    args = parser.parse_args()
    rows = bench_rows(registry.get(args.env), args.data)
    result = run_event_loop(run_bench(args.env, rows, concurrency=args.concurrency, requests=args.requests,
                                   overrides=args.overrides, show_progress=False))
    target = TARGETS.get(args.env)
    if target:
        result["target"] = target
        result["meets_target"] = (result["req_per_s"] >= target["req_per_s"] and not result["errors"]
                                  and result["p99_ms"] < target.get("p99_ms", float("inf")))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
