"""Full workplace_assistant sessions per second over HTTP against ONE server process.

A session = POST /seed_session + 3 tool calls (search, update, get) + POST /verify with the
row (27 tool schemas, ~20 KB) and a response. The server runs in its own process; this
process drives many sessions concurrently through ``EnvClient`` (cookies, pooled keep-alive).

    python benchmarks/workplace_sessions.py [--sessions 3000] [--concurrency 64]

Prints one JSON object. Target: >= 300 sessions/s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import statistics
import time
from pathlib import Path

ENV = "workplace_assistant"
ROW_FILE = Path(__file__).parents[1] / "environments" / ENV / "data" / "example.jsonl"


def _serve(port_queue: "mp.Queue[str]") -> None:
    from servers import registry
    from servers.app import run_event_loop, serve_until_signalled

    env = registry.instantiate(ENV)
    run_event_loop(serve_until_signalled(env, "127.0.0.1", 0, on_ready=port_queue.put))


async def _drive(url: str, sessions: int, concurrency: int) -> dict:
    from servers.client import EnvClient
    from servers.wire import response_from_text

    row = json.loads(ROW_FILE.read_text().splitlines()[2])  # reassign Akira's leads to Raj
    row = {k: v for k, v in row.items() if not k.startswith("_") and k != "response"}
    response = response_from_text("I reassigned the leads.")
    search = {"assigned_to_email": "akira.tanaka@atlas.com", "status": "Lead", "product_interest": "Software"}
    latencies: list[float] = []
    rewards: list[float] = []
    limit = asyncio.Semaphore(concurrency)

    async with EnvClient({ENV: url}, max_concurrency_per_server=concurrency * 5, retries=2) as client:
        async def one() -> None:
            async with limit:
                start = time.perf_counter()
                session = await client.seed_session(ENV, row)
                _, found = await client.call_tool(session, "customer_relationship_manager_search_customers", search)
                first = found["output"][0]["customer_id"]
                await client.call_tool(session, "customer_relationship_manager_update_customer",
                                       {"customer_id": first, "field": "assigned_to_email",
                                        "new_value": "raj.patel@atlas.com"})
                await client.call_tool(session, "customer_relationship_manager_search_customers",
                                       {"customer_name": "a", "page_size": 5})
                reply = await client.verify(ENV, row, response, session=session, raise_on_failure=True)
                latencies.append(time.perf_counter() - start)
                rewards.append(reply["reward"])

        await asyncio.gather(*(one() for _ in range(min(200, sessions))))  # warm-up
        latencies.clear(), rewards.clear()
        start = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(sessions)))
        elapsed = time.perf_counter() - start
        _, metrics = await client.get(ENV, "/metrics")
    latencies.sort()
    return {"elapsed_s": round(elapsed, 3), "sessions_per_s": round(sessions / elapsed, 1),
            "p50_session_ms": round(1000 * statistics.median(latencies), 2),
            "p99_session_ms": round(1000 * latencies[int(0.99 * (len(latencies) - 1))], 2),
            "rewards": sorted(set(rewards)),
            "open_sessions_after": next((float(line.rsplit(" ", 1)[1]) for line in str(metrics).splitlines()
                                         if line.startswith("verigym_sessions{")), None)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()
    ctx = mp.get_context("spawn")
    queue: mp.Queue = ctx.Queue()
    server = ctx.Process(target=_serve, args=(queue,), daemon=True)
    server.start()
    try:
        url = queue.get(timeout=60)
        from servers.app import run_event_loop  # uvloop when installed: the client shares the 2 cores

        result = run_event_loop(_drive(url, args.sessions, args.concurrency))
    finally:
        server.terminate()
        server.join(10)
    print(json.dumps({"benchmark": "workplace_sessions", "env": ENV, "sessions": args.sessions,
                      "concurrency": args.concurrency, "tool_calls_per_session": 3, "server_processes": 1,
                      "cpu_count": os.cpu_count(), **result, "target_sessions_per_s": 300,
                      "meets_target": result["sessions_per_s"] >= 300}))


if __name__ == "__main__":
    main()
