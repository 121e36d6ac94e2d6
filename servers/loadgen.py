"""A cheap closed-loop load generator for ``POST /verify`` (``envs bench``, ``benchmarks/``).

Client and server share the same few cores in our benchmarks, so the client does as little
as it can per request: bodies are serialised once up front (orjson), one keep-alive
connection pool of exactly ``concurrency`` connections, and the reply is not parsed — a
byte search finds a failure class. ``concurrency`` workers each send their next request as
soon as the previous one answered (closed loop), so latency percentiles are not inflated
by a client-side queue.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from servers.wire import FAILURE_CLASS_KEY

_FAILURE_NEEDLE = f'"{FAILURE_CLASS_KEY}":"'.encode()


@dataclass
class LoadResult:
    url: str
    concurrency: int
    requests: int
    ok: int
    elapsed_s: float
    latencies_ms: list[float] = field(repr=False)
    errors: Counter[str] = field(default_factory=Counter)

    @property
    def req_per_s(self) -> float:
        return self.requests / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def percentile(self, q: float) -> float:
        """Nearest-rank percentile of the latencies, in ms."""
        if not self.latencies_ms:
            return float("nan")
        ordered = sorted(self.latencies_ms)
        rank = max(1, min(len(ordered), int(round(q / 100 * len(ordered) + 0.5))))
        return ordered[rank - 1]

    def summary(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "concurrency": self.concurrency,
            "requests": self.requests,
            "ok": self.ok,
            "elapsed_s": round(self.elapsed_s, 3),
            "req_per_s": round(self.req_per_s, 1),
            "p50_ms": round(self.percentile(50), 3),
            "p95_ms": round(self.percentile(95), 3),
            "p99_ms": round(self.percentile(99), 3),
            "errors": dict(self.errors),
        }


def encode_bodies(rows: list[dict[str, Any]]) -> list[bytes]:
    """Strip example-only keys and pre-serialise once."""
    bodies = []
    for row in rows:
        clean = {k: v for k, v in row.items() if k not in ("_expected", "_script")}
        bodies.append(orjson.dumps(clean))
    if not bodies:
        raise ValueError("no rows to send")
    return bodies


def _classify(status: int, raw: bytes) -> str | None:
    """None for a scored 200; otherwise the error kind counted in ``errors``."""
    if status != 200:
        return f"http_{status}"
    at = raw.find(_FAILURE_NEEDLE)
    if at < 0:
        return None
    start = at + len(_FAILURE_NEEDLE)
    return "failure_" + raw[start:raw.find(b'"', start)].decode(errors="replace")


async def run_load(url: str, bodies: list[bytes], *, concurrency: int, requests: int,
                   warmup: int = 0, timeout_s: float = 60.0, progress: Any = None) -> LoadResult:
    """Send ``requests`` POSTs to ``url``/verify from ``concurrency`` workers; rows cycle.

    The warm-up takes the first ``warmup`` bodies and the measured requests the ones after them,
    so bodies that are all different (``benchmarks/unique_traffic.py``, ``warmup + requests``
    of them) are each sent once: no measured request repeats one the server has seen."""
    target = url.rstrip("/") + "/verify"
    headers = {"Content-Type": "application/json"}
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=0, keepalive_timeout=120, force_close=False)
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    latencies: list[float] = []
    errors: Counter[str] = Counter()
    next_index = 0

    async with aiohttp.ClientSession(connector=connector, timeout=timeout, skip_auto_headers=("User-Agent",),
                                     cookie_jar=aiohttp.DummyCookieJar()) as http:

        async def one(body: bytes, record: bool) -> None:
            started = time.perf_counter()
            try:
                async with http.post(target, data=body, headers=headers) as r:
                    raw = await r.read()
                    kind = _classify(r.status, raw)
            except asyncio.TimeoutError:
                kind = "timeout"
            except aiohttp.ClientError as exc:
                kind = f"connection_{type(exc).__name__}"
            if record:
                latencies.append((time.perf_counter() - started) * 1000)
                if kind:
                    errors[kind] += 1
                if progress is not None:
                    progress.update(1)

        async def worker(total: int, record: bool, offset: int) -> None:
            nonlocal next_index
            while next_index < total:
                i = next_index
                next_index += 1
                await one(bodies[(offset + i) % len(bodies)], record)

        if warmup:
            await asyncio.gather(*(worker(warmup, False, 0) for _ in range(min(concurrency, warmup))))
            next_index = 0
        started = time.perf_counter()
        await asyncio.gather(*(worker(requests, True, warmup) for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    ok = len(latencies) - sum(errors.values())
    return LoadResult(url, concurrency, len(latencies), ok, elapsed, latencies, errors)
