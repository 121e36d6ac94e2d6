"""Hold N (default 20,000) concurrent keep-alive connections against ONE server, each sending
``--rounds`` (default 5) ``POST /verify``.

    python benchmarks/connections.py                                 # 20,000 x 5 against mcqa
    python benchmarks/connections.py --connections 5000 --rounds 2 --workers 1

``envs serve ENV --workers W`` runs in a child process with its default queue limits. The
connections are spread over client processes (one process's descriptor limit is lifted to its
hard limit, and 20,000 sockets may be more than one hard limit allows). Each client opens all
its connections first and keeps them open; then every connection sends its requests one after
the other, all connections at once, so the server holds N sockets and up to N verifications
at a time. A 503 that carries ``Retry-After`` is the server shedding load as designed: the
client waits that long and sends the request again (counted in ``retried_503``); anything
else (another status, a 503 without Retry-After, a dropped connection, a reply without a
reward) is an error. The server's memory (RSS of its whole process tree) is sampled during the
run; ``/health`` must answer 200 afterwards. Loopback only; ``--timeout`` bounds the run.

Descriptors (``ulimit -n``): nothing to do by hand when the HARD limit is high enough: every
client process and every server worker lifts its own soft limit to the hard one. Needed: a
client process holds up to 9,000 sockets (``PER_CLIENT``), a server worker about
``connections / workers`` plus a few hundred (each accepted socket, its pool, its peers), so
20,000 connections on 2 workers want a hard limit of at least ~10,300 (``ulimit -Hn``; this
machine: 20,000). The script checks this before it starts and says what to do if it is short
(raise the hard limit as root: ``ulimit -Hn 65536`` in the shell that runs it, ``prlimit
--nofile=65536:65536 --pid $$``, or ``LimitNOFILE=`` / ``nofile`` in limits.conf), or use more
``--workers``. The kernel's loopback port range bounds the connections per client address
too (``sysctl net.ipv4.ip_local_port_range``; the default ~28,000 is enough for 20,000).

Prints ONE JSON object; ``all_ok`` = every request answered with a reward, no error, server
healthy after.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import resource
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from servers import registry  # noqa: E402
from servers.app import run_event_loop  # noqa: E402
from servers.cli_bench import bench_rows  # noqa: E402
from servers.cli_serve import spawn_servers, stop_servers  # noqa: E402
from servers.loadgen import encode_bodies  # noqa: E402

PER_CLIENT = 9000  # connections per client process (below a 10k-ish descriptor hard limit)
SERVER_SPARE_FDS = 300  # a server worker's descriptors besides its connections (pool, peers, files)


def raise_fd_limit(needed: int) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if hard < needed:
        raise SystemExit(f"fd hard limit {hard} < {needed} needed; raise it (ulimit -Hn) first")
    return hard


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict[bytes, bytes], bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, await reader.readexactly(int(headers.get(b"content-length", b"0")))


async def client(host: str, port: int, n: int, rounds: int, env: str, deadline: float) -> dict:
    """One client process's share: open ``n`` connections, then ``rounds`` requests on each."""
    bodies = encode_bodies(bench_rows(registry.get(env), None))
    errors: Counter[str] = Counter()
    ok = retried = 0
    conns: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    started = time.monotonic()
    for batch in range(0, n, 500):  # in batches: the listen backlog is finite
        opened = await asyncio.gather(*(asyncio.open_connection(host, port) for _ in range(min(500, n - batch))),
                                      return_exceptions=True)
        for item in opened:
            if isinstance(item, BaseException):
                errors[f"connect_{type(item).__name__}"] += 1
            else:
                conns.append(item)
    open_s = time.monotonic() - started

    async def exchange(i: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal ok, retried
        for r in range(rounds):
            body = bodies[(i + r) % len(bodies)]
            while True:
                writer.write(b"POST /verify HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (host.encode(), len(body), body))
                try:
                    status, headers, reply = await asyncio.wait_for(read_response(reader),
                                                                    max(1.0, deadline - time.monotonic()))
                except (asyncio.IncompleteReadError, ConnectionError, asyncio.TimeoutError) as exc:
                    errors[f"connection_{type(exc).__name__}"] += rounds - r
                    return
                if status == 503 and b"retry-after" in headers:
                    retried += 1
                    await asyncio.sleep(float(headers[b"retry-after"]) * (1 + random.random()))
                    continue
                if status != 200:
                    errors[f"http_{status}"] += 1
                elif b'"reward"' not in reply or b"_ng_failure_class" in reply:
                    errors["bad_reply"] += 1
                else:
                    ok += 1
                break

    await asyncio.gather(*(exchange(i, r, w) for i, (r, w) in enumerate(conns)))
    for _, writer in conns:
        writer.close()
    return {"held": len(conns), "ok": ok, "retried_503": retried, "errors": dict(errors),
            "open_s": round(open_s, 3), "elapsed_s": round(time.monotonic() - started, 3)}


def tree_rss_mb(root: int) -> float:
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            total += int(status.split("VmRSS:")[1].split()[0])
            for task in os.listdir(f"/proc/{pid}/task"):
                todo += [int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
        except (OSError, IndexError):
            continue
    return round(total / 1024, 1)


async def run(args: argparse.Namespace) -> dict:
    children = await spawn_servers([args.env], workers=args.workers, echo_output=False)
    url = children[0].url
    host, port = url.split("//")[1].rsplit(":", 1)
    server_pid = children[0].process.pid
    parts = [args.connections // math.ceil(args.connections / PER_CLIENT)] * math.ceil(args.connections / PER_CLIENT)
    parts[0] += args.connections - sum(parts)
    rss = {"before": tree_rss_mb(server_pid), "peak": 0.0}
    started = time.monotonic()
    try:
        procs = [await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--client", host, port, str(n), str(args.rounds), args.env,
            str(args.timeout), stdout=asyncio.subprocess.PIPE) for n in parts]
        waits = asyncio.gather(*(p.communicate() for p in procs))
        while not waits.done():
            rss["peak"] = max(rss["peak"], tree_rss_mb(server_pid))
            await asyncio.wait([waits], timeout=0.5)
        outs = [json.loads(out) for out, _ in waits.result()]
        with urllib.request.urlopen(url + "/health", timeout=30) as reply:
            healthy = reply.status == 200
        rss["after"] = tree_rss_mb(server_pid)
    finally:
        await stop_servers(children)
    errors: Counter[str] = Counter()
    for out in outs:
        errors.update(out["errors"])
    held, ok = sum(o["held"] for o in outs), sum(o["ok"] for o in outs)
    return {"benchmark": "connections", "env": args.env, "workers": args.workers, "client_processes": len(parts),
            "connections_requested": args.connections, "connections_held": held, "rounds": args.rounds,
            "requests": args.connections * args.rounds, "ok": ok, "retried_503": sum(o["retried_503"] for o in outs),
            "errors": dict(errors), "open_s": max(o["open_s"] for o in outs),
            "elapsed_s": round(time.monotonic() - started, 3), "server_rss_mb": rss,
            "healthy_after": healthy, "loadavg": Path("/proc/loadavg").read_text().split()[:3],
            "all_ok": ok == args.connections * args.rounds and not errors and healthy}


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        host, port, n, rounds, env, timeout = sys.argv[2:8]
        raise_fd_limit(int(n) + 100)
        deadline = time.monotonic() + float(timeout)
        print(json.dumps(run_event_loop(client(host, int(port), int(n), int(rounds), env, deadline))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--connections", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5, help="requests per held connection")
    parser.add_argument("--env", default="mcqa")
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)),
                        help="envs serve --workers (default: one per usable CPU)")
    parser.add_argument("--timeout", type=float, default=600.0, help="bound on the whole exchange, seconds")
    args = parser.parse_args()
    per_worker = -(-args.connections // max(1, args.workers)) + SERVER_SPARE_FDS
    hard = raise_fd_limit(256)
    if hard < per_worker:  # the kernel spreads connections evenly over the workers (SO_REUSEPORT)
        raise SystemExit(f"each of the {args.workers} server workers needs ~{per_worker} descriptors but the hard "
                         f"limit is {hard}: raise it (ulimit -Hn {per_worker * 2} as root) or use more --workers")
    result = run_event_loop(run(args))
    print(json.dumps(result))
    return 0 if result["all_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
