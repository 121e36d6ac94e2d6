"""Sandboxed executions/s of a trivial Python program vs a bare subprocess (the floor).

End to end per execution: acquire a warm sandbox from the pool, upload ``main.py``, run it
with full isolation and limits, release (reset: wipe workspace, kill leftovers). Modes:
``zygote`` = ``sandbox.exec_python(path="main.py")`` (a fork of the sandbox's pre-started
Python, see sandboxes/README.md); ``exec`` = ``sandbox.exec(["python3", "main.py"])`` (a
fresh bwrap + interpreter per run). Baselines in the same run: ``python3 main.py`` (and
``python3 -I -S main.py``, no site) as a
plain asyncio subprocess at the same concurrency (the floor of "start a Python per run").
Rounds of every mode alternate so load from other users falls on all alike. Prints one
JSON object. Timings depend on machine load.
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


async def _bare(n: int, concurrency: int, flags: tuple[str, ...] = ()) -> float:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "main.py")
        with open(path, "w") as f:
            f.write(PROGRAM)
        sem = asyncio.Semaphore(concurrency)

        async def one() -> None:
            async with sem:
                p = await asyncio.create_subprocess_exec(sys.executable, *flags, path, stdout=asyncio.subprocess.PIPE,
                                                         stderr=asyncio.subprocess.PIPE)
                out, _ = await p.communicate()
                assert out == b"1\n"

        t0 = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(n)))
        return time.perf_counter() - t0


class _Sandboxed:
    def __init__(self, concurrency: int, mode: str) -> None:
        self.concurrency = concurrency
        self.mode = mode
        self.backend = open_backend("process")
        self.pool = SandboxPool(self.backend, SandboxSpec(), size=concurrency + 1)
        self.walls: list[float] = []

    async def one(self, sem: asyncio.Semaphore) -> None:
        async with sem, self.pool.acquire() as sb:
            await sb.upload({"main.py": PROGRAM})
            if self.mode == "zygote":
                r = await sb.exec_python(path="main.py", timeout=10)
            else:
                r = await sb.exec(["python3", "main.py"], timeout=10)
            assert r.ok and r.stdout == b"1\n", r
            self.walls.append(r.wall_s)

    async def run(self, n: int) -> float:
        sem = asyncio.Semaphore(self.concurrency)
        t0 = time.perf_counter()
        await asyncio.gather(*(self.one(sem) for _ in range(n)))
        return time.perf_counter() - t0

    async def close(self) -> None:
        await self.pool.close()
        await self.backend.close()


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=200, help="executions per mode")
    ap.add_argument("--concurrency", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--modes", default="zygote,exec", help="comma-separated: zygote, exec")
    args = ap.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    runners = {m: _Sandboxed(args.concurrency, m) for m in modes}
    load_before = os.getloadavg()[0]
    for r in runners.values():
        await r.pool.start()
        await r.run(args.concurrency)  # warm-up (zygotes start) outside the timed window
        r.walls.clear()
    await _bare(args.concurrency, args.concurrency)
    per_round = max(1, args.n // args.rounds)
    bare = bare_s = 0.0
    took = {m: 0.0 for m in modes}
    for _ in range(args.rounds):
        bare += await _bare(per_round, args.concurrency)
        bare_s += await _bare(per_round, args.concurrency, ("-I", "-S"))
        for m, r in runners.items():
            took[m] += await r.run(per_round)
    for r in runners.values():
        await r.close()
    n = per_round * args.rounds
    bare_rate = n / bare
    out = {"benchmark": "sandbox_exec", "backend": "process", "program": "print(1)",
           "n_per_mode": n, "rounds": args.rounds, "concurrency": args.concurrency, "cpus": os.cpu_count(),
           "bare_subprocess_exec_per_s": round(bare_rate, 1),
           # the same without site (.pth processing): the floor of any fresh interpreter here
           "bare_subprocess_no_site_exec_per_s": round(n / bare_s, 1)}
    for m, r in runners.items():
        walls = sorted(r.walls)
        rate = n / took[m]
        out[m] = {"exec_per_s": round(rate, 1), "ratio_vs_bare": round(rate / bare_rate, 3),
                  "ratio_vs_bare_no_site": round(rate * bare_s / n, 3),
                  "overhead_per_exec_ms": round(1000 * (took[m] - bare) / n * args.concurrency, 2),
                  "exec_wall_p50_ms": round(1000 * walls[len(walls) // 2], 2),
                  "exec_wall_p99_ms": round(1000 * walls[max(0, int(len(walls) * 0.99) - 1)], 2),
                  "meets_target_40_per_s": rate >= 40}
    out.update(load_avg_1m_before=round(load_before, 2), load_avg_1m_after=round(os.getloadavg()[0], 2),
               note="end to end: pool acquire + upload + sandboxed run + reset; negative overhead = "
                    "faster than starting a bare interpreter; machine shared, numbers vary with load")
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main())
