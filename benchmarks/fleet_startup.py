"""How long the whole fleet takes to be ready: ``envs serve`` of every environment that needs no
external service (no judge model, container engine or Lean toolchain; the process sandbox is
local), from the command to every ``/health`` answering 200.

    python benchmarks/fleet_startup.py                 # default --workers (one per usable CPU)
    python benchmarks/fleet_startup.py --workers 1 --envs math,mcqa

The servers get consecutive ports from ``--port``; this script polls each ``/health`` from the
moment it runs the command and records when each first answers 200 (``ready_s`` per
environment), and when ``envs serve`` printed its ready line (``all_ready_s``: it waits for
every /health itself). ``cpu_s_to_ready`` is the CPU time the whole process tree spent until
then: the load-robust figure (on an idle machine ``all_ready_s`` is about it divided by the
cores). Prints ONE JSON object; issue 17's target is ``all_ready_s`` <= 5.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

sys.path.insert(0, str(REPO / "benchmarks"))

from servers import registry  # noqa: E402
from verify_cost import tree_cpu_s  # noqa: E402

LOCAL_NEEDS = {"sandbox"}  # a bubblewrap sandbox on this machine is no external service
TARGET_S = 5.0


def local_environments() -> list[str]:
    names = []
    for name, entry in sorted(registry.discover().items()):
        if set(entry.load_class().needs) <= LOCAL_NEEDS:
            names.append(name)
    return names


def poll_health(url: str, started: float, out: dict[str, float], key: str, deadline: float) -> None:
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as reply:
                if reply.status == 200:
                    out[key] = round(time.monotonic() - started, 3)
                    return
        except OSError:
            pass
        time.sleep(0.05)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", help="comma-separated names (default: every environment needing no external service)")
    parser.add_argument("--workers", type=int, help="envs serve --workers (default: its own default)")
    parser.add_argument("--port", type=int, default=19400)
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args()
    names = args.envs.split(",") if args.envs else local_environments()
    cmd = [sys.executable, "-m", "servers.cli", "serve", *names, "--port", str(args.port)]
    if args.workers:
        cmd += ["--workers", str(args.workers)]
    loadavg = Path("/proc/loadavg").read_text().split()[:3]
    ready: dict[str, float] = {}
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = started + args.timeout
    pollers = [threading.Thread(target=poll_health, args=(f"http://127.0.0.1:{args.port + i}", started, ready, name,
                                                          deadline), daemon=True) for i, name in enumerate(names)]
    for thread in pollers:
        thread.start()
    all_ready, cpu_to_ready, stderr_tail = None, None, ""
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("VERIGYM-READY "):
            all_ready = round(time.monotonic() - started, 3)
            cpu_to_ready = round(tree_cpu_s(proc.pid), 2)
            break
    for thread in pollers:
        thread.join(max(0.0, deadline - time.monotonic()))
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    if all_ready is None:
        stderr_tail = err[-2000:]
    result = {"benchmark": "fleet_startup", "envs": names, "workers": args.workers or len(os.sched_getaffinity(0)),
              "cpus": len(os.sched_getaffinity(0)), "loadavg_before": loadavg, "all_ready_s": all_ready,
              "cpu_s_to_ready": cpu_to_ready,
              "ready_s": {name: ready.get(name) for name in names}, "slowest": max(ready, key=ready.get) if ready else None,
              "target_s": TARGET_S, "meets_target": all_ready is not None and all_ready <= TARGET_S}
    if stderr_tail:
        result["stderr_tail"] = stderr_tail
    print(json.dumps(result))
    return 0 if all_ready is not None else 1


if __name__ == "__main__":
    sys.exit(main())
