"""Project-management tools (WorkBench's ``project_management`` toolkit)."""

from __future__ import annotations

import sqlite3

from pydantic import Field

from environments.workplace_assistant.seed import TASK_FIELDS, load_fixture
from environments.workplace_assistant.toolkit import (
    ToolArgs, check_choice, check_datetime, check_known_email, next_id, require_row, row_dicts, workplace_tool,
)
from servers.environment import ToolError

_UPDATABLE = ("task_name", "assigned_to_email", "list_name", "due_date", "board")


def _check_value(db: sqlite3.Connection, field: str, value: str) -> str:
    fixture = load_fixture()
    if field == "list_name":
        return check_choice(value, tuple(fixture["task_lists"]), "list_name")
    if field == "board":
        return check_choice(value, tuple(fixture["boards"]), "board")
    if field == "due_date":
        return check_datetime(value, "%Y-%m-%d", "due_date")
    if field == "assigned_to_email":
        return check_known_email(db, value, "assigned_to_email")
    if field == "task_name" and not value.strip():
        raise ToolError("task_name must not be empty")
    return value


class TaskInfoArgs(ToolArgs):
    task_id: str = Field(description="8-digit ID of the task")
    field: str = Field(description="Field to return. Available fields are: 'task_id', 'task_name', "
                                   "'assigned_to_email', 'list_name', 'due_date', 'board'")


@workplace_tool("project_management_get_task_information_by_id", "Returns the task information for a given ID.",
                TaskInfoArgs)
def get_task_information_by_id(db: sqlite3.Connection, args: TaskInfoArgs) -> dict[str, str]:
    if args.field not in TASK_FIELDS:
        raise ToolError(f"field {args.field!r} not found; available: {', '.join(TASK_FIELDS)}")
    row = db.execute(f"SELECT {args.field} FROM tasks WHERE task_id = ?", (args.task_id,)).fetchone()
    if row is None:
        raise ToolError(f"task ID {args.task_id!r} not found")
    return {args.field: row[0]}


class SearchTasksArgs(ToolArgs):
    task_name: str | None = Field(None, description="Name of the task")
    assigned_to_email: str | None = Field(None, description="Email address of the person assigned to the task")
    list_name: str | None = Field(None, description="Name of the list the task belongs to")
    due_date: str | None = Field(None, description="Due date of the task in YYYY-MM-DD format")
    board: str | None = Field(None, description="Name of the board the task belongs to")


@workplace_tool("project_management_search_tasks", "Searches for tasks based on the given parameters.",
                SearchTasksArgs)
def search_tasks(db: sqlite3.Connection, args: SearchTasksArgs) -> list[dict[str, str]]:
    filters = {k: v for k, v in args.model_dump().items() if v}
    if not filters:
        raise ToolError("give at least one search parameter")
    sql, params = "SELECT * FROM tasks WHERE 1=1", []
    for field, value in filters.items():
        if field == "task_name":  # names are matched by substring, the rest exactly (case-insensitive)
            sql += " AND instr(lower(task_name), lower(?)) > 0"
        else:
            sql += f" AND lower({field}) = lower(?)"
        params.append(value)
    return row_dicts(db.execute(sql + " ORDER BY task_id", params))


class CreateTaskArgs(ToolArgs):
    task_name: str = Field(description="Name of the task")
    assigned_to_email: str = Field(description="Email address of the person assigned to the task")
    list_name: str = Field(description="Name of the list the task belongs to. One of: 'Backlog', 'In Progress', "
                                       "'In Review', 'Completed'")
    due_date: str = Field(description="Due date of the task in YYYY-MM-DD format")
    board: str = Field(description="Name of the board the task belongs to. One of: 'Back end', 'Front end', 'Design'")


@workplace_tool("project_management_create_task", "Creates a new task.", CreateTaskArgs, writes="tasks")
def create_task(db: sqlite3.Connection, args: CreateTaskArgs) -> str:
    values = {f: _check_value(db, f, getattr(args, f)) for f in _UPDATABLE}
    task_id = next_id(db, "tasks")
    db.execute("INSERT INTO tasks VALUES (?, ?, ?, ?, ?, ?)", (task_id, *(values[f] for f in _UPDATABLE)))
    return task_id


class TaskIdArgs(ToolArgs):
    task_id: str = Field(description="8-digit ID of the task")


@workplace_tool("project_management_delete_task", "Deletes a task by ID.", TaskIdArgs, writes="tasks")
def delete_task(db: sqlite3.Connection, args: TaskIdArgs) -> str:
    require_row(db, "tasks", "task_id", args.task_id, "task ID")
    db.execute("DELETE FROM tasks WHERE task_id = ?", (args.task_id,))
    return "Task deleted successfully."


class UpdateTaskArgs(ToolArgs):
    task_id: str = Field(description="8-digit ID of the task")
    field: str = Field(description="Field to update. Available fields are: 'task_name', 'assigned_to_email', "
                                   "'list_name', 'due_date', 'board'")
    new_value: str = Field(description="New value for the field")


@workplace_tool("project_management_update_task", "Updates a task by ID.", UpdateTaskArgs, writes="tasks")
def update_task(db: sqlite3.Connection, args: UpdateTaskArgs) -> str:
    if args.field not in _UPDATABLE:
        raise ToolError(f"field {args.field!r} cannot be updated; available: {', '.join(_UPDATABLE)}")
    require_row(db, "tasks", "task_id", args.task_id, "task ID")
    value = _check_value(db, args.field, args.new_value)
    db.execute(f"UPDATE tasks SET {args.field} = ? WHERE task_id = ?", (value, args.task_id))
    return "Task updated successfully."
