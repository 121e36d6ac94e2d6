"""Run an environment's own example rows and compare with their expected outcomes.

Used by ``envs check`` and by the conformance suite, in-process and over HTTP.

Each line of ``environments/<name>/data/example.jsonl`` is a NeMo-Gym row plus
``response`` (a Responses-API object) plus ``_expected``:

    {"reward": 1.0}                      scored, reward within 1e-6
    {"reward": 0.0, "fields": {...}}     ... and these reply fields equal (subset match)
    {"status": 422}                      rejected cleanly with this HTTP status
    {"failure_class": "timeout"}         could not be scored, with this class

``data/example_config.yaml`` (optional) holds config overrides the examples run under.

Stateful environments may add ``_script``: tool calls made between ``/seed_session`` and
``/verify``, each ``{"name": tool, "arguments": {...}, "expect": {subset of the output}}``.

Consecutive rows with the same ``_cohort`` value are verified concurrently (an environment that
scores the rollouts of one prompt together, genrm's cohort ``/verify``, answers none of them
until all have arrived).
"""

from __future__ import annotations

import asyncio
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servers.service import REJECT, EnvService
from servers.wire import FAILURE_CLASS_KEY

EXPECTED_KEY = "_expected"
SCRIPT_KEY = "_script"
COHORT_KEY = "_cohort"
EXAMPLE_CONFIG = "example_config.yaml"


def example_config(folder: Path) -> dict[str, Any]:
    """Config overrides an environment's examples run under: ``data/example_config.yaml`` when
    the folder has one (e.g. math_formal_lean's scripted stand-in for the Lean checker), else none."""
    import yaml

    path = folder / "data" / EXAMPLE_CONFIG
    if not path.is_file():
        return {}
    loaded = yaml.safe_load(path.read_text()) or {}
    if not isinstance(loaded, dict):
        raise ValueError(f"{path}: expected a mapping of config keys")
    return loaded


@dataclass
class ExampleResult:
    line: int
    ok: bool
    expected: dict[str, Any]
    got: dict[str, Any]
    problems: list[str] = field(default_factory=list)


def load_examples(path: Path) -> list[tuple[int, dict[str, Any]]]:
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if line.strip():
            rows.append((number, json.loads(line)))
    return rows


def _subset_problems(expected: Any, got: Any, where: str) -> list[str]:
    if isinstance(expected, dict):
        if not isinstance(got, dict):
            return [f"{where}: expected an object, got {got!r}"[:300]]
        out: list[str] = []
        for key, value in expected.items():
            if key not in got:
                out.append(f"{where}.{key}: missing")
            else:
                out += _subset_problems(value, got[key], f"{where}.{key}")
        return out
    if isinstance(expected, float) and isinstance(got, (int, float)):
        return [] if math.isclose(expected, got, abs_tol=1e-6) else [f"{where}: expected {expected}, got {got}"]
    return [] if expected == got else [f"{where}: expected {expected!r}, got {got!r}"[:300]]


def compare(expected: dict[str, Any], status: int, reply: Any) -> list[str]:
    """Problems (empty = as expected) of one (status, reply) against ``_expected``."""
    problems: list[str] = []
    want_status = expected.get("status", 200)
    if status != want_status:
        return [f"HTTP status {status}, expected {want_status}: {str(reply)[:300]}"]
    if want_status != 200:
        if not (isinstance(reply, dict) and "error" in reply):
            problems.append("error reply lacks an 'error' field")
        return problems
    got_failure = reply.get(FAILURE_CLASS_KEY)
    if got_failure != expected.get("failure_class"):
        problems.append(f"failure class {got_failure!r}, expected {expected.get('failure_class')!r}: "
                        f"{str(reply.get('_ng_failure_detail'))[:300]}")
    got_reward = reply.get("reward")
    if "reward" in expected and not (isinstance(got_reward, (int, float)) and
                                     math.isclose(float(got_reward), float(expected["reward"]), abs_tol=1e-6)):
        problems.append(f"reward {got_reward!r}, expected {expected['reward']}")
    problems += _subset_problems(expected.get("fields", {}), reply, "reply")
    return problems


def _wants_session(stateful: bool, row: dict[str, Any]) -> bool:
    """Stateful environments get a session per row, except rows expected to be rejected."""
    return stateful and (row.get(EXPECTED_KEY) or {}).get("status", 200) == 200


async def run_script_inprocess(service: EnvService, row: dict[str, Any]) -> tuple[str | None, list[str]]:
    """seed_session + scripted tool calls, in-process. Returns (session id, problems)."""
    if not _wants_session(bool(service.env.stateful or service.env.tools()), row):
        return None, []
    # A check of rows, as a direct caller: a row the environment cannot score is a 422 here.
    status, reply, session_id = await service.seed_session(row, unscorable=REJECT)
    if status != 200:
        return None, [f"seed_session answered {status}: {reply}"]
    problems: list[str] = []
    for step in row.get(SCRIPT_KEY, []):
        status, out = await service.call_tool(step["name"], step.get("arguments", {}), session_id)
        problems += _subset_problems(step.get("expect", {}), out, f"tool {step['name']}")
    return session_id, problems


async def run_script_http(client: Any, env_name: str, row: dict[str, Any], stateful: bool) -> tuple[Any, list[str]]:
    """:func:`run_script_inprocess` against a running server. Returns (session handle, problems)."""
    from servers.client import EnvClientError

    if not _wants_session(stateful, row):
        return None, []
    try:
        session = await client.seed_session(env_name, row)
    except EnvClientError as exc:
        return None, [f"seed_session answered {exc.status}: {exc.body}"]
    problems: list[str] = []
    for step in row.get(SCRIPT_KEY, []):
        _, out = await client.call_tool(session, step["name"], step.get("arguments", {}))
        problems += _subset_problems(step.get("expect", {}), out, f"tool {step['name']}")
    return session, problems


def _batches(rows: list[tuple[int, dict[str, Any]]]) -> list[list[tuple[int, dict[str, Any]]]]:
    """Rows in order, consecutive rows sharing a ``_cohort`` value grouped (each other row alone)."""
    out: list[list[tuple[int, dict[str, Any]]]] = []
    for line, row in rows:
        cohort = row.get(COHORT_KEY)
        if cohort is not None and out and out[-1][0][1].get(COHORT_KEY) == cohort:
            out[-1].append((line, row))
        else:
            out.append([(line, row)])
    return out


async def check_inprocess(service: EnvService, rows: list[tuple[int, dict[str, Any]]]) -> list[ExampleResult]:
    async def one(line: int, row: dict[str, Any]) -> ExampleResult:
        expected = row.get(EXPECTED_KEY, {})
        session_id, problems = await run_script_inprocess(service, row)
        status, reply = await service.verify(row, session_id, unscorable=REJECT)
        problems += compare(expected, status, reply)
        return ExampleResult(line, not problems, expected, reply if isinstance(reply, dict) else {}, problems)

    results = []
    for batch in _batches(rows):
        results += await asyncio.gather(*(one(line, row) for line, row in batch))
    return results


async def check_http(client: Any, env_name: str, rows: list[tuple[int, dict[str, Any]]],
                     stateful: bool) -> list[ExampleResult]:
    """Same as :func:`check_inprocess` against a running server, through :class:`servers.client.EnvClient`."""
    from servers.client import EnvClientError

    async def one(line: int, row: dict[str, Any]) -> ExampleResult:
        expected = row.get(EXPECTED_KEY, {})
        session, problems = await run_script_http(client, env_name, row, stateful)
        try:
            reply = await client.verify(env_name, row, session=session, raise_on_failure=True)
            status = 200
        except EnvClientError as exc:
            status, reply = exc.status or 0, exc.body
        problems += compare(expected, status, reply)
        return ExampleResult(line, not problems, expected, reply if isinstance(reply, dict) else {}, problems)

    results = []
    for batch in _batches(rows):
        results += await asyncio.gather(*(one(line, row) for line, row in batch))
    return results
