"""What one terminal episode's verification costs: seed a session, run one command, verify.

    python benchmarks/terminal_verify.py                  # process backend, 20 episodes
    python benchmarks/terminal_verify.py -n 40 --check python

Each episode is /seed_session (sandbox + setup), one /exec in the persistent shell, and /verify
(ending the session's processes, the checker upload, the check through its prelude, teardown),
in-process and sequential (the per-episode cost, not throughput). Reports seconds per episode and
per verify, and the CPU the server and its sandboxes used per episode (this process's own CPU plus
that of its reaped children: bwrap, the shell, the check), which does not depend on other work on
the machine as much as wall time does. ``--check python`` uses a Python checker (the guard's
``sitecustomize`` runs), ``sh`` a shell one. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from environments.terminal.verifier import ExecArgs, TerminalRow  # noqa: E402
from servers import registry  # noqa: E402
from servers.wire import ResponseObject, response_from_text  # noqa: E402

CHECKS = {"sh": ("sh check.sh", {"check.sh": 'test "$(cat out.txt)" = 42\n'}),
          "python": ("python3 check.py", {"check.py": "import sys\nsys.exit(0 if open('out.txt').read().strip() == '42' else 1)\n"})}


def cpu_now() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


async def run(n: int, check: str) -> dict:
    command, files = CHECKS[check]
    row = {"responses_create_params": {"input": [{"role": "user", "content": "bench"}]},
           "setup_files": {"in.txt": "6 7\n"}, "check_command": command, "check_files": files}
    parsed, done = TerminalRow.model_validate(row), ResponseObject.model_validate(response_from_text("done"))
    env = registry.instantiate("terminal")
    await env.setup()
    episodes, verifies, cpus = [], [], []
    try:
        for _ in range(n + 2):  # the first two warm up (interpreter caches, uid leases)
            c0, t0 = cpu_now(), time.monotonic()
            session = await env.seed_session(row)
            await env.exec(session, ExecArgs(command="set -- $(cat in.txt); echo $(($1 * $2)) > out.txt"))
            t1 = time.monotonic()
            verdict = await env.verify(parsed, done, session)
            await env.close_session(session)
            t2 = time.monotonic()
            if verdict.reward != 1.0:
                raise SystemExit(f"a solved episode scored {verdict.reward}: {verdict.extras}")
            episodes.append(t2 - t0)
            verifies.append(t2 - t1)
            cpus.append(cpu_now() - c0)
    finally:
        await env.close()
    episodes, verifies, cpus = episodes[2:], verifies[2:], cpus[2:]
    return {"benchmark": "terminal_verify", "backend": env.config.sandbox_backend, "check": check, "episodes": n,
            "seconds_per_episode": round(statistics.fmean(episodes), 4),
            "seconds_per_verify": round(statistics.fmean(verifies), 4),
            "p50_verify_s": round(statistics.median(verifies), 4),
            "cpu_s_per_episode": round(statistics.fmean(cpus), 4), "loadavg": os.getloadavg()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=20, help="episodes (after 2 warm-up ones)")
    parser.add_argument("--check", choices=sorted(CHECKS), default="sh")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args.n, args.check))))


if __name__ == "__main__":
    main()
