"""Server CPU per verification, on unique and on repeated traffic, with 1..N workers.

    python benchmarks/verify_cost.py                                   # every rule-based env, 1 worker
    python benchmarks/verify_cost.py --envs mcqa,math --workers 1,2 --requests 4000
    python benchmarks/verify_cost.py --envs mcqa --pin                 # client on its own core

For each environment, traffic kind and worker count it starts ``envs serve NAME --workers W``
in a child process, warms it up, then sends ``--requests`` ``POST /verify`` in ``--windows``
equal windows and reads the CPU time of the whole server process tree (master, workers, their
CPU-pool processes) from ``/proc/PID/stat`` around each window. ``cpu_us_per_req`` is the
median over the windows: server CPU-seconds per verification, which does not depend on where
the client runs or how many other processes share the machine (it counts only the server's
own cycles; a loaded machine still slows caches and clocks somewhat, so ``loadavg`` is printed).
``req_per_s`` is the wall-clock figure and does depend on both.

Traffic: ``unique`` = every request a different response (``benchmarks/unique_traffic.py``),
``repeated`` = the environment's scored example rows cycled (what caches make cheap),
``unique_sympy`` (math only) = unique pairs outside the symbolic fast path, which math-verify
decides in the CPU pool (``--traffic unique,unique_sympy --envs math``).
``--pin`` pins this client to the last CPU and the server tree to the others (needs >= 2 CPUs).

Prints ONE JSON object; ``targets_cpu_us`` are issue 17's (unique traffic, one worker).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from servers import registry  # noqa: E402
from servers.app import run_event_loop  # noqa: E402
from servers.cli_bench import bench_rows  # noqa: E402
from servers.cli_serve import spawn_servers, stop_servers  # noqa: E402
from servers.loadgen import encode_bodies, run_load  # noqa: E402
from unique_traffic import unique_bodies  # noqa: E402

RULE_BASED = ("mcqa", "math", "instruction_following", "structured_outputs", "calendar", "next_action", "tool_call",
              "swe_pivot", "reasoning_gym", "long_context")
TARGETS_CPU_US = {"instruction_following": 400, "structured_outputs": 300, "mcqa": 120, "math": 2000}
_TICK = os.sysconf("SC_CLK_TCK")


def process_tree(root: int) -> list[int]:
    """``root`` and every descendant (workers, CPU-pool processes)."""
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                todo += [int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
        except OSError:
            continue
    return out


def tree_cpu_s(root: int) -> float:
    """User + system CPU seconds of the tree, reaped children (a killed pool worker) included."""
    total = 0
    for pid in process_tree(root):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    return total / _TICK


async def measure(name: str, traffic: str, workers: int, args: argparse.Namespace) -> dict:
    # Rule-based scoring only: example rows a judge scores (long_context's lc_judge) need a model.
    rows = [row for row in bench_rows(registry.get(name), None)
            if "judge" not in (row.get("_expected", {}).get("fields", {}).get("scored_by", ""),
                               row.get("_expected", {}).get("fields", {}).get("metric", ""))]
    warmup = min(args.requests, 2 * args.concurrency)
    if traffic in ("unique", "unique_sympy"):
        bodies, unique = unique_bodies(name, rows, warmup + args.requests, seed=args.seed,
                                       math_forms="sympy" if traffic == "unique_sympy" else "symbolic")
    else:
        bodies, unique = encode_bodies(rows), None
    (child,) = await spawn_servers([name], workers=workers, echo_output=False, overrides=args.overrides)
    cpus = sorted(os.sched_getaffinity(0))
    try:
        tree = process_tree(child.process.pid)
        if args.pin and len(cpus) >= 2:
            os.sched_setaffinity(0, {cpus[-1]})
            for pid in tree:
                os.sched_setaffinity(pid, set(cpus[:-1]))
        await run_load(child.url, bodies[:warmup], concurrency=args.concurrency, requests=warmup)
        per_window = args.requests // args.windows
        cpu_us, results, client_cpu = [], [], 0.0
        for w in range(args.windows):
            chunk = bodies[warmup + w * per_window: warmup + (w + 1) * per_window] if unique is not None else bodies
            before, client_before = tree_cpu_s(child.process.pid), resource.getrusage(resource.RUSAGE_SELF)
            result = await run_load(child.url, chunk, concurrency=args.concurrency, requests=per_window)
            after, client_after = tree_cpu_s(child.process.pid), resource.getrusage(resource.RUSAGE_SELF)
            cpu_us.append((after - before) / per_window * 1e6)
            client_cpu += (client_after.ru_utime + client_after.ru_stime - client_before.ru_utime - client_before.ru_stime)
            results.append(result)
        elapsed = sum(r.elapsed_s for r in results)
        latencies = sorted(x for r in results for x in r.latencies_ms)
        errors: dict[str, int] = {}
        for r in results:
            for kind, n in r.errors.items():
                errors[kind] = errors.get(kind, 0) + n
        return {"cpu_us_per_req": round(statistics.median(cpu_us), 1), "cpu_us_windows": [round(x, 1) for x in cpu_us],
                "req_per_s": round(per_window * args.windows / elapsed, 1),
                "p50_ms": round(latencies[len(latencies) // 2], 2), "p99_ms": round(latencies[int(len(latencies) * 0.99)], 2),
                "client_cpu_us_per_req": round(client_cpu / (per_window * args.windows) * 1e6, 1),
                "requests": per_window * args.windows, "errors": errors,
                **({"unique_fraction": round(unique, 4)} if unique is not None else {})}
    finally:
        os.sched_setaffinity(0, set(cpus))
        await stop_servers([child])


async def run_all(args: argparse.Namespace) -> dict:
    out: dict = {}
    for name in args.envs.split(","):
        out[name] = {}
        for traffic in args.traffic.split(","):
            for workers in (int(w) for w in args.workers.split(",")):
                out[name][f"{traffic}_w{workers}"] = await measure(name, traffic, workers, args)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", default=",".join(RULE_BASED))
    parser.add_argument("--traffic", default="unique,repeated",
                        help="unique, repeated and/or unique_sympy (math: pairs only math-verify decides)")
    parser.add_argument("--workers", default="1", help="worker counts to run, e.g. 1,2")
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--windows", type=int, default=3, help="CPU is read per window; the median is reported")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pin", action="store_true", help="client on the last CPU, server on the others")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="server config overrides")
    args = parser.parse_args()
    started = time.time()
    loadavg = Path("/proc/loadavg").read_text().split()[:3]
    results = run_event_loop(run_all(args))
    print(json.dumps({"benchmark": "verify_cost", "cpus": len(os.sched_getaffinity(0)), "loadavg_before": loadavg,
                      "loadavg_after": Path("/proc/loadavg").read_text().split()[:3], "pin": args.pin,
                      "concurrency": args.concurrency, "targets_cpu_us": TARGETS_CPU_US,
                      "seconds": round(time.time() - started, 1), "results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
