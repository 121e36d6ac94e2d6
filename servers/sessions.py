"""Per-rollout session state, keyed by the session cookie ``/seed_session`` sets.

Sessions are isolated (one state object each), expire after ``ttl`` idle seconds, and are
freed on ``/verify`` — NeMo-Gym's protocol has no close call, so verify is the end of a
rollout. Freeing calls the environment's ``close_session`` (sandbox, database...).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable


@dataclass
class Session:
    id: str
    state: Any
    created: float = field(default_factory=time.monotonic)
    last_used: float = field(default_factory=time.monotonic)
    # Tool calls of one rollout run one at a time: a session's state is not shared-safe.
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class SessionStore:
    def __init__(self, *, ttl_s: float, max_sessions: int, close: Callable[[Any], Awaitable[None]]):
        self.ttl_s = ttl_s
        self.max_sessions = max_sessions
        self._close = close
        self._sessions: dict[str, Session] = {}
        self._sweeper: asyncio.Task | None = None
        self.expired = 0
        # Set by a multi-worker server (servers/worker_group.py): ids name the worker that owns
        # the state ("w3-<hex>"), so any worker that accepts a later call can route it there.
        self.id_prefix = ""

    def __len__(self) -> int:
        return len(self._sessions)

    @property
    def full(self) -> bool:
        return len(self._sessions) >= self.max_sessions

    def start(self) -> None:
        self._sweeper = asyncio.create_task(self._sweep_forever())

    def add(self, state: Any) -> Session:
        session = Session(id=self.id_prefix + uuid.uuid4().hex, state=state)
        self._sessions[session.id] = session
        return session

    def get(self, session_id: str | None) -> Session | None:
        session = self._sessions.get(session_id or "")
        if session is not None:
            session.last_used = time.monotonic()
        return session

    async def pop_and_close(self, session_id: str) -> None:
        session = self._sessions.pop(session_id, None)
        if session is not None:
            await self._close(session.state)

    async def _sweep_forever(self) -> None:
        interval = max(0.05, min(30.0, self.ttl_s / 4))
        while True:
            await asyncio.sleep(interval)
            await self.sweep()

    async def sweep(self) -> int:
        now = time.monotonic()
        stale = [s.id for s in self._sessions.values() if now - s.last_used > self.ttl_s and not s.lock.locked()]
        for session_id in stale:
            self.expired += 1
            await self.pop_and_close(session_id)
        return len(stale)

    async def close_all(self) -> None:
        if self._sweeper:
            self._sweeper.cancel()
        for session_id in list(self._sessions):
            await self.pop_and_close(session_id)
