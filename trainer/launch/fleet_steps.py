"""The environment fleet of a job: one ``serve`` step per fleet node, one ``gate`` before the trainer.

    python -m trainer.launch.fleet_steps serve --route-to HEAD_IP --ready-file RUN/fleet/NODE.json -- math mcqa k=v
    python -m trainer.launch.fleet_steps gate --ready-dir RUN/fleet --nodes n1 n2 --envs math mcqa \\
        --out JOB/fleet.json --timeout 600

``serve`` finds the address of this node that reaches the Ray head (the interface the other nodes
see) and runs ``envs serve NAMES --host ADDR --ready-file FILE``; SIGTERM or ``--stop-file`` reach
``envs serve``, which drains its servers and removes the file. Every
server binds port 0 and ``envs serve`` writes the URLs it actually got, so nothing picks a port
before binding it.

``gate`` holds the job until every fleet node has written its file and every URL answers
``GET /health`` with 200, then writes ``{env: [url, ...]}`` (write + rename) for the trainer.
Standard library only: both run inside a job's container too.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
import urllib.request
from pathlib import Path

from trainer.launch.model_steps import read_models
from trainer.launch.node_process import reachable_address, run_supervised


def judge_overrides(models_dir: Path | None, routes: list[str]) -> list[str]:
    """``env.judges.judge.base_url=URL`` for every ``env.judge=MODEL`` route, from the ready files
    of the job's model servers (trainer/launch/model_steps.py): the judges call what the job started."""
    if not routes:
        return []
    served = read_models(models_dir) if models_dir else {}
    pairs = []
    for route in routes:
        where, _, model = route.partition("=")
        env, _, judge = where.partition(".")
        if model not in served:
            raise SystemExit(f"fleet: no model server reported {model!r} (needed by {where}); served: {sorted(served)}")
        pairs.append(f"{env}.judges.{judge}.base_url={json.dumps(served[model])}")
    return pairs


def serve(route_to: str, ready_file: Path, stop_file: Path | None, names_and_overrides: list[str]) -> int:
    host = reachable_address(route_to)
    ready_file.parent.mkdir(parents=True, exist_ok=True)
    ready_file.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "servers.cli", "serve", *names_and_overrides, "--host", host,
            "--ready-file", str(ready_file)]
    print(f"fleet: {socket.gethostname()}: envs serve {' '.join(names_and_overrides)} on {host}", flush=True)
    return run_supervised(argv, stop_file)


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/health", timeout=5) as reply:
            return reply.status == 200
    except OSError:
        return False


def gate(ready_dir: Path, nodes: list[str], envs: list[str], out: Path, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    urls: dict[str, list[str]] = {}
    waiting = list(nodes)
    while waiting:
        for node in list(waiting):
            f = ready_dir / f"{node}.json"
            if f.is_file():
                reported = json.loads(f.read_text())["urls"]
                missing = [e for e in envs if e not in reported]
                if missing:
                    print(f"fleet gate: {node} serves {sorted(reported)}, not {missing}", file=sys.stderr)
                    return 1
                for env in envs:
                    urls.setdefault(env, []).append(reported[env])
                waiting.remove(node)
        if waiting and time.monotonic() > deadline:
            print(f"fleet gate: no ready file from {waiting} within {timeout_s:g}s", file=sys.stderr)
            return 1
        if waiting:
            time.sleep(0.2)
    pending = [u for us in urls.values() for u in us]
    while pending:
        pending = [u for u in pending if not _healthy(u)]
        if pending and time.monotonic() > deadline:
            print(f"fleet gate: {pending} did not answer /health 200 within {timeout_s:g}s", file=sys.stderr)
            return 1
        if pending:
            time.sleep(0.2)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(urls, indent=1) + "\n")
    os.replace(tmp, out)
    print(f"fleet gate: {sum(map(len, urls.values()))} server(s) healthy: "
          + ", ".join(f"{e} x{len(u)}" for e, u in urls.items()), flush=True)
    return 0


def read_fleet_file(path: str | Path) -> dict[str, list[str]]:
    """The gate's ``{env: [url, ...]}`` (a single URL string is accepted too); ValueError says what is wrong."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"fleet file {path} does not exist (a job's readiness gate writes it before the trainer starts)") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"fleet file {path} is not JSON: {exc}") from None
    if not isinstance(data, dict) or not all(
            isinstance(k, str) and (isinstance(v, str) or (isinstance(v, list) and v and all(isinstance(u, str) for u in v)))
            for k, v in data.items()):
        raise ValueError(f"fleet file {path} must map each environment to a URL or a list of URLs, "
                         f'like {{"math": ["http://10.0.0.5:40123"]}}')
    return {k: [v] if isinstance(v, str) else list(v) for k, v in data.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.launch.fleet_steps", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("serve")
    p.add_argument("--route-to", required=True, help="the Ray head's address: the servers bind the interface that reaches it")
    p.add_argument("--ready-file", type=Path, required=True)
    p.add_argument("--stop-file", type=Path, help="SIGTERM envs serve (drain, then exit) when this file appears")
    p.add_argument("--models-dir", type=Path, help="ready files of the job's model servers ({model, base_url} each)")
    p.add_argument("--judge", action="append", default=[], metavar="ENV.JUDGE=MODEL",
                   help="point ENV's judge JUDGE at the job's server of MODEL (repeatable)")
    p.add_argument("rest", nargs=argparse.REMAINDER, help="-- NAMES... [key=value ...] for envs serve")
    p = sub.add_parser("gate")
    p.add_argument("--ready-dir", type=Path, required=True)
    p.add_argument("--nodes", nargs="+", required=True)
    p.add_argument("--envs", nargs="+", required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    if args.what == "serve":
        rest = args.rest[1:] if args.rest[:1] == ["--"] else args.rest
        if not rest:
            parser.error("serve: no environment names after --")
        return serve(args.route_to, args.ready_file, args.stop_file, rest + judge_overrides(args.models_dir, args.judge))
    return gate(args.ready_dir, args.nodes, args.envs, args.out, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
