"""The judge / GenRM model servers of a job: one ``serve`` step per server the job starts, one
``check`` per external URL, then the fleet gets their URLs.

    python -m trainer.launch.model_steps serve --model tiny_genrm --route-to HEAD_IP --ready-file RUN/models/0.json \\
        -- python -m servers.cli model serve /ckpt/tiny_genrm --served-model-name tiny_genrm --host {host} --port 0 \\
           --ready-file {ready_file}
    python -m trainer.launch.model_steps serve --model Qwen/Qwen3-235B-A22B-Instruct-2507-FP8 ... -- vllm serve ... --port {port}
    python -m trainer.launch.model_steps check --model M --url https://judge.example/v1 --ready-file RUN/models/1.json

``serve`` fills in ``{host}`` (this node's address on the interface that reaches the Ray head),
``{ready_file}`` (the child reports the URL it bound, as ``envs model serve --port 0`` does) or
``{port}`` (a free port, for ``vllm serve``, which cannot report one), starts the command, and
writes ``{"model", "base_url"}`` to the ready file only once ``GET /health`` is 200 **and**
``GET /v1/models`` lists the model: a server that answers for another model is not ready, and
that is final (the step stops it and exits 3 with one line saying what it serves instead).
``check`` does the same for a URL nothing starts. Standard library only (runs inside a job's
container too).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from trainer.launch.node_process import reachable_address, run_supervised

WRONG_MODEL = 3


def _write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data) + "\n")
    os.replace(tmp, path)


def probe(base_url: str, model: str, timeout_s: float = 5.0) -> tuple[str, str]:
    """``("ready", "")``, ``("waiting", why)`` (not up yet) or ``("wrong", why)`` (up, serving another model)."""
    root = base_url.rstrip("/")
    root = root[: -len("/v1")] if root.endswith("/v1") else root
    try:
        with urllib.request.urlopen(root + "/health", timeout=timeout_s) as reply:
            if reply.status != 200:
                return "waiting", f"{root}/health answered {reply.status}"
        with urllib.request.urlopen(base_url.rstrip("/") + "/models", timeout=timeout_s) as reply:
            data = json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return "waiting", f"HTTP {exc.code}"
    except (OSError, ValueError) as exc:
        return "waiting", str(getattr(exc, "reason", exc))
    ids = [str(m.get("id")) for m in data.get("data", []) if isinstance(m, dict)] if isinstance(data, dict) else []
    if model in ids:
        return "ready", ""
    return "wrong", f"{base_url} serves {ids}, not {model!r}"


def _free_port(host: str) -> int:
    # vllm serve takes a fixed --port and reports none back: the one place a port is chosen before
    # it is bound. The readiness check below catches a port someone else took in between (the
    # server that answers there does not serve this model, or the child exits on the bind error).
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def serve(model: str, route_to: str, ready_file: Path, stop_file: Path | None, argv: list[str], timeout_s: float) -> int:
    host = reachable_address(route_to)
    ready_file.unlink(missing_ok=True)
    child_ready = ready_file.with_name("child-" + ready_file.name)
    child_ready.unlink(missing_ok=True)
    port = _free_port(host) if any("{port}" in a for a in argv) else 0
    argv = [a.replace("{host}", host).replace("{port}", str(port)).replace("{ready_file}", str(child_ready)) for a in argv]
    deadline = time.monotonic() + timeout_s
    state = {"ready": False, "said": ""}

    def check() -> int | None:
        if state["ready"]:
            return None
        if port:
            base_url = f"http://{host}:{port}/v1"
        elif child_ready.is_file():
            try:
                base_url = json.loads(child_ready.read_text())["base_url"]
            except (ValueError, KeyError):
                return None
        else:
            base_url = ""
        verdict, why = probe(base_url, model) if base_url else ("waiting", "no address reported yet")
        if verdict == "ready":
            _write(ready_file, {"model": model, "base_url": base_url})
            print(f"model server: {model} ready at {base_url}", flush=True)
            state["ready"] = True
            return None
        if verdict == "wrong":
            print(f"model server: {why}", file=sys.stderr, flush=True)
            return WRONG_MODEL
        if time.monotonic() > deadline:
            print(f"model server: {model} not ready within {timeout_s:g}s ({why})", file=sys.stderr, flush=True)
            return 1
        return None

    print(f"model server: {socket.gethostname()}: {' '.join(argv)}", flush=True)
    return run_supervised(argv, stop_file, on_poll=check, poll_s=1.0)


def check_external(model: str, url: str, ready_file: Path, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    while True:
        verdict, why = probe(url, model)
        if verdict == "ready":
            _write(ready_file, {"model": model, "base_url": url})
            print(f"model server: {model} served at {url} (external)", flush=True)
            return 0
        if verdict == "wrong":
            print(f"model server: {why}", file=sys.stderr, flush=True)
            return WRONG_MODEL
        if time.monotonic() > deadline:
            print(f"model server: {model} not served at {url} within {timeout_s:g}s ({why})", file=sys.stderr, flush=True)
            return 1
        time.sleep(2.0)


def read_models(path: Path) -> dict[str, str]:
    """``{model: base_url}`` from the ready files of a job's model servers (``RUN/models/*.json``)."""
    out = {}
    for f in sorted(path.glob("[0-9]*.json")):  # child-N.json: what the serving command itself reported
        data = json.loads(f.read_text())
        out[data["model"]] = data["base_url"]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.launch.model_steps", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("serve")
    p.add_argument("--model", required=True, help="the served model name the judges send")
    p.add_argument("--route-to", required=True, help="the Ray head's address: the server binds the interface that reaches it")
    p.add_argument("--ready-file", type=Path, required=True)
    p.add_argument("--stop-file", type=Path)
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds to become ready (a large model loads for minutes)")
    p.add_argument("rest", nargs=argparse.REMAINDER, help="-- the serving command ({host}, {port}, {ready_file})")
    p = sub.add_parser("check")
    p.add_argument("--model", required=True)
    p.add_argument("--url", required=True, help="OpenAI-compatible API root, e.g. http://10.0.0.5:8000/v1")
    p.add_argument("--ready-file", type=Path, required=True)
    p.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    if args.what == "check":
        return check_external(args.model, args.url, args.ready_file, args.timeout)
    rest = args.rest[1:] if args.rest[:1] == ["--"] else args.rest
    if not rest:
        parser.error("serve: no command after --")
    return serve(args.model, args.route_to, args.ready_file, args.stop_file, rest, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
