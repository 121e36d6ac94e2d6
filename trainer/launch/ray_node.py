"""One Ray node of a job, as a foreground process the job script can stop with SIGTERM.

    python -m trainer.launch.ray_node head --temp-dir /tmp/verigym-ray-J-0 --address-file RUN/ray_address
    python -m trainer.launch.ray_node worker --address HOST:PORT --temp-dir /tmp/verigym-ray-J-1
    python -m trainer.launch.ray_node wait --nodes 2 --timeout 600      # uses $RAY_ADDRESS

``head`` runs ``ray start --head --port=0 --block``: Ray's GCS binds a free port itself and Ray
writes the address it got to ``<temp-dir>/ray_current_cluster``; this copies it (write + rename)
to the address file on the shared job folder, where the job script and the workers read it. No
port is chosen before it is bound. Two ports Ray would otherwise take at fixed numbers get free
ones (:func:`free_port`), so that two jobs on one machine do not meet there: the Ray Client server
(10001; gRPC binds it with SO_REUSEPORT, so a second job's server binds it too and the kernel
splits connections between the two clusters) and the dashboard agent's HTTP port (52365; the
second agent gives up on it after six tries). SIGTERM/SIGINT (or ``--stop-file`` appearing) are passed to ``ray start --block``,
which drains and stops the node's Ray processes (and only this node's: never ``ray stop``, which kills
every Ray on the machine). Standard library only: it also runs inside a job's container.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from pathlib import Path

from trainer.launch.node_process import run_supervised


# `ray start --block` answers SIGTERM by draining the node and exiting 1 (ray/_private/node.py,
# sigterm_handler): the status of a stop we asked for, not a failure.
RAY_STOPPED_STATUS = frozenset({1})


def _ray_start_argv(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "ray.scripts.scripts", "start", "--block", "--disable-usage-stats",
            f"--dashboard-agent-listen-port={free_port()}", *args]


def free_port() -> int:
    """A TCP port nothing is bound to now (the kernel's pick for port 0), for the ports Ray only
    takes as numbers: a probe, not a reservation (the window until Ray binds it is short)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def default_num_cpus() -> int:
    """The CPUs this process may use, at least 4: the built-in engine asks one CPU per trainer and
    generator actor and lets torch threads decide real use, as its local Ray does (trainer/grpo/actors.py)."""
    return max(len(os.sched_getaffinity(0)), 4)


def _resources(text: str | None) -> list[str]:
    if not text:
        return []
    json.loads(text)  # fail here, with the text, rather than inside ray start
    return [f"--resources={text}"]


def head(temp_dir: Path, address_file: Path, stop_file: Path | None, extra: list[str]) -> int:
    temp_dir.mkdir(parents=True, exist_ok=True)
    written = temp_dir / "ray_current_cluster"
    written.unlink(missing_ok=True)
    reported = False

    def report() -> None:  # Ray writes the address its GCS bound; copy it where the job reads it
        nonlocal reported
        if not reported and written.is_file() and written.read_text().strip():
            tmp = address_file.with_suffix(".tmp")
            tmp.write_text(written.read_text().strip() + "\n")
            os.replace(tmp, address_file)
            print(f"ray_node: head at {address_file.read_text().strip()}", flush=True)
            reported = True

    argv = _ray_start_argv(["--head", "--port=0", f"--ray-client-server-port={free_port()}", f"--temp-dir={temp_dir}",
                            "--include-dashboard=false", *extra])
    return run_supervised(argv, stop_file, on_poll=report, stopped_status=RAY_STOPPED_STATUS)


def worker(address: str, temp_dir: Path, stop_file: Path | None, extra: list[str]) -> int:
    temp_dir.mkdir(parents=True, exist_ok=True)
    return run_supervised(_ray_start_argv([f"--address={address}", f"--temp-dir={temp_dir}", *extra]), stop_file,
                          stopped_status=RAY_STOPPED_STATUS)


def wait_for_nodes(nodes: int, timeout_s: float) -> int:
    import ray

    ray.init(address=os.environ.get("RAY_ADDRESS") or "auto", log_to_driver=False, configure_logging=False)
    deadline = time.monotonic() + timeout_s
    alive = 0
    while time.monotonic() < deadline:
        alive = sum(1 for n in ray.nodes() if n.get("Alive"))
        if alive >= nodes:
            print(f"ray_node: {alive} Ray node(s) up: {ray.cluster_resources()}", flush=True)
            return 0
        time.sleep(1)
    print(f"ray_node: only {alive} of {nodes} Ray nodes joined within {timeout_s:g}s", file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.launch.ray_node", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="role", required=True)
    for role in ("head", "worker"):
        p = sub.add_parser(role)
        p.add_argument("--temp-dir", type=Path, required=True, help="this node's Ray folder (short: socket paths)")
        p.add_argument("--resources", help='custom resources as JSON, e.g. {"verigym_generator": 1}')
        p.add_argument("--num-cpus", type=int, help="logical CPUs Ray schedules on (default: this node's, at least 4)")
        p.add_argument("--stop-file", type=Path, help="stop this node (SIGTERM to ray start) when this file appears")
        if role == "head":
            p.add_argument("--address-file", type=Path, required=True, help="where the bound head address is written")
        else:
            p.add_argument("--address", required=True, help="the head's HOST:PORT")
    p = sub.add_parser("wait")
    p.add_argument("--nodes", type=int, required=True)
    p.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    if args.role == "wait":
        return wait_for_nodes(args.nodes, args.timeout)
    extra = _resources(args.resources) + [f"--num-cpus={args.num_cpus if args.num_cpus is not None else default_num_cpus()}"]
    if args.role == "head":
        return head(args.temp_dir, args.address_file, args.stop_file, extra)
    return worker(args.address, args.temp_dir, args.stop_file, extra)


if __name__ == "__main__":
    sys.exit(main())
