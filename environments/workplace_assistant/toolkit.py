"""How a workplace tool is declared, plus the small helpers all toolkits share.

A tool is a plain function ``fn(db, args) -> output`` over a session's SQLite connection,
registered with :func:`workplace_tool`. The same function serves the HTTP route (through
the Environment's ``@tool`` methods) and the ground-truth replay in ``verify``, so the
model and the reference solution act on the workplace through identical code.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict

from servers.environment import ToolError


class ToolArgs(BaseModel):
    """Tool arguments: the row schemas say ``additionalProperties: false``, so do we."""

    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class WorkplaceTool:
    name: str
    description: str
    args_model: type[ToolArgs]
    fn: Callable[[sqlite3.Connection, Any], Any]
    writes: str | None  # the table it may change; verify compares only changed tables


TOOLS: dict[str, WorkplaceTool] = {}


def workplace_tool(name: str, description: str, args_model: type[ToolArgs], *, writes: str | None = None) -> Callable:
    def register(fn: Callable[[sqlite3.Connection, Any], Any]) -> Callable:
        if name in TOOLS:
            raise ValueError(f"workplace tool {name!r} registered twice")
        TOOLS[name] = WorkplaceTool(name, description, args_model, fn, writes)
        return fn

    return register


def next_id(db: sqlite3.Connection, table: str) -> str:
    """WorkBench numbering (8 digits, counting on from the seed); deterministic, so replays agree."""
    (number,) = db.execute("UPDATE id_counters SET next_id = next_id + 1 WHERE table_name = ? RETURNING next_id - 1",
                           (table,)).fetchone()
    return f"{number:08d}"


def check_choice(value: str, choices: tuple[str, ...], what: str) -> str:
    if value not in choices:
        raise ToolError(f"{what} {value!r} is not one of {', '.join(repr(c) for c in choices)}")
    return value


def check_datetime(value: str, fmt: str, what: str) -> str:
    try:
        datetime.strptime(value, fmt)
    except ValueError:
        human = fmt.replace("%Y", "YYYY").replace("%m", "MM").replace("%d", "DD").replace("%H", "HH") \
            .replace("%M", "MM").replace("%S", "SS")
        raise ToolError(f"{what} {value!r} is not in format {human}") from None
    return value


def check_known_email(db: sqlite3.Connection, email: str, what: str) -> str:
    if db.execute("SELECT 1 FROM directory WHERE email = ?", (email,)).fetchone() is None:
        raise ToolError(f"{what} {email!r} is not in the company directory")
    return email


def paginate(rows: list[dict[str, Any]], page: int, page_size: int) -> list[dict[str, Any]]:
    if page < 1 or page_size < 1:
        raise ToolError("page and page_size must be positive integers")
    start = (page - 1) * page_size
    return rows[start:start + page_size]


def page_clause(page: int, page_size: int) -> tuple[str, list[int]]:
    """SQL pagination, so a page costs page_size rows, not the whole match set."""
    if page < 1 or page_size < 1:
        raise ToolError("page and page_size must be positive integers")
    return " LIMIT ? OFFSET ?", [page_size, (page - 1) * page_size]


def row_dicts(cursor: sqlite3.Cursor, rename: dict[str, str] | None = None) -> list[dict[str, Any]]:
    names = [d[0] for d in cursor.description]
    if rename:
        names = [rename.get(n, n) for n in names]
    return [dict(zip(names, values)) for values in cursor.fetchall()]


def require_row(db: sqlite3.Connection, table: str, id_column: str, value: str, what: str) -> None:
    if db.execute(f"SELECT 1 FROM {table} WHERE {id_column} = ?", (value,)).fetchone() is None:
        raise ToolError(f"{what} {value!r} not found")
