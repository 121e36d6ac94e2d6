"""Hold N (default 5,000) concurrent keep-alive connections against ONE mcqa server.

All N connections are opened first and kept open; then every connection sends a
``POST /verify`` at once (``--rounds`` times, reusing its connection), so the server has N
open sockets and up to N queued verifications simultaneously. Prints ONE JSON object:
connections held, requests, ok, errors by kind, elapsed seconds. Success = every request
answered 200 with a reward and no connection dropped.

    python benchmarks/connections.py --connections 5000

A raw asyncio HTTP/1.1 client (not aiohttp) keeps the client's cost per socket tiny; the
fd soft limit is raised to the hard limit in both processes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from servers import registry  # noqa: E402
from servers.cli_bench import bench_rows  # noqa: E402
from servers.cli_serve import spawn_servers, stop_servers  # noqa: E402
from servers.loadgen import encode_bodies  # noqa: E402


def raise_fd_limit(needed: int) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if hard < needed:
        raise SystemExit(f"fd hard limit {hard} < {needed} needed; raise it (ulimit -Hn) first")
    return hard


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return status, await reader.readexactly(length)


async def run(n: int, rounds: int, env: str) -> dict:
    bodies = encode_bodies(bench_rows(registry.get(env), None))
    # A deep queue so N simultaneous requests wait rather than get 503: this measures holding.
    children = await spawn_servers([env], overrides=[f"max_queued={n * 2}"])
    url = children[0].url
    host, port = url.split("//")[1].rsplit(":", 1)
    errors: Counter[str] = Counter()
    ok = 0
    started = time.perf_counter()
    try:
        conns: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        for batch in range(0, n, 500):  # open in batches: the listen backlog is finite
            opened = await asyncio.gather(*(asyncio.open_connection(host, int(port))
                                            for _ in range(min(500, n - batch))), return_exceptions=True)
            for item in opened:
                if isinstance(item, BaseException):
                    errors[f"connect_{type(item).__name__}"] += 1
                else:
                    conns.append(item)
        held = len(conns)
        open_s = time.perf_counter() - started

        async def exchange(i: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> str | None:
            body = bodies[i % len(bodies)]
            writer.write(b"POST /verify HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (host.encode(), len(body), body))
            try:
                status, reply = await read_response(reader)
            except (asyncio.IncompleteReadError, ConnectionError) as exc:
                return f"connection_{type(exc).__name__}"
            if status != 200:
                return f"http_{status}"
            return None if b'"reward"' in reply and b"_ng_failure_class" not in reply else "bad_reply"

        for _ in range(rounds):
            results = await asyncio.gather(*(exchange(i, r, w) for i, (r, w) in enumerate(conns)))
            for kind in results:
                if kind is None:
                    ok += 1
                else:
                    errors[kind] += 1
        for _, writer in conns:
            writer.close()
    finally:
        await stop_servers(children)
    elapsed = time.perf_counter() - started
    return {"env": env, "connections_requested": n, "connections_held": held, "rounds": rounds,
            "requests": held * rounds, "ok": ok, "errors": dict(errors), "open_s": round(open_s, 3),
            "elapsed_s": round(elapsed, 3), "all_ok": ok == n * rounds and not errors}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--connections", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=2, help="requests per held connection")
    parser.add_argument("--env", default="mcqa")
    args = parser.parse_args()
    raise_fd_limit(args.connections + 200)
    result = asyncio.run(run(args.connections, args.rounds, args.env))
    print(json.dumps(result))
    return 0 if result["all_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
