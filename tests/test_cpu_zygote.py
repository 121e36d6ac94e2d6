"""CPU-pool workers forked from the zygote (servers/cpu_zygote.py), as ``envs serve`` runs them.

Run in a fresh interpreter: the zygote must be forked from a process without threads, which
pytest's own process is not."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_SCRIPT = r"""
import asyncio, json, operator, os, time
from servers import cpu_zygote
from servers.cpu_pool import CpuPool, CpuTimeout

zygote = cpu_zygote.start_zygote(("fractions",))

def parent_of(pid):
    return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])

async def main():
    pool = CpuPool(2, preload=("fractions", "decimal"), memory_mb=512)
    await pool.start()
    out = {"add": await pool.run(operator.add, 2, 3)}
    before = [w.process.pid for w in pool._workers]
    out["parents"] = [parent_of(pid) for pid in before]
    slow = asyncio.ensure_future(pool.run(time.sleep, 30, timeout=0.5))
    fast = [await pool.run(operator.mul, i, 3) for i in range(5)]  # the other worker keeps serving
    try:
        await slow
        out["timeout"] = False
    except CpuTimeout as exc:
        out["timeout"] = True
        out["sleep_cpu_s"] = exc.cpu_s  # waiting is not work: the deadline says whose fault it was
    started = time.monotonic()
    out["after"] = await pool.run(operator.mul, 7, 6)
    out["replacement_s"] = time.monotonic() - started
    for worker in pool._workers:
        worker.wait_ready()  # the replacement announces its pid on its first use or here
    after = [w.process.pid for w in pool._workers]
    out["fast"] = fast
    out["kept"] = len(set(before) & set(after))
    out["replaced_parent"] = [parent_of(pid) for pid in after if pid not in before]
    out["zygote"] = zygote.pid
    out["alive"] = pool.alive
    try:
        await pool.run(sum, range(10 ** 12), timeout=1.0)
    except CpuTimeout as exc:
        out["spin_cpu_s"] = exc.cpu_s
    await pool.close()
    print(json.dumps(out))

asyncio.run(main())
"""


def test_pool_workers_fork_from_the_zygote_and_a_deadline_kill_replaces_only_one():
    run = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["add"] == 5 and out["fast"] == [0, 3, 6, 9, 12] and out["after"] == 42
    assert out["parents"] == [out["zygote"]] * 2  # forked by the zygote, not fresh interpreters
    assert out["timeout"] and out["kept"] == 1 and out["replaced_parent"] == [out["zygote"]] and out["alive"]
    # CpuTimeout.cpu_s: the CPU the killed worker spent (a sleeping call none; a spinning one some)
    assert out["sleep_cpu_s"] is not None and out["sleep_cpu_s"] < 0.2 and out["spin_cpu_s"] > 0
