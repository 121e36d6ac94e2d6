"""Email and company-directory tools (WorkBench's ``email`` and ``company_directory`` toolkits)."""

from __future__ import annotations

import sqlite3

from pydantic import Field

from environments.workplace_assistant.seed import EMAIL_FIELDS, load_fixture
from environments.workplace_assistant.toolkit import (
    ToolArgs, check_datetime, next_id, page_clause, require_row, row_dicts, workplace_tool,
)
from servers.environment import ToolError

_COLUMN_TO_FIELD = {column: field for field, column in EMAIL_FIELDS.items()}


def _now() -> str:
    # The rows fix "now" in their system prompt; sent mail gets that timestamp, so replays agree.
    return load_fixture()["now"]


class FindEmailArgs(ToolArgs):
    name: str = Field("", description="Name or partial name to search for in email addresses")


@workplace_tool("company_directory_find_email_address",
                "Finds all email addresses containing the given name (case-insensitive search).", FindEmailArgs)
def find_email_address(db: sqlite3.Connection, args: FindEmailArgs) -> list[str]:
    if not args.name.strip():
        raise ToolError("name must not be empty")
    rows = db.execute("SELECT email FROM directory WHERE instr(lower(email), lower(?)) > 0 ORDER BY email",
                      (args.name.strip().replace(" ", "."),)).fetchall()
    return [email for (email,) in rows]


class EmailInfoArgs(ToolArgs):
    email_id: str = Field(description="Unique ID of the email")
    field: str = Field(description="Specific field to return. Available fields: 'email_id', 'inbox/outbox', "
                                   "'sender/recipient', 'subject', 'sent_datetime', 'body'")


@workplace_tool("email_get_email_information_by_id", "Retrieves specific details of an email by its ID.", EmailInfoArgs)
def get_email_information_by_id(db: sqlite3.Connection, args: EmailInfoArgs) -> dict[str, str]:
    column = EMAIL_FIELDS.get(args.field)
    if column is None:
        raise ToolError(f"field {args.field!r} not found; available: {', '.join(EMAIL_FIELDS)}")
    row = db.execute(f"SELECT {column} FROM emails WHERE email_id = ?", (args.email_id,)).fetchone()
    if row is None:
        raise ToolError(f"email ID {args.email_id!r} not found")
    return {args.field: row[0]}


class SearchEmailsArgs(ToolArgs):
    query: str = Field("", description="Search query, matching terms in subject, body, or sender/recipient fields")
    date_min: str | None = Field(None, description="Lower date limit for the email's sent date (inclusive). Format: YYYY-MM-DD")
    date_max: str | None = Field(None, description="Upper date limit for the email's sent date (inclusive). Format: YYYY-MM-DD")
    page: int = Field(1, description="Page number of results to return")
    page_size: int = Field(5, description="Number of emails per page")


@workplace_tool("email_search_emails", "Searches for emails matching the given query across subject, body, or sender "
                "fields. The function matches an email if all words in the query appear in any of these fields.",
                SearchEmailsArgs)
def search_emails(db: sqlite3.Connection, args: SearchEmailsArgs) -> list[dict[str, str]]:
    sql, params = "SELECT * FROM emails WHERE 1=1", []
    for word in args.query.lower().split():
        sql += " AND instr(lower(subject || ' ' || body || ' ' || sender_recipient), ?) > 0"
        params.append(word)
    if args.date_min:
        sql += " AND substr(sent_datetime, 1, 10) >= ?"
        params.append(check_datetime(args.date_min, "%Y-%m-%d", "date_min"))
    if args.date_max:
        sql += " AND substr(sent_datetime, 1, 10) <= ?"
        params.append(check_datetime(args.date_max, "%Y-%m-%d", "date_max"))
    limit, limit_params = page_clause(args.page, args.page_size)
    return row_dicts(db.execute(sql + " ORDER BY sent_datetime DESC, email_id DESC" + limit, [*params, *limit_params]),
                     _COLUMN_TO_FIELD)


class SendEmailArgs(ToolArgs):
    recipient: str = Field(description="Email address of the recipient")
    subject: str = Field(description="Subject line of the email")
    body: str = Field(description="Body content of the email")


def _insert_outgoing(db: sqlite3.Connection, recipient: str, subject: str, body: str) -> str:
    if "@" not in recipient or recipient.strip() != recipient or " " in recipient:
        raise ToolError(f"recipient {recipient!r} is not an email address")
    email_id = next_id(db, "emails")
    db.execute("INSERT INTO emails VALUES (?, 'outbox', ?, ?, ?, ?)", (email_id, recipient, subject, _now(), body))
    return email_id


@workplace_tool("email_send_email", "Sends an email to the specified recipient.", SendEmailArgs, writes="emails")
def send_email(db: sqlite3.Connection, args: SendEmailArgs) -> str:
    if not args.subject.strip() or not args.body.strip():
        raise ToolError("subject and body must not be empty")
    _insert_outgoing(db, args.recipient, args.subject, args.body)
    return "Email sent successfully."


class EmailIdArgs(ToolArgs):
    email_id: str = Field(description="Unique ID of the email to be deleted")


@workplace_tool("email_delete_email", "Deletes an email by its ID.", EmailIdArgs, writes="emails")
def delete_email(db: sqlite3.Connection, args: EmailIdArgs) -> str:
    require_row(db, "emails", "email_id", args.email_id, "email ID")
    db.execute("DELETE FROM emails WHERE email_id = ?", (args.email_id,))
    return "Email deleted successfully."


class ForwardEmailArgs(ToolArgs):
    email_id: str = Field(description="Unique ID of the email to be forwarded")
    recipient: str = Field(description="Email address of the recipient")


@workplace_tool("email_forward_email", "Forwards an email to the specified recipient.", ForwardEmailArgs, writes="emails")
def forward_email(db: sqlite3.Connection, args: ForwardEmailArgs) -> str:
    row = db.execute("SELECT subject, body FROM emails WHERE email_id = ?", (args.email_id,)).fetchone()
    if row is None:
        raise ToolError(f"email ID {args.email_id!r} not found")
    _insert_outgoing(db, args.recipient, f"FW: {row[0]}", row[1])
    return "Email forwarded successfully."


class ReplyEmailArgs(ToolArgs):
    email_id: str = Field(description="Unique ID of the email to be replied")
    body: str = Field(description="Body content of the email")


@workplace_tool("email_reply_email", "Replies to an email by its ID.", ReplyEmailArgs, writes="emails")
def reply_email(db: sqlite3.Connection, args: ReplyEmailArgs) -> str:
    row = db.execute("SELECT sender_recipient, subject FROM emails WHERE email_id = ?", (args.email_id,)).fetchone()
    if row is None:
        raise ToolError(f"email ID {args.email_id!r} not found")
    if not args.body.strip():
        raise ToolError("body must not be empty")
    _insert_outgoing(db, row[0], f"Re: {row[1]}", args.body)
    return "Email replied successfully."
