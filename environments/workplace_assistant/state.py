"""Running tool calls on a workplace and comparing two workplaces' final states.

Comparison rules (WorkBench / NeMo-Gym semantics, made explicit):

* only tables a write tool touched on either side are compared: the rest are still
  byte-identical copies of the seed;
* strings compare case-insensitively and with surrounding spaces trimmed (NeMo-Gym
  lower-cases both states before comparing); SQLite's lower() folds ASCII letters only,
  and NULL equals '';
* rows that existed in the seed are matched by id, so "updated the wrong customer" is a
  difference; rows created during the episode get ids from a counter, so they are
  compared as a multiset without their id: creating the same two events in the other
  order is not a difference.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from functools import lru_cache
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


_SEP = "\x1f"  # unit separator: cannot occur in the tools' text values after SQLite's trim/lower


@lru_cache(maxsize=None)
def _signature_sql(table: str, columns: tuple[str, ...], id_column: str | None, only_ids: bool) -> str:
    """One normalised string per row, computed inside SQLite (C speed, no per-value Python).

    ``<id or ''> SEP <value> SEP <value> ...`` with values trimmed, ASCII-lower-cased and NULL
    read as ''. Episode-created rows get an empty key, so sorting the strings orders seeded
    rows by id and created rows by content: two states are equal iff the lists are equal.
    """
    values = " || char(31) || ".join(f"lower(trim(coalesce({c}, '')))" for c in columns if c != id_column)
    key = f"CASE WHEN {id_column} <= ? THEN {id_column} ELSE '' END" if id_column else "''"
    where = f" WHERE {id_column} IN (SELECT value FROM json_each(?))" if only_ids else ""
    return f"SELECT {key} || char(31) || {values} AS r FROM {table}{where} ORDER BY r"


def _columns(db: sqlite3.Connection, table: str) -> tuple[str, ...]:
    return tuple(d[0] for d in db.execute(f"SELECT * FROM {table} LIMIT 0").description)


def _signatures(db: sqlite3.Connection, table: str, columns: tuple[str, ...], id_column: str | None,
                largest_seed_id: str | None, ids: str) -> list[str]:
    """Signatures of the rows whose id is in the JSON list ``ids`` (all rows if the table has no id)."""
    if id_column is None:
        return [r for (r,) in db.execute(_signature_sql(table, columns, None, False))]
    return [r for (r,) in db.execute(_signature_sql(table, columns, id_column, True), (largest_seed_id, ids))]


def _changed_ids(db: sqlite3.Connection, table: str) -> set[str]:
    return {r for (r,) in db.execute("SELECT row_id FROM changes WHERE table_name = ?", (table,))}


def diff_states(actual: Workplace, expected: Workplace, largest_seed_ids: dict[str, str],
                limit: int = 20) -> list[str]:
    """Human-readable differences between two final states (empty: same state)."""
    problems: list[str] = []
    for table in sorted((actual.dirty | expected.dirty) & set(MUTABLE_TABLES)):
        id_column = MUTABLE_TABLES[table]
        columns = _columns(actual.db, table)
        # Rows neither side changed are still the seed's on both: compare only the changed ones.
        ids = json.dumps(sorted(_changed_ids(actual.db, table) | _changed_ids(expected.db, table))) \
            if id_column else ""
        got = _signatures(actual.db, table, columns, id_column, largest_seed_ids.get(table), ids)
        want = _signatures(expected.db, table, columns, id_column, largest_seed_ids.get(table), ids)
        if got != want:
            value_columns = [c for c in columns if c != id_column]
            problems += _explain(table, value_columns, got, want)
    if len(problems) > limit:
        problems = problems[:limit] + [f"... and {len(problems) - limit} more differences"]
    return problems


def _explain(table: str, columns: list[str], got: list[str], want: list[str]) -> list[str]:
    def split(rows: list[str]) -> tuple[dict[str, tuple[str, ...]], Counter]:
        seeded, created = {}, Counter()
        for row in rows:
            key, *values = row.split(_SEP)
            if key:
                seeded[key] = tuple(values)
            else:
                created[tuple(values)] += 1
        return seeded, created

    (got_old, got_new), (want_old, want_new) = split(got), split(want)
    out: list[str] = []
    for rid in sorted(set(got_old) | set(want_old)):
        g, w = got_old.get(rid), want_old.get(rid)
        if g is None:
            out.append(f"{table} {rid}: deleted, but the expected state keeps it")
        elif w is None:
            out.append(f"{table} {rid}: still present, but the expected state deletes it")
        elif g != w:
            out += [f"{table} {rid}: {col} is {gv!r}, expected {wv!r}" for col, gv, wv in zip(columns, g, w) if gv != wv]
    what = "new row" if MUTABLE_TABLES[table] else "row"
    out += [f"{table}: unexpected {what} {dict(zip(columns, row))}" for row in (got_new - want_new).elements()]
    out += [f"{table}: missing {what} {dict(zip(columns, row))}" for row in (want_new - got_new).elements()]
    return out
