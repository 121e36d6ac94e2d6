"""Calendar tools (WorkBench's ``calendar`` toolkit)."""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta

from pydantic import Field

from environments.workplace_assistant.seed import EVENT_FIELDS
from environments.workplace_assistant.toolkit import (
    ToolArgs, check_datetime, next_id, paginate, require_row, row_dicts, workplace_tool,
)
from servers.environment import ToolError

_FMT = "%Y-%m-%d %H:%M:%S"
_UPDATABLE = ("event_name", "participant_email", "event_start", "duration")


def _check_duration(value: str) -> str:
    if not value.strip().isdigit() or int(value) <= 0:
        raise ToolError(f"duration {value!r} must be a positive whole number of minutes")
    return str(int(value))


class EventInfoArgs(ToolArgs):
    event_id: str = Field(description="8-digit ID of the event")
    field: str = Field(description="Field to return. Available fields are: 'event_id', 'event_name', "
                                   "'participant_email', 'event_start', 'duration'")


@workplace_tool("calendar_get_event_information_by_id", "Returns the event for a given ID.", EventInfoArgs)
def get_event_information_by_id(db: sqlite3.Connection, args: EventInfoArgs) -> dict[str, str]:
    if args.field not in EVENT_FIELDS:
        raise ToolError(f"field {args.field!r} not found; available: {', '.join(EVENT_FIELDS)}")
    row = db.execute(f"SELECT {args.field} FROM events WHERE event_id = ?", (args.event_id,)).fetchone()
    if row is None:
        raise ToolError(f"event ID {args.event_id!r} not found")
    return {args.field: row[0]}


class SearchEventsArgs(ToolArgs):
    query: str = Field("", description="Query to search for. Terms will be matched in the event_name and "
                                       "participant_email fields")
    time_min: str | None = Field(None, description="Lower bound (inclusive) for an event's end time to filter by. "
                                                   "Format: YYYY-MM-DD HH:MM:SS")
    time_max: str | None = Field(None, description="Upper bound (inclusive) for an event's start time to filter by. "
                                                   "Format: YYYY-MM-DD HH:MM:SS")
    page: int = Field(1, description="Page number of results to return")
    page_size: int = Field(5, description="Number of events per page")


@workplace_tool("calendar_search_events", "Returns the events for a given query with pagination support.",
                SearchEventsArgs)
def search_events(db: sqlite3.Connection, args: SearchEventsArgs) -> list[dict[str, str]]:
    sql, params = "SELECT * FROM events WHERE 1=1", []
    for word in args.query.lower().split():
        sql += " AND instr(lower(event_name || ' ' || participant_email), ?) > 0"
        params.append(word)
    if args.time_max:
        sql += " AND event_start <= ?"
        params.append(check_datetime(args.time_max, _FMT, "time_max"))
    rows = row_dicts(db.execute(sql + " ORDER BY event_start, event_id", params))
    if args.time_min:
        check_datetime(args.time_min, _FMT, "time_min")
        # The end time is derived (start + duration), so it is filtered here rather than in SQL.
        rows = [r for r in rows if (datetime.strptime(r["event_start"], _FMT) + timedelta(minutes=int(r["duration"])))
                .strftime(_FMT) >= args.time_min]
    return paginate(rows, args.page, args.page_size)


class CreateEventArgs(ToolArgs):
    event_name: str = Field(description="Name of the event")
    participant_email: str = Field(description="Email of the participant")
    event_start: str = Field(description="Start time of the event. Format: YYYY-MM-DD HH:MM:SS")
    duration: str = Field(description="Duration of the event in minutes")


@workplace_tool("calendar_create_event", "Creates a new event.", CreateEventArgs, writes="events")
def create_event(db: sqlite3.Connection, args: CreateEventArgs) -> str:
    if not args.event_name.strip():
        raise ToolError("event_name must not be empty")
    if "@" not in args.participant_email:
        raise ToolError(f"participant_email {args.participant_email!r} is not an email address")
    check_datetime(args.event_start, _FMT, "event_start")
    event_id = next_id(db, "events")
    db.execute("INSERT INTO events VALUES (?, ?, ?, ?, ?)",
               (event_id, args.event_name, args.participant_email, args.event_start, _check_duration(args.duration)))
    return event_id


class EventIdArgs(ToolArgs):
    event_id: str = Field(description="8-digit ID of the event")


@workplace_tool("calendar_delete_event", "Deletes an event.", EventIdArgs, writes="events")
def delete_event(db: sqlite3.Connection, args: EventIdArgs) -> str:
    require_row(db, "events", "event_id", args.event_id, "event ID")
    db.execute("DELETE FROM events WHERE event_id = ?", (args.event_id,))
    return "Event deleted successfully."


class UpdateEventArgs(ToolArgs):
    event_id: str = Field(description="8-digit ID of the event")
    field: str = Field(description="Field to update. Available fields are: 'event_name', 'participant_email', "
                                   "'event_start', 'duration'")
    new_value: str = Field(description="New value for the field")


@workplace_tool("calendar_update_event", "Updates an event.", UpdateEventArgs, writes="events")
def update_event(db: sqlite3.Connection, args: UpdateEventArgs) -> str:
    if args.field not in _UPDATABLE:
        raise ToolError(f"field {args.field!r} cannot be updated; available: {', '.join(_UPDATABLE)}")
    require_row(db, "events", "event_id", args.event_id, "event ID")
    value = args.new_value
    if args.field == "event_start":
        check_datetime(value, _FMT, "event_start")
    elif args.field == "duration":
        value = _check_duration(value)
    db.execute(f"UPDATE events SET {args.field} = ? WHERE event_id = ?", (value, args.event_id))
    return "Event updated successfully."
