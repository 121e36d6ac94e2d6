"""Run one benchmark and keep what it printed: ``benchmarks/results/NAME.json``.

    python benchmarks/record.py NAME -- python benchmarks/env_throughput.py --env mcqa --requests 20000

Every script in ``benchmarks/`` prints one JSON object; this runs the command, takes that object
(the last JSON object on its stdout) and writes it with the command, the date and the machine
(CPUs, memory, CPU model, the load average before and after, Python, kernel). The figures in the
README and docs/benchmarks.md are rendered from these files (``python benchmarks/report.py``),
and a test keeps them equal: a figure is a recorded run, or it is not there.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def machine() -> dict:
    memory_kb = next((int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                      if line.startswith("MemTotal:")), 0)
    cpu_model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("model name")), platform.processor())
    return {"cpus": os.cpu_count(), "memory_gib": round(memory_kb / 2**20, 1), "cpu_model": cpu_model,
            "python": platform.python_version(), "kernel": platform.release(), "gpu": _gpu()}


def _gpu() -> str | None:
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None


def last_json_object(stdout: str) -> dict:
    """The benchmark's object: the last line that parses as one, or the whole text (indented output)."""
    for line in reversed(stdout.strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    start = stdout.find("{")
    value = json.loads(stdout[start:]) if start >= 0 else None
    if not isinstance(value, dict):
        raise ValueError("the command printed no JSON object")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", help="the record's name: benchmarks/results/NAME.json")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the benchmark command")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the benchmark command after --")
    load_before = [round(x, 2) for x in os.getloadavg()]
    started = time.time()
    done = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    if done.returncode != 0:
        print(f"record: {shlex.join(command)} exited {done.returncode}; nothing recorded", file=sys.stderr)
        return done.returncode
    try:
        result = last_json_object(done.stdout)
    except ValueError as exc:
        print(f"record: {shlex.join(command)}: {exc}; nothing recorded", file=sys.stderr)
        return 1
    record = {"name": args.name, "command": shlex.join(["python" if c == sys.executable else c for c in command]),
              "date": datetime.datetime.fromtimestamp(started, datetime.timezone.utc).strftime("%Y-%m-%d"),
              "seconds": round(time.time() - started, 1),
              "machine": {**machine(), "load_average_before": load_before,
                          "load_average_after": [round(x, 2) for x in os.getloadavg()]},
              "result": result}
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{args.name}.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(f"recorded {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
