"""probe: a test-only environment that exercises every framework path on demand.

Not under environments/: tests add ``tests/server_envs`` with ``VERIGYM_ENV_PATH``. Each
row picks a behaviour with ``mode``; the CPU-pool modes use stdlib functions (``time.sleep``,
``operator.add``) because those pickle by reference into a fresh worker interpreter.
"""

from __future__ import annotations

import asyncio
import operator
import time
from typing import Any, Iterator, Literal

from pydantic import BaseModel, Field

from servers.environment import EnvConfig, Environment, ToolError, Verdict, tool
from servers.wire import ResponseObject, RowModel, response_from_text

# Closed session states, in order: the TTL test reads it (in-process servers only).
CLOSED: list[dict[str, Any]] = []


class ProbeRow(RowModel):
    mode: Literal["answer", "raise", "sleep", "cpu_sleep", "cpu_add", "session"] = "answer"
    expected_answer: str = "right"
    sleep_s: float = Field(0.0, ge=0)
    target: int = 0


class ProbeConfig(EnvConfig):
    cpu_call_timeout_s: float = Field(5.0, description="deadline passed to self.cpu in cpu_* modes")


class BumpArgs(BaseModel):
    by: int = Field(1, ge=1, le=100)


class ProbeEnvironment(Environment):
    name = "probe"
    domain = "test"
    summary = "Test-only environment: answer match, errors, sleeps, CPU pool, sessions."
    Row = ProbeRow
    Config = ProbeConfig
    uses_cpu_pool = True
    stateful = True

    async def verify(self, row: ProbeRow, response: ResponseObject, session: Any | None) -> Verdict:
        if row.mode == "raise":
            raise RuntimeError("probe verifier exploded on purpose")
        if row.mode == "sleep":
            await asyncio.sleep(row.sleep_s)
        if row.mode == "cpu_sleep":
            await self.cpu(time.sleep, row.sleep_s, timeout=self.config.cpu_call_timeout_s)
        if row.mode == "cpu_add":
            total = await self.cpu(operator.add, 2, 3, timeout=self.config.cpu_call_timeout_s)
            return Verdict(reward=1.0 if total == 5 else 0.0, extras={"total": total})
        if row.mode == "session":
            count = session["count"] if session else -1
            return Verdict(reward=1.0 if count == row.target else 0.0, extras={"count": count})
        got = response.output_text.strip()
        return Verdict(reward=1.0 if got == row.expected_answer else 0.0, extras={"extracted_answer": got})

    async def seed_session(self, row: dict[str, Any]) -> Any:
        return {"count": 0, "tag": row.get("tag")}

    async def close_session(self, state: Any) -> None:
        if state is not None:
            CLOSED.append(state)

    @tool("Add `by` to the session counter and return it.")
    async def bump(self, session: Any, args: BumpArgs) -> dict[str, Any]:
        if session is None:
            raise ToolError("no session")
        session["count"] += args.by
        return {"count": session["count"], "tag": session["tag"]}

    @classmethod
    def generate(cls, *, tasks: list[str] | None, size: int, seed: int, **options: Any) -> Iterator[dict[str, Any]]:
        """Rows whose right answer is ``"<task>-<seed>-<i>"`` (a deterministic generator for CLI tests)."""
        unknown = set(tasks or []) - {"alpha", "beta"}
        if unknown:
            raise ValueError(f"unknown tasks {sorted(unknown)}; known: alpha, beta")
        names = tasks or ["alpha"]
        for i in range(size):
            answer = f"{names[i % len(names)]}-{seed}-{i}{options.get('suffix', '')}"
            yield {"responses_create_params": {"input": [{"role": "user", "content": "say " + answer}]},
                   "expected_answer": answer, "response": response_from_text(answer)}

    @classmethod
    async def prepare(cls, config: ProbeConfig, rows: list[dict[str, Any]], progress: Any) -> dict[str, Any]:
        for _ in rows:
            progress.update(1)
        return {"prepared": len(rows), "cpu_call_timeout_s": config.cpu_call_timeout_s}
