"""Website-analytics tools (WorkBench's ``analytics`` toolkit). Only ``create_plot`` changes state."""

from __future__ import annotations

import sqlite3

from pydantic import Field

from environments.workplace_assistant.seed import ANALYTICS_FIELDS
from environments.workplace_assistant.toolkit import ToolArgs, check_choice, check_datetime, row_dicts, workplace_tool
from servers.environment import ToolError

_PLOT_VALUES = ("total_visits", "session_duration_seconds", "user_engaged", "visits_direct", "visits_referral",
                "visits_search_engine", "visits_social_media")
_PLOT_TYPES = ("bar", "line", "scatter", "histogram")
_SOURCES = ("direct", "referral", "search engine", "social media")
_RANGE_MIN, _RANGE_MAX = "time_min", "time_max"


class RangeArgs(ToolArgs):
    time_min: str | None = Field(None, description="Start date of the time range. Date format is YYYY-MM-DD")
    time_max: str | None = Field(None, description="End date of the time range. Date format is YYYY-MM-DD")


def _range(args: RangeArgs) -> tuple[str, list[str]]:
    sql, params = "", []
    if args.time_min:
        sql += " AND date_of_visit >= ?"
        params.append(check_datetime(args.time_min, "%Y-%m-%d", _RANGE_MIN))
    if args.time_max:
        sql += " AND date_of_visit <= ?"
        params.append(check_datetime(args.time_max, "%Y-%m-%d", _RANGE_MAX))
    return sql, params


def _per_day(db: sqlite3.Connection, expr: str, args: RangeArgs, extra: str = "", extra_params: tuple = ()) -> dict:
    where, params = _range(args)
    rows = db.execute(f"SELECT date_of_visit, {expr} FROM analytics WHERE 1=1 {where} {extra} "
                      "GROUP BY date_of_visit ORDER BY date_of_visit", [*params, *extra_params]).fetchall()
    return {day: value for day, value in rows}


class VisitorArgs(ToolArgs):
    visitor_id: str = Field(description="ID of the visitor")


@workplace_tool("analytics_get_visitor_information_by_id", "Returns the analytics data for a given visitor ID.",
                VisitorArgs)
def get_visitor_information_by_id(db: sqlite3.Connection, args: VisitorArgs) -> list[dict]:
    rows = row_dicts(db.execute(f"SELECT {', '.join(ANALYTICS_FIELDS)} FROM analytics WHERE visitor_id = ? "
                                "ORDER BY date_of_visit", (args.visitor_id,)))
    if not rows:
        raise ToolError(f"visitor ID {args.visitor_id!r} not found")
    return rows


class PlotArgs(ToolArgs):
    time_min: str = Field(description="Start date of the time range. Date format is YYYY-MM-DD")
    time_max: str = Field(description="End date of the time range. Date format is YYYY-MM-DD")
    value_to_plot: str = Field(description="Value to plot. Available values are: " + ", ".join(map(repr, _PLOT_VALUES)))
    plot_type: str = Field(description="Type of plot. Can be 'bar', 'line', 'scatter' or 'histogram'")


@workplace_tool("analytics_create_plot", "Plots the analytics data for a given time range and value.", PlotArgs,
                writes="plots")
def create_plot(db: sqlite3.Connection, args: PlotArgs) -> str:
    check_datetime(args.time_min, "%Y-%m-%d", _RANGE_MIN)
    check_datetime(args.time_max, "%Y-%m-%d", _RANGE_MAX)
    check_choice(args.value_to_plot, _PLOT_VALUES, "value_to_plot")
    check_choice(args.plot_type, _PLOT_TYPES, "plot_type")
    # WorkBench records the plot by its file name; the state (not pixels) is what gets compared.
    path = f"plots/{args.time_min}_{args.time_max}_{args.value_to_plot}_{args.plot_type}.png"
    db.execute("INSERT INTO plots VALUES (?)", (path,))
    return path


@workplace_tool("analytics_total_visits_count", "Returns the total number of visits within a specified time range.",
                RangeArgs)
def total_visits_count(db: sqlite3.Connection, args: RangeArgs) -> dict[str, int]:
    return _per_day(db, "COUNT(*)", args)


@workplace_tool("analytics_engaged_users_count", "Returns the number of engaged users within a specified time range.",
                RangeArgs)
def engaged_users_count(db: sqlite3.Connection, args: RangeArgs) -> dict[str, int]:
    return _per_day(db, "SUM(user_engaged)", args)


class TrafficArgs(RangeArgs):
    traffic_source: str | None = Field(None, description="Traffic source to filter the visits. Available values are: "
                                                         "'direct', 'referral', 'search engine', 'social media'")


@workplace_tool("analytics_traffic_source_count", "Returns the number of visits from a specific traffic source "
                "within a specified time range.", TrafficArgs)
def traffic_source_count(db: sqlite3.Connection, args: TrafficArgs) -> dict[str, int]:
    if args.traffic_source is None:
        return _per_day(db, "COUNT(*)", args)
    check_choice(args.traffic_source, _SOURCES, "traffic_source")
    return _per_day(db, "COUNT(*)", args, "AND traffic_source = ?", (args.traffic_source,))


@workplace_tool("analytics_get_average_session_duration", "Returns the average session duration within a specified "
                "time range.", RangeArgs)
def get_average_session_duration(db: sqlite3.Connection, args: RangeArgs) -> dict[str, float]:
    return {day: round(value, 2) for day, value in _per_day(db, "AVG(session_duration_seconds)", args).items()}
