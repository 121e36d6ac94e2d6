"""``envs info`` and ``envs validate``: what environments publish, for processes that must not
import them (the trainer's data prep routes and validates rows through these two commands).

``envs info --json`` prints every environment's ``describe()`` (agent names, row schema, tools)
— the same object its server returns on ``/info`` less the runtime parts. ``envs validate``
checks rows with the environment's own ``Row`` model, exactly as ``POST /verify`` parses them,
so a row passes here if and only if the server would accept it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError


def describe_all(names: list[str] | None = None) -> dict[str, Any]:
    """``{env: describe()}`` for every environment (or ``names``); one that fails to import is
    ``{"error": "..."}`` so it cannot hide the others."""
    from servers import registry

    entries = registry.discover()
    out: dict[str, Any] = {}
    for name in names or sorted(entries):
        if name not in entries:
            out[name] = {"error": f"unknown environment {name!r}"}
            continue
        try:
            out[name] = entries[name].load_class().describe()
        except Exception as exc:  # noqa: BLE001 - one broken environment must not hide the others
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
    return out


def cmd_info(args: argparse.Namespace) -> int:
    described = describe_all(args.names or None)
    if args.json:
        print(json.dumps(described))
        return 0
    for name, info in described.items():
        if "error" in info:
            print(f"{name}: BROKEN: {info['error']}")
            continue
        print(f"{name}: agents {', '.join(info['agent_names']) or '-'}; "
              f"row fields {', '.join(info['row_fields'].get('properties', {})) or '-'}; "
              f"tools {', '.join(t['name'] for t in info['tools']) or '-'}")
    return 0


def judge_endpoints(names: list[str], pairs: list[str]) -> dict[str, dict[str, dict[str, Any]]]:
    """``{env: {judge: {base_url, model, api_key_env, set}}}`` of each named environment's judges, from
    its config as ``envs serve NAMES pairs...`` would load it (config.yaml, then the overrides:
    ``key=v`` for all, ``NAME.key=v`` for one). ``set``: the overrides named this judge's base_url
    (the user points it somewhere) rather than config.yaml's default. Environments without judges
    are left out. A bad override is a ConfigError here, as it would be at serve time."""
    from servers import registry
    from servers.cli_serve import split_overrides
    from servers.config_loader import parse_overrides

    out: dict[str, dict[str, dict[str, Any]]] = {}
    for name, env_pairs in split_overrides(names, pairs).items():
        entry = registry.get(name)
        overrides = parse_overrides(env_pairs)
        config = registry.load_config(entry, entry.load_class(), overrides=overrides)
        judges = getattr(config, "judges", None)
        if not judges:
            continue
        given = overrides.get("judges", {}) if isinstance(overrides.get("judges"), dict) else {}
        out[name] = {judge: {"base_url": cfg.base_url, "model": cfg.model, "api_key_env": cfg.api_key_env,
                             "set": "base_url" in (given.get(judge) or {})}
                     for judge, cfg in judges.items()}
    return out


def cmd_judges(args: argparse.Namespace) -> int:
    from servers import registry
    from servers.cli_serve import ServeError

    names = [n for n in args.names if "=" not in n]
    pairs = [n for n in args.names if "=" in n] + list(getattr(args, "overrides", []) or [])
    try:
        found = judge_endpoints(names, pairs)
    except (registry.ConfigError, registry.UnknownEnvironment, ServeError) as exc:
        print(f"envs judges: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(found))
        return 0
    for env, judges in found.items():
        for judge, cfg in judges.items():
            print(f"{env}.{judge}: {cfg['model']} at {cfg['base_url']}")
    return 0


def _row_error(model: Any, row: Any) -> dict[str, Any] | None:
    from servers.service import validation_detail

    if not isinstance(row, dict):
        return {"error": "a row must be a JSON object"}
    try:
        model.model_validate(row)
    except ValidationError as exc:
        return {"error": "the row does not match this environment's fields", "detail": validation_detail(exc)}
    return None


def validate_lines(lines: list[bytes], env: str | None) -> list[dict[str, Any]]:
    """One verdict per line: ``{"line", "ok", "error"?, "detail"?}``. With ``env`` every line is a
    row of that environment; without, every line is ``{"env": NAME, "row": {...}}``."""
    from servers import registry

    entries = registry.discover()
    models: dict[str, Any] = {}
    out: list[dict[str, Any]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as exc:
            out.append({"line": number, "ok": False, "error": f"not valid JSON: {exc}"})
            continue
        name, row = (env, item) if env else (item.get("env"), item.get("row")) if isinstance(item, dict) else (None, None)
        if name not in models:
            if name not in entries:
                out.append({"line": number, "ok": False, "error": f"unknown environment {name!r}"})
                continue
            try:
                models[name] = entries[name].load_class().Row
            except Exception as exc:  # noqa: BLE001 - reported against the row, as data prep shows it
                out.append({"line": number, "ok": False,
                            "error": f"environment {name!r} could not be loaded: {type(exc).__name__}: {exc}"})
                continue
        problem = _row_error(models[name], row)
        out.append({"line": number, "ok": problem is None, **(problem or {})})
    return out


def cmd_validate(args: argparse.Namespace) -> int:
    lines = (sys.stdin.buffer if str(args.data) == "-" else open(args.data, "rb")).read().splitlines()
    verdicts = validate_lines(lines, args.env)
    bad = [v for v in verdicts if not v["ok"]]
    if args.json:
        for v in verdicts:
            print(json.dumps(v))
    else:
        for v in bad:
            detail = "; ".join(f"{d.get('loc')}: {d.get('msg')}" for d in v.get("detail", []))
            print(f"line {v['line']}: {v['error']}{': ' + detail if detail else ''}")
        print(f"{len(verdicts) - len(bad)}/{len(verdicts)} rows valid")
    return 1 if bad else 0


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("info", help="what each environment publishes: agent names, row schema, tools (as on /info)")
    p.add_argument("names", nargs="*", metavar="NAME", help="environments (default: all)")
    p.add_argument("--json", action="store_true", help="one JSON object {name: describe()}")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("judges", help="the judge endpoints (base_url, model) environments would call, with overrides",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="examples:\n  envs judges genrm multichallenge\n"
                              "  envs judges genrm judges.genrm.base_url=http://10.0.0.5:8000/v1 --json")
    p.add_argument("names", nargs="+", metavar="NAME", help="environment names, then key=value / NAME.key=value overrides")
    p.add_argument("--json", action="store_true", help="one JSON object {env: {judge: {base_url, model, ...}}}")
    p.set_defaults(func=cmd_judges, overrides=[])

    p = sub.add_parser("validate", help="check rows with the environment's own row model (what /verify accepts)",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="examples:\n  envs validate --env swe --data rows.jsonl\n"
                              "  envs validate --data routed.jsonl --json   # lines {\"env\": NAME, \"row\": {...}}\n"
                              "Exit 1 when a row is invalid.")
    p.add_argument("--env", help="every line is a row of this environment")
    p.add_argument("--data", type=Path, required=True, help="JSONL file ('-' for stdin)")
    p.add_argument("--json", action="store_true", help="one JSON verdict per line")
    p.set_defaults(func=cmd_validate)
