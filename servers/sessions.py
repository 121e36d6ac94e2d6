"""Per-rollout session state, keyed by the session cookie ``/seed_session`` sets.

Sessions are isolated (one state object each), expire after ``ttl`` idle seconds, and are
freed on ``/verify`` (verify ends a rollout: Gym <= 0.6 has no close call) or on
``/close_session`` (Gym >= 0.7). Freeing calls the environment's ``close_session`` (sandbox,
database...).

A Gym >= 0.7 seed names its session itself (``resources_session_id``): seeding that id again
for the same episode returns the same session, and an id that was closed (or closed before it
was ever seeded) is remembered so a late seed cannot bring it back (Gym's session contract).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

# Closed Gym session ids remembered against a late seed; the oldest are forgotten past this.
MAX_CLOSED_IDS = 100_000


@dataclass
class SessionFailure:
    """Why a session's rollout cannot be scored (its seed failed inside a rollout): its tools
    answer with the reason and its verify answers a masked sample carrying it."""
    failure_class: Any  # servers.wire.FailureClass
    detail: str


@dataclass
class Session:
    id: str
    state: Any
    created: float = field(default_factory=time.monotonic)
    last_used: float = field(default_factory=time.monotonic)
    # Tool calls of one rollout run one at a time: a session's state is not shared-safe.
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    external_id: str | None = None  # Gym >= 0.7's resources_session_id
    episode: Any = None  # Gym >= 0.7's episode_id, the other half of a seed's identity
    failure: SessionFailure | None = None


class SessionStore:
    def __init__(self, *, ttl_s: float, max_sessions: int, close: Callable[[Any], Awaitable[None]]):
        self.ttl_s = ttl_s
        self.max_sessions = max_sessions
        self._close = close
        self._sessions: dict[str, Session] = {}
        self._external: dict[str, Session] = {}
        self._closed_external: OrderedDict[str, None] = OrderedDict()
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

    def add(self, state: Any, *, external_id: str | None = None, episode: Any = None,
            failure: SessionFailure | None = None) -> Session:
        session = Session(id=self.id_prefix + uuid.uuid4().hex, state=state, external_id=external_id,
                          episode=episode, failure=failure)
        self._sessions[session.id] = session
        if external_id is not None:
            self._external[external_id] = session
        return session

    def get(self, session_id: str | None) -> Session | None:
        session = self._sessions.get(session_id or "")
        if session is not None:
            session.last_used = time.monotonic()
        return session

    def by_external(self, external_id: str) -> Session | None:
        return self._external.get(external_id)

    def was_closed(self, external_id: str) -> bool:
        return external_id in self._closed_external

    def remember_closed(self, external_id: str) -> None:
        self._closed_external[external_id] = None
        self._closed_external.move_to_end(external_id)
        while len(self._closed_external) > MAX_CLOSED_IDS:
            self._closed_external.popitem(last=False)

    async def pop_and_close(self, session_id: str) -> None:
        session = self._sessions.pop(session_id, None)
        if session is None:
            return
        if session.external_id is not None:
            self._external.pop(session.external_id, None)
            self.remember_closed(session.external_id)
        await self._close(session.state)

    async def close_external(self, external_id: str) -> None:
        """Close the session seeded under ``external_id``, once. The environment's close runs
        first: when it raises, the session stays open (and the caller may retry the close)."""
        session = self._external.get(external_id)
        if session is not None:
            await self._close(session.state)
            self._sessions.pop(session.id, None)
            self._external.pop(external_id, None)
        self.remember_closed(external_id)

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
