"""Running tool calls on a workplace and comparing two workplaces' final states.

Comparison rules (WorkBench / NeMo-Gym semantics, made explicit):

* only tables a write tool touched on either side are compared: the rest are still
  byte-identical copies of the seed;
* strings compare case-insensitively and with surrounding whitespace stripped
  (NeMo-Gym lower-cases both states before comparing);
* rows that existed in the seed are matched by id, so "updated the wrong customer" is a
  difference; rows created during the episode get ids from a counter, so they are
  compared as a multiset without their id: creating the same two events in the other
  order is not a difference.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from environments.workplace_assistant import analytics_tools, calendar_tools, crm_tools, email_tools, project_tools  # noqa: F401  (they register TOOLS)
from environments.workplace_assistant.seed import MUTABLE_TABLES
from environments.workplace_assistant.toolkit import TOOLS
from servers.environment import ToolError


@dataclass
class Workplace:
    """One episode's database and which tables its tools changed."""

    db: sqlite3.Connection
    dirty: set[str] = field(default_factory=set)
    calls: int = 0

    def close(self) -> None:
        self.db.close()


def run_call(workplace: Workplace, name: str, arguments: Any) -> Any:
    """Run tool ``name``; ``arguments`` may be a JSON string (as in function_call items) or a dict.

    Raises :class:`ToolError` for anything the model should be told: unknown tool, bad JSON,
    invalid arguments, or the tool's own refusal. A failed call changes nothing.
    """
    spec = TOOLS.get(name)
    if spec is None:
        raise ToolError(f"unknown tool {name!r}")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            raise ToolError(f"arguments of {name!r} are not valid JSON: {exc}") from None
    try:
        args = spec.args_model.model_validate(arguments)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in exc.errors())
        raise ToolError(f"invalid arguments for {name!r}: {problems}") from None
    return call_validated(workplace, spec.name, args)


def call_validated(workplace: Workplace, name: str, args: Any) -> Any:
    spec = TOOLS[name]
    workplace.calls += 1
    try:
        result = spec.fn(workplace.db, args)
    except ToolError:
        workplace.db.rollback()
        raise
    workplace.db.commit()
    if spec.writes:
        workplace.dirty.add(spec.writes)
    return result


def _norm(value: Any) -> Any:
    return value.strip().lower() if isinstance(value, str) else value


def _table_rows(db: sqlite3.Connection, table: str) -> tuple[list[str], list[tuple]]:
    cursor = db.execute(f"SELECT * FROM {table}")
    columns = [d[0] for d in cursor.description]
    return columns, [tuple(_norm(v) for v in row) for row in cursor.fetchall()]


def diff_states(actual: Workplace, expected: Workplace, seeded: dict[str, frozenset[str]], limit: int = 20) -> list[str]:
    """Human-readable differences between two final states (empty: same state)."""
    problems: list[str] = []
    for table in sorted((actual.dirty | expected.dirty) & set(MUTABLE_TABLES)):
        id_column = MUTABLE_TABLES[table]
        columns, got = _table_rows(actual.db, table)
        _, want = _table_rows(expected.db, table)
        if id_column is None:
            problems += _multiset_diff(table, columns, got, want)
            continue
        key = columns.index(id_column)
        seeded_ids = seeded[table]
        got_old = {r[key]: r for r in got if r[key] in seeded_ids}
        want_old = {r[key]: r for r in want if r[key] in seeded_ids}
        for rid in sorted(set(got_old) | set(want_old)):
            g, w = got_old.get(rid), want_old.get(rid)
            if g is None:
                problems.append(f"{table} {rid}: deleted, but the expected state keeps it")
            elif w is None:
                problems.append(f"{table} {rid}: still present, but the expected state deletes it")
            elif g != w:
                for col, gv, wv in zip(columns, g, w):
                    if gv != wv:
                        problems.append(f"{table} {rid}: {col} is {gv!r}, expected {wv!r}")
        strip = [i for i in range(len(columns)) if i != key]
        new_cols = [columns[i] for i in strip]
        problems += _multiset_diff(table, new_cols, [tuple(r[i] for i in strip) for r in got if r[key] not in seeded_ids],
                                   [tuple(r[i] for i in strip) for r in want if r[key] not in seeded_ids], new=True)
    if len(problems) > limit:
        problems = problems[:limit] + [f"... and {len(problems) - limit} more differences"]
    return problems


def _multiset_diff(table: str, columns: list[str], got: list[tuple], want: list[tuple], new: bool = False) -> list[str]:
    got_c, want_c = Counter(got), Counter(want)
    what = "new row" if new else "row"
    out = [f"{table}: unexpected {what} {dict(zip(columns, row))}" for row in (got_c - want_c).elements()]
    out += [f"{table}: missing {what} {dict(zip(columns, row))}" for row in (want_c - got_c).elements()]
    return out
