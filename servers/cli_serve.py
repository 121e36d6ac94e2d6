"""``envs serve``: one process per environment, supervised.

The parent never imports an environment: each child runs ``python -m servers.cli_serve``
(the child entry point at the bottom of this module), builds its environment, starts the
server and prints one ``VERIGYM-READY {json}`` line on stdout. The parent waits for that
line and for ``/health`` to answer 200, prints the name -> URL table, then supervises:

* a child that exits on its own is reported and the others are stopped (exit 1);
* SIGINT/SIGTERM to the parent forwards SIGTERM to every child, which stops accepting,
  drains in-flight verifications and exits 0; the parent exits 0 when all of them did.

While starting: a ``/health`` 503 whose environment check carries ``fatal`` (its start-up
check found it cannot work here: inherited limits, a failing sandbox canary) stops the
start at once with that reason; any other 503 is printed after a few seconds and waited
for. SIGINT/SIGTERM during the start stop it within seconds (children killed after a short
grace), print what each environment was waiting for, and exit 128 + the signal.

``spawn_servers`` is also what ``envs bench`` and ``benchmarks/`` use to get a server in a
separate process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servers.cpu_pool import usable_cpus
from servers.process_budget import fork_failure_hint

READY_MARK = "VERIGYM-READY "


class ServeError(RuntimeError):
    pass


@dataclass
class Child:
    name: str
    process: asyncio.subprocess.Process
    url: str | None = None
    output_task: asyncio.Task | None = None
    ready: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())


def split_overrides(names: list[str], pairs: list[str]) -> dict[str, list[str]]:
    """``key=v`` applies to every named environment, ``NAME.key=v`` only to NAME."""
    per_env: dict[str, list[str]] = {name: [] for name in names}
    for pair in pairs:
        if "=" not in pair:
            raise ServeError(f"override {pair!r} is not key=value")
        key = pair.split("=", 1)[0]
        head, _, rest = key.partition(".")
        if rest and head in per_env:
            per_env[head].append(pair[len(head) + 1:])
        else:
            for name in names:
                per_env[name].append(pair)
    return per_env


async def _pump_output(child: Child, echo: bool) -> None:
    """Read the child's stdout: catch the ready line, pass everything else through."""
    assert child.process.stdout is not None
    async for raw in child.process.stdout:
        line = raw.decode(errors="replace").rstrip("\n")
        if line.startswith(READY_MARK) and not child.ready.done():
            child.ready.set_result(json.loads(line[len(READY_MARK):]))
        elif echo:
            print(f"[{child.name}] {line}", file=sys.stderr, flush=True)
    if not child.ready.done():
        child.ready.set_exception(ServeError(f"{child.name}: server exited before it was ready "
                                             f"(exit code {await child.process.wait()}); see its log above"))


# A 503 that lasts this long is printed (once) while the start goes on waiting.
_SAY_WAITING_AFTER_S = 5.0
# Children of a start that is abandoned (signal, fatal health) get this long after SIGTERM.
_ABORT_GRACE_S = 5.0


def _environment_check(body: str) -> dict:
    try:
        env_check = json.loads(body).get("checks", {}).get("environment", {})
    except (ValueError, AttributeError):
        return {}
    return env_check if isinstance(env_check, dict) else {}


def _fatal_reason(body: str) -> str | None:
    """The ``fatal`` reason of a 503 /health body (the environment cannot work here), if any."""
    fatal = _environment_check(body).get("fatal")
    return str(fatal) if fatal else None


def _not_ready_reason(status: int, body: str) -> str:
    """What to show of a /health that is not 200: the environment's one-line error when it has one."""
    error = _environment_check(body).get("error")
    return f"{status}: {error}" if error else f"{status} {body}"


async def _wait_healthy(url: str, timeout_s: float, name: str = "", progress: dict[str, str] | None = None,
                        echo: bool = False) -> None:
    loop = asyncio.get_running_loop()
    start = loop.time()
    deadline = start + timeout_s
    last, said = "no answer", False
    import aiohttp  # the parent only: a server child never imports the HTTP client

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:
        while loop.time() < deadline:
            try:
                async with http.get(url + "/health") as r:
                    if r.status == 200:
                        return
                    body = await r.text()
                    fatal = _fatal_reason(body) if r.status == 503 else None
                    if fatal:
                        raise ServeError(f"{name or url}: /health 503, cannot work here: {fatal}")
                    last = _not_ready_reason(r.status, body)
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                last = repr(exc)
            if progress is not None:
                progress[name] = f"waiting for {url}/health to answer 200 (last: {last[:300]})"
            if echo and not said and loop.time() - start > _SAY_WAITING_AFTER_S:
                said = True
                print(f"envs serve: {name or url} not ready yet: /health {last[:500]}", file=sys.stderr, flush=True)
            await asyncio.sleep(0.1)
    raise ServeError(f"{url}/health did not answer 200 within {timeout_s:g}s: {last[:500]}")


async def spawn_servers(names: list[str], *, host: str = "127.0.0.1", port: int | None = None,
                        config_file: str | None = None, overrides: list[str] | None = None,
                        ready_timeout_s: float = 180.0, echo_output: bool = True,
                        log_level: str = "WARNING", progress: dict[str, str] | None = None,
                        workers: int = 1) -> list[Child]:
    """Start one server per name (``workers`` processes on its port); return when all answer ``/health`` 200.

    ``progress`` (optional) is kept up to date with what each environment is waiting for.
    A ``fatal`` 503 raises :class:`ServeError` at once; on any failure or cancellation every
    child is stopped (SIGKILL after a few seconds) before this returns."""
    per_env = split_overrides(names, overrides or [])
    children: list[Child] = []
    progress = progress if progress is not None else {}
    try:
        for i, name in enumerate(names):
            # Overrides right after the name: argparse does not take positionals after options.
            cmd = [sys.executable, "-m", "servers.cli_serve", name, *per_env[name], "--host", host,
                   "--port", str(0 if port is None else port + i), "--log-level", log_level, "--workers", str(workers)]
            if config_file:
                cmd += ["--config", config_file]
            try:
                process = await asyncio.create_subprocess_exec(*cmd, stdout=asyncio.subprocess.PIPE,
                                                               stdin=asyncio.subprocess.DEVNULL)
            except OSError as exc:
                raise ServeError(f"{name}: cannot work here: its server process could not be started "
                                 f"({exc.strerror or exc}){fork_failure_hint(exc.errno)}") from None
            child = Child(name, process)
            child.output_task = asyncio.create_task(_pump_output(child, echo_output))
            children.append(child)
            progress[name] = "starting (set-up and start-up checks; no address yet)"
        for child in children:
            try:
                info = await asyncio.wait_for(asyncio.shield(child.ready), ready_timeout_s)
            except asyncio.TimeoutError:
                raise ServeError(f"{child.name}: not ready after {ready_timeout_s:g}s") from None
            child.url = info["url"]
            await _wait_healthy(child.url, ready_timeout_s, child.name, progress, echo_output)
            progress[child.name] = f"ready at {child.url}"
    except BaseException:
        await stop_servers(children, timeout_s=_ABORT_GRACE_S)
        raise
    return children


async def stop_servers(children: list[Child], timeout_s: float = 40.0) -> dict[str, int]:
    """SIGTERM every child (drain + exit), SIGKILL whatever outlives ``timeout_s``. Returns exit codes."""
    for child in children:
        if child.process.returncode is None:
            child.process.send_signal(signal.SIGTERM)
    codes: dict[str, int] = {}
    for child in children:
        try:
            codes[child.name] = await asyncio.wait_for(child.process.wait(), timeout_s)
        except asyncio.TimeoutError:
            child.process.kill()
            codes[child.name] = await child.process.wait()
        if child.output_task is not None:
            await asyncio.gather(child.output_task, return_exceptions=True)
        if child.ready.done() and not child.ready.cancelled():
            child.ready.exception()  # retrieved: a child stopped before ready is reported elsewhere
    return codes


def _print_table(children: list[Child]) -> None:
    width = max(len("environment"), *(len(c.name) for c in children))
    print(f"{'environment':<{width}}  url", flush=True)
    for child in children:
        print(f"{child.name:<{width}}  {child.url}", flush=True)


async def serve_main(names: list[str], *, host: str, port: int | None, config_file: str | None,
                     overrides: list[str], ready_file: str | None, workers: int | None = None) -> int:
    stop = asyncio.Event()
    received: list[int] = []
    loop = asyncio.get_running_loop()

    def on_signal(sig: int) -> None:
        received.append(sig)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    progress: dict[str, str] = {}
    starting = asyncio.create_task(spawn_servers(names, host=host, port=port, config_file=config_file,
                                                 overrides=overrides, progress=progress,
                                                 workers=workers or usable_cpus()))
    stop_task = asyncio.create_task(stop.wait())
    await asyncio.wait([starting, stop_task], return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():
        # A signal during the start (a server that never becomes healthy included): stop now.
        sig = received[0]
        print(f"envs serve: {signal.Signals(sig).name} received while starting; stopping. Where each "
              "environment was:", file=sys.stderr, flush=True)
        for name in names:
            print(f"  {name}: {progress.get(name, 'not started')}", file=sys.stderr, flush=True)
        starting.cancel()
        await asyncio.gather(starting, return_exceptions=True)
        return 128 + sig
    try:
        children = starting.result()
    except ServeError as exc:
        stop_task.cancel()
        print(f"envs serve: {exc}", file=sys.stderr)
        return 1
    ready = {"urls": {c.name: c.url for c in children}, "pid": os.getpid(),
             "pids": {c.name: c.process.pid for c in children}}
    _print_table(children)
    # One machine-readable line so scripts (and the trainer) can find the URLs from stdout.
    print(READY_MARK + json.dumps(ready), flush=True)
    if ready_file:
        # Written whole then renamed: a reader polling for the file never sees half of it.
        tmp = Path(ready_file).with_suffix(".tmp")
        tmp.write_text(json.dumps(ready) + "\n")
        tmp.replace(ready_file)

    waits = {asyncio.create_task(c.process.wait()): c for c in children}
    done, _ = await asyncio.wait([stop_task, *waits], return_when=asyncio.FIRST_COMPLETED)
    died = [waits[t] for t in done if t in waits]
    for child in died:
        print(f"envs serve: {child.name} ({child.url}) exited unexpectedly with code {child.process.returncode}; "
              "stopping the others", file=sys.stderr, flush=True)
    stop_task.cancel()
    codes = await stop_servers(children)
    if ready_file:
        Path(ready_file).unlink(missing_ok=True)
    if died:
        return 1
    bad = {name: code for name, code in codes.items() if code != 0}
    if bad:
        print(f"envs serve: unclean exit: {bad}", file=sys.stderr)
        return 1
    print("envs serve: all servers stopped cleanly", file=sys.stderr, flush=True)
    return 0


# ---- the child: one environment, one process ----------------------------------------------
def _child_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m servers.cli_serve",
                                     description="Serve ONE environment (what `envs serve` runs per child).")
    parser.add_argument("name")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--config")
    parser.add_argument("--log-level", default="WARNING")
    parser.add_argument("--workers", type=int, default=1, help="server processes on the one port (servers/prefork.py)")
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format=f"%(asctime)s {args.name} %(levelname)s %(message)s")
    # The sandbox's start-up report (backend, interpreter, inherited and effective limits,
    # canary) is one line per server: always shown, whatever the log level.
    logging.getLogger("verigym.sandbox").setLevel(logging.INFO)

    from servers import registry
    from servers.app import run_event_loop, serve_until_signalled

    try:
        env = registry.instantiate(args.name, config_file=args.config,
                                   overrides=registry.parse_overrides(args.overrides))
    except (registry.UnknownEnvironment, registry.ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    def on_ready(url: str) -> None:
        print(READY_MARK + json.dumps({"name": args.name, "url": url, "pid": os.getpid()}), flush=True)

    env.warm_up()  # once, before the workers fork: they share it (servers/environment.py)
    if env.uses_cpu_pool:
        # Before any event loop or worker fork: CPU-pool workers are forked from this zygote with
        # the preload imported once (servers/cpu_zygote.py), not each from a fresh interpreter.
        from servers.cpu_zygote import start_zygote

        start_zygote(env.cpu_pool_preload)

    if args.workers > 1:
        from servers.prefork import Prefork

        return Prefork(env, args.host, args.port, args.workers, cores=usable_cpus()).run(on_ready)
    run_event_loop(serve_until_signalled(env, args.host, args.port, on_ready=on_ready))
    return 0


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
