"""The seed workplace: schema, deterministic generator, and per-session copies.

The seed database is built once per process (per seed) from ``data/fixture.json`` and
copied into a fresh ``:memory:`` database for every session with SQLite's backup API,
which copies pages, not rows: a session costs a fraction of a millisecond, not a rebuild.

Filler records come from a ``random.Random(seed)`` so every process builds the same
workplace. Pinned records (the ones the shipped example rows' ground truth names) are
placed at their ids, and filler records are re-drawn while they match a ``reserved``
query, so e.g. "Akira's leads interested in software" is exactly the pinned customers.
"""

from __future__ import annotations

import json
import random
import sqlite3
import threading
from datetime import date, datetime, timedelta
from functools import lru_cache
from pathlib import Path
from typing import Any

FIXTURE = Path(__file__).parent / "data" / "fixture.json"

# Wire field name -> column name (the tools speak WorkBench's 'inbox/outbox' spelling).
EMAIL_FIELDS = {"email_id": "email_id", "inbox/outbox": "inbox_outbox", "sender/recipient": "sender_recipient",
                "subject": "subject", "sent_datetime": "sent_datetime", "body": "body"}
EVENT_FIELDS = ("event_id", "event_name", "participant_email", "event_start", "duration")
TASK_FIELDS = ("task_id", "task_name", "assigned_to_email", "list_name", "due_date", "board")
CUSTOMER_FIELDS = ("customer_id", "assigned_to_email", "customer_name", "customer_email", "customer_phone",
                   "last_contact_date", "product_interest", "status", "notes", "follow_up_by")
ANALYTICS_FIELDS = ("date_of_visit", "visitor_id", "page_views", "session_duration_seconds", "traffic_source",
                    "user_engaged")

SCHEMA = """
CREATE TABLE directory (name TEXT NOT NULL, email TEXT PRIMARY KEY);
CREATE TABLE emails (email_id TEXT PRIMARY KEY, inbox_outbox TEXT, sender_recipient TEXT, subject TEXT,
                     sent_datetime TEXT, body TEXT);
CREATE TABLE events (event_id TEXT PRIMARY KEY, event_name TEXT, participant_email TEXT, event_start TEXT,
                     duration TEXT);
CREATE TABLE tasks (task_id TEXT PRIMARY KEY, task_name TEXT, assigned_to_email TEXT, list_name TEXT,
                    due_date TEXT, board TEXT);
CREATE TABLE customers (customer_id TEXT PRIMARY KEY, assigned_to_email TEXT, customer_name TEXT,
                        customer_email TEXT, customer_phone TEXT, last_contact_date TEXT, product_interest TEXT,
                        status TEXT, notes TEXT, follow_up_by TEXT);
CREATE TABLE analytics (date_of_visit TEXT, visitor_id TEXT, page_views INTEGER, session_duration_seconds REAL,
                        traffic_source TEXT, user_engaged INTEGER);
CREATE TABLE plots (file_path TEXT);
-- Next id per table. A counter, not MAX(id)+1, so a deleted seed id is never handed out again
-- and every id above the seed's largest is known to be created during the episode.
CREATE TABLE id_counters (table_name TEXT PRIMARY KEY, next_id INTEGER NOT NULL);
-- Ids of rows inserted, updated or deleted since the seed (filled by triggers, see build()):
-- verify compares only these rows, so its cost follows the episode, not the table sizes.
CREATE TABLE changes (table_name TEXT NOT NULL, row_id TEXT NOT NULL, PRIMARY KEY (table_name, row_id))
    WITHOUT ROWID;
CREATE INDEX analytics_date ON analytics (date_of_visit);
"""

# Tables a tool may change, with their id column (None: rows have no id). verify compares these.
MUTABLE_TABLES: dict[str, str | None] = {"emails": "email_id", "events": "event_id", "tasks": "task_id",
                                         "customers": "customer_id", "plots": None}


def format_id(number: int) -> str:
    """WorkBench ids are 8-digit zero-padded strings."""
    return f"{number:08d}"


def email_of(name: str, domain: str) -> str:
    return f"{name.lower().replace(' ', '.')}@{domain}"


@lru_cache(maxsize=1)
def load_fixture() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text())


def _matches(record: dict[str, Any], query: dict[str, str]) -> bool:
    for key, want in query.items():
        if key.endswith("_max"):
            if record[key[:-4]] > want:
                return False
        elif record[key] != want:
            return False
    return True


def generate(seed: int) -> dict[str, list[dict[str, Any]]]:
    """All seed records (wire field names), deterministic in ``seed``."""
    fx = load_fixture()
    rng = random.Random(seed)
    domain = fx["domain"]
    now = datetime.strptime(fx["now"], "%Y-%m-%d %H:%M:%S")
    people = [email_of(n, domain) for n in fx["employees"]]
    pinned = fx["pinned"]
    pinned_task_names = {t["task_name"] for t in pinned["tasks"]}

    def pick_time(days_back: int, days_ahead: int, hour_min: int = 9, hour_max: int = 17) -> datetime:
        day = now.date() + timedelta(days=rng.randint(-days_back, days_ahead))
        return datetime(day.year, day.month, day.day, rng.randint(hour_min, hour_max - 1), rng.choice((0, 15, 30, 45)))

    tasks = []
    for i in range(fx["counts"]["tasks"]):
        tasks.append({"task_id": format_id(i), "task_name": rng.choice(fx["task_names"]),
                      "assigned_to_email": rng.choice(people), "list_name": rng.choice(fx["task_lists"]),
                      "due_date": (now.date() + timedelta(days=rng.randint(-30, 45))).isoformat(),
                      "board": rng.choice(fx["boards"])})
    _pin(tasks, pinned["tasks"], "task_id")

    emails = []
    for i in range(fx["counts"]["emails"]):
        subject_t, body_t = rng.choice(fx["email_templates"])
        task = rng.choice(fx["task_names"])  # filler never names a pinned task: those threads are pinned whole
        topic = rng.choice(fx["event_topics"])
        emails.append({"email_id": format_id(i), "inbox/outbox": rng.choice(("inbox", "inbox", "outbox")),
                       "sender/recipient": rng.choice(people), "subject": subject_t.format(task=task, topic=topic),
                       "sent_datetime": pick_time(90, 0).strftime("%Y-%m-%d %H:%M:%S"),
                       "body": body_t.format(task=task, topic=topic)})
    _pin(emails, pinned["emails"], "email_id")
    assert not any(name in e["subject"] for e in emails for name in pinned_task_names
                   if e["email_id"] not in {p["email_id"] for p in pinned["emails"]})

    events = []
    for i in range(fx["counts"]["events"]):
        # Filler meetings start 9:00-16:45 and last <= 60 min, so they end by 17:45 (the
        # "no meeting after 6pm" rule) and pinned late events stay the last of their day.
        start = pick_time(60, 60, 9, 17)
        events.append({"event_id": format_id(i), "event_name": rng.choice(fx["event_topics"]),
                       "participant_email": rng.choice(people), "event_start": start.strftime("%Y-%m-%d %H:%M:%S"),
                       "duration": str(rng.choice((15, 30, 45, 60)))})
    _pin(events, pinned["events"], "event_id")
    for event in events:
        if event["event_id"] not in {p["event_id"] for p in pinned["events"]}:
            for p in pinned["events"]:
                if event["event_start"][:10] == p["event_start"][:10] and event["event_start"] >= p["event_start"]:
                    raise AssertionError("filler event after a pinned last-of-day event")

    customers = []
    reserved = fx["reserved"]["customers"]
    for i in range(fx["counts"]["customers"]):
        while True:
            name = f"{rng.choice(fx['customer_first'])} {rng.choice(fx['customer_last'])}"
            last_contact = now.date() - timedelta(days=rng.randint(1, 120))
            record = {"customer_id": format_id(i), "assigned_to_email": rng.choice(people), "customer_name": name,
                      "customer_email": f"{name.lower().replace(' ', '.')}{i}@example.com",
                      "customer_phone": f"555-{rng.randint(100, 999)}-{rng.randint(1000, 9999)}",
                      "last_contact_date": last_contact.isoformat(), "product_interest": rng.choice(fx["products"]),
                      "status": rng.choice(fx["statuses"]), "notes": "",
                      "follow_up_by": (last_contact + timedelta(days=rng.randint(7, 60))).isoformat()}
            if not any(_matches(record, query) for query in reserved):
                break
        customers.append(record)
    _pin(customers, pinned["customers"], "customer_id")

    analytics = []
    start_day = date(2023, 8, 1)
    for day_offset in range((now.date() - start_day).days + 1):
        day = (start_day + timedelta(days=day_offset)).isoformat()
        for _ in range(rng.randint(3, 12)):
            analytics.append({"date_of_visit": day, "visitor_id": f"{rng.randrange(fx['counts']['visitors']):06x}",
                              "page_views": rng.randint(1, 20),
                              "session_duration_seconds": float(rng.randint(5, 1800)),
                              "traffic_source": rng.choice(fx["traffic_sources"]),
                              "user_engaged": int(rng.random() < 0.4)})

    directory = [{"name": n, "email": email_of(n, domain)} for n in fx["employees"]]
    return {"directory": directory, "emails": emails, "events": events, "tasks": tasks,
            "customers": customers, "analytics": analytics}


def _pin(records: list[dict[str, Any]], pinned: list[dict[str, Any]], id_field: str) -> None:
    """Overlay pinned fields onto the filler record with the same id (ids are list positions)."""
    for p in pinned:
        index = int(p[id_field])
        if index >= len(records):
            raise ValueError(f"pinned {id_field} {p[id_field]} is past the generated count {len(records)}")
        records[index].update(p)


def build(seed: int) -> sqlite3.Connection:
    """A new in-memory seed database. Use :func:`fresh_copy` for sessions."""
    data = generate(seed)
    db = sqlite3.connect(":memory:", check_same_thread=False)
    db.executescript(SCHEMA)
    db.executemany("INSERT INTO directory VALUES (:name, :email)", data["directory"])
    db.executemany("INSERT INTO emails VALUES (?, ?, ?, ?, ?, ?)",
                   [tuple(e[f] for f in EMAIL_FIELDS) for e in data["emails"]])
    for table, fields in (("events", EVENT_FIELDS), ("tasks", TASK_FIELDS), ("customers", CUSTOMER_FIELDS),
                          ("analytics", ANALYTICS_FIELDS)):
        marks = ", ".join("?" * len(fields))
        db.executemany(f"INSERT INTO {table} VALUES ({marks})", [tuple(r[f] for f in fields) for r in data[table]])
    db.executemany("INSERT INTO id_counters VALUES (?, ?)",
                   [(table, len(data[table])) for table, column in MUTABLE_TABLES.items() if column])
    db.executescript(_change_triggers())  # after the inserts: the seed itself is not a change
    db.commit()
    return db


def _change_triggers() -> str:
    sql = []
    for table, column in MUTABLE_TABLES.items():
        if column is None:
            continue
        for event, ref in (("INSERT", "NEW"), ("UPDATE", "OLD"), ("DELETE", "OLD")):
            sql.append(f"CREATE TRIGGER {table}_{event.lower()} AFTER {event} ON {table} BEGIN "
                       f"INSERT OR IGNORE INTO changes VALUES ('{table}', {ref}.{column}); END;")
    return "\n".join(sql)


_seed_dbs: dict[int, sqlite3.Connection] = {}
_seed_lock = threading.Lock()


def seed_database(seed: int) -> sqlite3.Connection:
    """The process-wide seed database for ``seed`` (built on first use, read-only afterwards)."""
    with _seed_lock:
        if seed not in _seed_dbs:
            _seed_dbs[seed] = build(seed)
        return _seed_dbs[seed]


def fresh_copy(seed: int) -> sqlite3.Connection:
    """A private, writable in-memory copy of the seed workplace."""
    copy = sqlite3.connect(":memory:", check_same_thread=False)
    seed_database(seed).backup(copy)
    return copy


@lru_cache(maxsize=8)
def largest_seed_ids(seed: int) -> dict[str, str]:
    """Largest id per mutable table in the seed: rows with larger ids were created in the episode."""
    db = seed_database(seed)
    return {table: db.execute(f"SELECT MAX({column}) FROM {table}").fetchone()[0]
            for table, column in MUTABLE_TABLES.items() if column is not None}
