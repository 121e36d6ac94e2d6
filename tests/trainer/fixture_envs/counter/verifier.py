"""Test fixture: a stateful tool environment (seed_session -> increment... -> verify)."""

from pydantic import BaseModel

from servers.environment import Environment, Verdict, tool
from servers.wire import RowModel


class CounterRow(RowModel):
    initial_count: int = 0
    expected_count: int


class IncrementArgs(BaseModel):
    amount: int = 1


class Counter(Environment):
    name = "counter"
    domain = "test"
    summary = "stateful counter with an increment tool (trainer test fixture)"
    Row = CounterRow
    stateful = True

    async def seed_session(self, row):
        return {"count": int(row.get("initial_count", 0))}

    @tool("Add amount to the counter and return the new count.")
    async def increment(self, session, args: IncrementArgs):
        session["count"] += args.amount
        return {"count": session["count"]}

    async def verify(self, row, response, session):
        count = session["count"] if session else None
        return Verdict(reward=1.0 if count == row.expected_count else 0.0, extras={"final_count": count})
