"""Sandboxed executions/s of a trivial Python program vs a bare subprocess (the floor).

End to end per execution: acquire a warm sandbox from the pool, upload ``main.py``, run
``python3 main.py`` with full isolation and limits, release (reset: wipe workspace, kill
leftovers). Baseline in the same run: ``python3 main.py`` as a plain asyncio subprocess at
the same concurrency. Prints one JSON object. Timings depend on machine load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sandboxes import SandboxSpec, open_backend  # noqa: E402
from sandboxes.pool import SandboxPool  # noqa: E402

PROGRAM = "print(1)\n"


async def _bare(n: int, concurrency: int) -> float:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "main.py")
        with open(path, "w") as f:
            f.write(PROGRAM)
        sem = asyncio.Semaphore(concurrency)

        async def one() -> None:
            async with sem:
                p = await asyncio.create_subprocess_exec(sys.executable, path, stdout=asyncio.subprocess.PIPE,
                                                         stderr=asyncio.subprocess.PIPE)
                out, _ = await p.communicate()
                assert out == b"1\n"

        t0 = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(n)))
        return time.perf_counter() - t0


async def _sandboxed(n: int, concurrency: int) -> tuple[float, dict]:
    backend = open_backend("process")
    pool = SandboxPool(backend, SandboxSpec(), size=concurrency + 1)
    await pool.start()
    sem = asyncio.Semaphore(concurrency)
    walls: list[float] = []

    async def one() -> None:
        async with sem, pool.acquire() as sb:
            await sb.upload({"main.py": PROGRAM})
            r = await sb.exec(["python3", "main.py"], timeout=10)
            assert r.ok and r.stdout == b"1\n", r
            walls.append(r.wall_s)

    # Warm-up (page cache, first bwrap) outside the timed window.
    await asyncio.gather(*(one() for _ in range(concurrency)))
    walls.clear()
    t0 = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    elapsed = time.perf_counter() - t0
    await pool.close()
    await backend.close()
    walls.sort()
    return elapsed, {"exec_wall_p50_ms": round(1000 * walls[len(walls) // 2], 2),
                     "exec_wall_p99_ms": round(1000 * walls[int(len(walls) * 0.99) - 1], 2)}


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=os.cpu_count() or 2)
    args = ap.parse_args()
    await _bare(args.concurrency, args.concurrency)  # warm-up
    bare = await _bare(args.n, args.concurrency)
    sandboxed, extra = await _sandboxed(args.n, args.concurrency)
    bare_rate, sb_rate = args.n / bare, args.n / sandboxed
    print(json.dumps({
        "benchmark": "sandbox_exec", "backend": "process", "program": "print(1)",
        "n": args.n, "concurrency": args.concurrency, "cpus": os.cpu_count(),
        "bare_subprocess_exec_per_s": round(bare_rate, 1),
        "sandboxed_exec_per_s": round(sb_rate, 1),
        "ratio_vs_bare": round(sb_rate / bare_rate, 3),
        "overhead_per_exec_ms": round(1000 * (sandboxed - bare) / args.n * args.concurrency, 2),
        "target_exec_per_s": 40, "meets_target": sb_rate >= 40, **extra,
        "note": "end to end: pool acquire + upload + bwrap exec + reset; machine shared, numbers vary with load",
    }))


if __name__ == "__main__":
    asyncio.run(main())
