"""The ``envs`` command: list, serve, verify, check, scaffold, benchmark, generate, prepare.

Exit codes: 0 ok, 1 a check/serve failed, 2 bad usage (unknown environment, bad config).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable

EPILOG = """examples:
  envs list
  envs info swe --json                        # agent names, row schema, tools (as on /info)
  envs validate --env swe --data rows.jsonl   # rows checked as /verify parses them
  envs serve math mcqa --port 8000            # math on :8000, mcqa on :8001
  envs serve math verify_timeout_s=30 mcqa.max_concurrent=64
  envs verify math --data rows.jsonl --output scored.jsonl
  envs verify math --data rows.jsonl --responses answers.jsonl --url http://127.0.0.1:8000
  envs check math --http
  envs new my_env && envs check my_env
  envs bench mcqa --concurrency 64 --requests 20000 --json
  envs generate reasoning_gym --tasks leg_counting --size 100 --seed 1 --output rows.jsonl
  envs prepare swe --data rows.jsonl
  envs model serve tiny --port 8100           # OpenAI-compatible model server (judges, agents)

Environments are folders under environments/; add more folders with --env-path DIR or
VERIGYM_ENV_PATH. Docs: docs/adding-an-environment.md, docs/protocol.md.
"""


class UsageError(Exception):
    """Bad input from the user: printed without a traceback, exit 2."""


def _load(name: str) -> tuple[Any, type]:
    from servers import registry

    try:
        entry = registry.get(name)
    except registry.UnknownEnvironment as exc:
        raise UsageError(str(exc)) from None
    return entry, entry.load_class()


def _overrides(pairs: list[str]) -> dict[str, Any]:
    from servers.config_loader import ConfigError, parse_overrides

    try:
        return parse_overrides(pairs)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


# ---- list --------------------------------------------------------------------------------
def cmd_list(args: argparse.Namespace) -> int:
    from servers import registry

    rows = []
    for name, entry in sorted(registry.discover().items()):
        where = {"folder": str(entry.folder), "shadowed": [str(f) for f in entry.shadowed]}
        try:
            cls = entry.load_class()
            rows.append({"name": name, "domain": cls.domain, "summary": cls.summary, "needs": list(cls.needs),
                         "ok": True, **where})
        except Exception as exc:  # noqa: BLE001 - one broken environment must not hide the others
            rows.append({"name": name, "domain": "BROKEN", "summary": f"{type(exc).__name__}: {exc}",
                         "needs": [], "ok": False, **where})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no environments found (looked in environments/ and VERIGYM_ENV_PATH)")
        return 0
    widths = [max(len(h), *(len(str(r[k])) for r in rows)) for h, k in (("name", "name"), ("domain", "domain"))]
    print(f"{'name':<{widths[0]}}  {'domain':<{widths[1]}}  {'needs':<16}  summary")
    for r in rows:
        needs = ",".join(r["needs"]) or "-"
        print(f"{r['name']:<{widths[0]}}  {r['domain']:<{widths[1]}}  {needs:<16}  {r['summary']}")
    for r in rows:
        for ignored in r["shadowed"]:
            print(f"warning: {ignored} is ignored: environment {r['name']!r} comes from {r['folder']}")
    return 0


# ---- serve -------------------------------------------------------------------------------
def cmd_serve(args: argparse.Namespace) -> int:
    from servers import registry
    from servers.cli_serve import ServeError, serve_main, split_overrides

    for name in args.names:
        # Unknown names fail here, before any process starts. Only looked up, not imported: each
        # child imports its own environment (an import error is its start's error), and importing
        # all of them here first cost ~0.4 CPU-s before the first child started (issue 17).
        try:
            registry.get(name)
        except registry.UnknownEnvironment as exc:
            raise UsageError(str(exc)) from None
    if len(set(args.names)) != len(args.names):
        raise UsageError("each environment can be named once")
    try:
        split_overrides(args.names, args.overrides)
    except ServeError as exc:
        raise UsageError(str(exc)) from None
    if args.workers is not None and args.workers < 1:
        raise UsageError("--workers must be at least 1")
    return asyncio.run(serve_main(args.names, host=args.host, port=args.port, config_file=args.config,
                                  overrides=args.overrides, ready_file=args.ready_file, workers=args.workers))


# ---- verify ------------------------------------------------------------------------------
def cmd_verify(args: argparse.Namespace) -> int:
    from servers import registry
    from servers.cli_verify import print_summary, run_verify

    _load(args.name)
    for path in (args.data, args.responses):
        if path is not None and not path.is_file():
            raise UsageError(f"{path} does not exist")
    try:
        summary = run_verify(args.name, args.data, responses=args.responses, url=args.url, output=args.output,
                             config_file=args.config, overrides=_overrides(args.overrides),
                             concurrency=args.concurrency)
    except registry.ConfigError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        print(json.dumps(summary.as_dict(), indent=2))
    else:
        print_summary(summary)
    return 0


# ---- check -------------------------------------------------------------------------------
async def _check(name: str, http: bool) -> list[tuple[str, Any]]:
    from servers import registry
    from servers.examples import example_config, load_examples
    from servers.scripted_judge import example_judges

    entry = registry.get(name)
    rows = load_examples(entry.example_path)
    # A judged environment's rows run against a scripted judge (data/scripted_judge.yaml), the
    # test double of the judge model: the check needs no GPU and gives the same verdicts each run.
    # data/example_config.yaml (when present) holds the config the examples run under.
    async with example_judges(name, entry.load_class(), entry.folder) as judge_overrides:
        return await _check_rows(name, rows, http, {**example_config(entry.folder), **judge_overrides})


async def _check_rows(name: str, rows: list[Any], http: bool, overrides: dict[str, Any]) -> list[tuple[str, Any]]:
    from servers import registry
    from servers.examples import check_http, check_inprocess
    from servers.service import EnvService

    service = EnvService(registry.instantiate(name, overrides=overrides))
    await service.start()
    try:
        judge = ", judge: scripted (data/scripted_judge.yaml)" if overrides else ""
        runs = [(f"in-process{judge}", await check_inprocess(service, rows))]
    finally:
        await service.stop()
    if http:
        from servers.app import start_server
        from servers.client import EnvClient

        server = await start_server(registry.instantiate(name, overrides=overrides))
        try:
            async with EnvClient({name: server.url}, retries=1) as client:
                _, info = await client.get(name, "/info")
                runs.append((f"http {server.url}{judge}",
                             await check_http(client, name, rows, bool(info.get("stateful")))))
        finally:
            await server.stop()
    return runs


def cmd_check(args: argparse.Namespace) -> int:
    entry, _ = _load(args.name)
    if not entry.example_path.is_file():
        raise UsageError(f"{entry.example_path} does not exist: every environment needs example rows")
    failed = 0
    for mode, results in asyncio.run(_check(args.name, args.http)):
        print(f"{args.name} examples ({mode}):")
        for r in results:
            want = json.dumps(r.expected, sort_keys=True)
            print(f"  line {r.line:>4}  {'PASS' if r.ok else 'FAIL'}  expected {want}")
            for problem in r.problems:
                print(f"             {problem}")
        failed += sum(not r.ok for r in results)
        print(f"  {sum(r.ok for r in results)}/{len(results)} passed")
    return 1 if failed else 0


# ---- new ---------------------------------------------------------------------------------
def cmd_new(args: argparse.Namespace) -> int:
    from servers import registry
    from servers.scaffold import ScaffoldError, scaffold

    root = registry.builtin_root() if args.dir is None else args.dir
    try:
        folder = scaffold(args.name, root, domain=args.domain)
    except ScaffoldError as exc:
        raise UsageError(str(exc)) from None
    print(f"wrote {folder}/ (verifier.py, config.yaml, data/example.jsonl, README.md, __init__.py)")
    hint = "" if args.dir is None else f"--env-path {root} "
    print(f"next: envs {hint}check {args.name}   then   envs {hint}serve {args.name}")
    return 0


# ---- bench -------------------------------------------------------------------------------
def cmd_bench(args: argparse.Namespace) -> int:
    from servers.cli_bench import bench_rows, run_bench

    entry, _ = _load(args.name)
    if args.data is not None and not args.data.is_file():
        raise UsageError(f"{args.data} does not exist")
    rows = bench_rows(entry, args.data)
    result = asyncio.run(run_bench(args.name, rows, url=args.url, concurrency=args.concurrency,
                                   requests=args.requests, overrides=args.overrides, show_progress=not args.json))
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>12}: {value}")
    return 0 if not result["errors"] else 1


# ---- generate / prepare ------------------------------------------------------------------
def cmd_generate(args: argparse.Namespace) -> int:
    import orjson
    from tqdm import tqdm

    _, cls = _load(args.name)
    generate: Callable[..., Any] | None = getattr(cls, "generate", None)
    if generate is None:
        raise UsageError(f"environment {args.name!r} has no generate(): its rows come from a dataset, not a generator")
    tasks = [t for t in args.tasks.split(",") if t] if args.tasks else None
    # Written next to the target and renamed at the end: a bad option no longer leaves an
    # empty or half-written file where the rows should be.
    partial = Path(f"{args.output}.partial") if args.output else None
    out = partial.open("wb") if partial else sys.stdout.buffer
    written, finished = 0, False
    try:
        rows = generate(tasks=tasks, size=args.size, seed=args.seed, **_overrides(args.overrides))
        for row in tqdm(rows, total=args.size, desc=f"generate {args.name}", unit="row", disable=args.output is None):
            out.write(orjson.dumps(row) + b"\n")
            written += 1
        finished = True
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"{args.name}.generate: {exc}") from None
    finally:
        if partial:
            out.close()
            if finished:
                partial.replace(args.output)
            else:
                partial.unlink(missing_ok=True)
    if args.output:
        print(f"wrote {written} rows to {args.output}", file=sys.stderr)
    return 0


def cmd_prepare(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from servers import registry
    from servers.cli_verify import iter_jsonl

    entry, cls = _load(args.name)
    prepare = getattr(cls, "prepare", None)
    if prepare is None:
        print(f"{args.name}: nothing to prepare (the environment defines no prepare())")
        return 0
    try:
        config = registry.load_config(entry, cls, config_file=args.config, overrides=_overrides(args.overrides))
    except registry.ConfigError as exc:
        raise UsageError(str(exc)) from None
    rows, bad = [], []
    for line, row, err in iter_jsonl(args.data):
        (bad.append(f"line {line}: {err or 'not a JSON object'}") if err or not isinstance(row, dict)
         else rows.append(row))
    for problem in bad:
        print(f"skipped {problem}", file=sys.stderr)
    with tqdm(total=len(rows), desc=f"prepare {args.name}", unit="row") as progress:
        result = asyncio.run(prepare(config, rows, progress))
    if result is not None:
        print(json.dumps(result, indent=2, default=str))
    return 0


# ---- parser ------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="envs", description="Serve, test and benchmark verigym reward environments.",
                                     epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env-path", action="append", default=[], metavar="DIR",
                        help="extra folder of environments (like environments/); repeatable")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    raw = argparse.RawDescriptionHelpFormatter

    p = sub.add_parser("list", help="table of environments: name, domain, needs, what it verifies")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("serve", help="serve environments, one process each, until Ctrl-C/SIGTERM",
                       formatter_class=raw, epilog="examples:\n  envs serve math --port 8000\n"
                       "  envs serve math mcqa --port 8000 --ready-file urls.json   # :8000, :8001\n"
                       "  envs serve math verify_timeout_s=30 mcqa.max_concurrent=64\n\n"
                       "key=value applies to every named environment, NAME.key=value to one.")
    p.add_argument("names", nargs="+", metavar="NAME", help="environment names, then optional key=value overrides")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="port of the first environment, next ones +1; default: free ports")
    p.add_argument("--config", help="YAML config file ({key: v} or {NAME: {key: v}})")
    p.add_argument("--ready-file", help="write {\"urls\": {name: url}} here once all are healthy")
    p.add_argument("--workers", type=int, default=None, metavar="N",
                   help="server processes per environment, all on its one port (default: one per CPU this "
                        "process may use); the CPU pool is split over them; sessions follow their worker")
    p.set_defaults(func=cmd_serve, overrides=[])

    p = sub.add_parser("verify", help="score rows (+ responses) from a JSONL file, in-process or via --url",
                       formatter_class=raw, epilog="--responses lines are joined to --data lines by position; each is a "
                       "Responses object,\n{\"response\": {...}} or a JSON string of plain text.")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--data", type=Path, required=True, help="JSONL rows (NeMo-Gym format), each with 'response'")
    p.add_argument("--responses", type=Path, help="JSONL responses joined to the rows by line")
    p.add_argument("--url", help="score against this running server instead of in-process")
    p.add_argument("--output", type=Path, help="write one reply per row here (+ _line, _status)")
    p.add_argument("--config", help="config file (in-process only)")
    p.add_argument("--concurrency", type=int, default=16, help="verifications at once (default 16)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides (in-process only)")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("check", help="run the environment's data/example.jsonl and report pass/fail per row "
                                     "(judged environments: against a scripted judge, data/scripted_judge.yaml)")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--http", action="store_true", help="also run them against a real server on loopback")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("new", help="scaffold a working environment folder")
    p.add_argument("name", metavar="NAME", help="lowercase letters, digits, '_'")
    p.add_argument("--dir", type=Path, help="parent folder (default: the environments/ package)")
    p.add_argument("--domain", default="knowledge", help="domain shown by `envs list` (default knowledge)")
    p.set_defaults(func=cmd_new)

    p = sub.add_parser("bench", help="load-test /verify: req/s, p50/p95/p99 latency, errors",
                       formatter_class=raw, epilog="Without --url the server is started in a child process. Rows come "
                       "from --data or the\nenvironment's examples whose expected status is 200.")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--url", help="benchmark this running server")
    p.add_argument("--concurrency", type=int, default=64, help="concurrent requests (default 64)")
    p.add_argument("--requests", type=int, default=5000, help="requests to send (default 5000)")
    p.add_argument("--data", type=Path, help="JSONL rows with 'response' to send (cycled)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides for the started server")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("generate", help="write procedurally generated rows (environments with generate())")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--tasks", help="comma-separated task names (environment-specific)")
    p.add_argument("--size", type=int, default=100, help="rows to generate (default 100)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--output", help="JSONL file (default stdout)")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="generator options")
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("prepare", help="pre-build what an environment needs for these rows (images, caches)")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--data", type=Path, required=True, help="JSONL rows")
    p.add_argument("--config", help="config file")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    p.set_defaults(func=cmd_prepare)

    from servers.cli_info import add_parsers as add_info_parsers
    from servers.model.cli import add_parser as add_model_parser

    add_info_parsers(sub)  # envs info / envs validate: what environments publish, for the trainer

    add_model_parser(sub)  # envs model serve PATH_OR_PRESET: the local OpenAI-compatible model server
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    # key=value overrides may come after options (`verify math --data x k=v`), which argparse's
    # positional matching does not allow: collect them from the leftovers.
    args, extra = parser.parse_known_args(argv)
    if extra:
        if hasattr(args, "overrides") and all("=" in e and not e.startswith("-") for e in extra):
            args.overrides = list(args.overrides) + extra
        else:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "serve":
        # NAME... and key=value share one positional list: split them here.
        args.overrides = [n for n in args.names if "=" in n] + list(args.overrides)
        args.names = [n for n in args.names if "=" not in n]
        if not args.names:
            parser.error("serve: name at least one environment")
    if args.env_path:
        extra = os.pathsep.join(str(Path(p).resolve()) for p in args.env_path)
        current = os.environ.get("VERIGYM_ENV_PATH")
        os.environ["VERIGYM_ENV_PATH"] = extra + (os.pathsep + current if current else "")
    if getattr(args, "data", None) is not None and args.command in ("verify", "prepare") and not args.data.is_file():
        print(f"envs {args.command}: {args.data} does not exist", file=sys.stderr)
        return 2
    try:
        return args.func(args)
    except UsageError as exc:
        print(f"envs {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
