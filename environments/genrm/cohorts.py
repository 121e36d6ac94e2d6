"""Cohort ``/verify``: the rollouts of one prompt wait for each other, then are scored together.

A GenRM reward is relative to the other responses to the same prompt, but ``/verify`` carries
one response. :class:`CohortBuffer` holds each arriving response under its cohort key until the
cohort has ``size`` members, then runs ``score`` once for all of them (in a task of its own, so a
member that goes away cannot cancel its siblings' scoring) and hands each member its verdict.

Bounds, so that a group that never completes (a sample failed upstream, a client died) can neither
hang its other requests nor grow memory:

* a cohort expires ``timeout_s`` after its first member arrived: every member still waiting is
  answered with failure class ``cohort_timeout`` and the cohort is dropped;
* at most ``max_open`` cohorts wait at once; a response that would open one more is answered at
  once with ``cohort_overflow`` (the trainer masks and counts it);
* a member stores only what scoring needs (the response's reasoning and answer text, its
  rollout index) and its future; a member whose request is cancelled leaves its cohort.

A member re-sent with a rollout index the cohort already holds (a client retry after a dropped
connection) replaces the old one, whose request is answered ``cohort_duplicate``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Generic, TypeVar

T = TypeVar("T")  # what a member carries into scoring
R = TypeVar("R")  # what each member gets back

COHORT_TIMEOUT = "cohort_timeout"
COHORT_OVERFLOW = "cohort_overflow"
COHORT_DUPLICATE = "cohort_duplicate"


class CohortFailure(Exception):
    """A member could not be scored with its cohort; ``failure_class`` names why."""

    def __init__(self, failure_class: str, detail: str):
        super().__init__(detail)
        self.failure_class, self.detail = failure_class, detail


@dataclass
class _Member(Generic[T]):
    item: T
    rollout_index: int | None
    future: asyncio.Future


@dataclass
class _Cohort(Generic[T]):
    size: int
    members: list[_Member[T]] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None


class CohortBuffer(Generic[T, R]):
    """``await buffer.join(key, size, item, rollout_index)`` -> this member's result (or raises
    :class:`CohortFailure`). ``score(items) -> results`` gets the cohort's items ordered by rollout
    index when every member has one (a stable order whatever order requests arrived in), else by
    arrival, and returns one result per item in that order."""

    def __init__(self, score: Callable[[list[T]], Awaitable[list[R]]], *, timeout_s: float, max_open: int):
        self.score, self.timeout_s, self.max_open = score, timeout_s, max_open
        self._open: dict[str, _Cohort[T]] = {}
        self._scoring: set[asyncio.Task] = set()
        self.counts = {"completed": 0, COHORT_TIMEOUT: 0, COHORT_OVERFLOW: 0, COHORT_DUPLICATE: 0}

    @property
    def open_cohorts(self) -> int:
        return len(self._open)

    @property
    def waiting_members(self) -> int:
        return sum(len(c.members) for c in self._open.values())

    async def join(self, key: str, size: int, item: T, rollout_index: int | None = None) -> R:
        loop = asyncio.get_running_loop()
        cohort = self._open.get(key)
        if cohort is None:
            if len(self._open) >= self.max_open:
                self.counts[COHORT_OVERFLOW] += 1
                raise CohortFailure(COHORT_OVERFLOW, f"{self.max_open} cohorts are already waiting for their other "
                                                     "rollouts (config max_open_cohorts); this one was not opened")
            cohort = self._open[key] = _Cohort(size=size)
            cohort.timer = loop.call_later(self.timeout_s, self._expire, key, cohort)
        member: _Member[T] = _Member(item, rollout_index, loop.create_future())
        if rollout_index is not None:
            for old in [m for m in cohort.members if m.rollout_index == rollout_index]:
                cohort.members.remove(old)
                self.counts[COHORT_DUPLICATE] += 1
                _fail(old.future, COHORT_DUPLICATE, f"rollout {rollout_index} was sent again; the newer request counts")
        cohort.members.append(member)
        if len(cohort.members) >= cohort.size:
            self._close(key, cohort)
            task = asyncio.ensure_future(self._run(cohort.members))
            self._scoring.add(task)
            task.add_done_callback(self._scoring.discard)
        try:
            return await asyncio.shield(member.future)
        except asyncio.CancelledError:
            # The request went away (client gone, its deadline): it leaves a cohort still waiting.
            if self._open.get(key) is cohort and member in cohort.members:
                cohort.members.remove(member)
                if not cohort.members:
                    self._close(key, cohort)
            raise

    def _close(self, key: str, cohort: _Cohort[T]) -> None:
        if self._open.get(key) is cohort:
            del self._open[key]
        if cohort.timer is not None:
            cohort.timer.cancel()
            cohort.timer = None

    def _expire(self, key: str, cohort: _Cohort[T]) -> None:
        if self._open.get(key) is not cohort:
            return
        self._close(key, cohort)
        for m in cohort.members:
            self.counts[COHORT_TIMEOUT] += 1
            _fail(m.future, COHORT_TIMEOUT, f"the cohort got {len(cohort.members)} of its {cohort.size} rollouts "
                                            f"within {self.timeout_s:g}s (config cohort_timeout_s); the others never came")

    async def _run(self, members: list[_Member[T]]) -> None:
        if all(m.rollout_index is not None for m in members):
            members = sorted(members, key=lambda m: m.rollout_index)  # type: ignore[arg-type,return-value]
        try:
            results = await self.score([m.item for m in members])
        except Exception as exc:  # noqa: BLE001 - handed to every member; the server classifies it
            for m in members:
                if not m.future.done():
                    m.future.set_exception(exc)
                    m.future.exception()  # retrieved here: a member that already left never reads it
            return
        self.counts["completed"] += 1
        for m, result in zip(members, results):
            if not m.future.done():
                m.future.set_result(result)

    async def close(self) -> None:
        for key, cohort in list(self._open.items()):
            self._close(key, cohort)
            for m in cohort.members:
                _fail(m.future, COHORT_TIMEOUT, "the server is shutting down")
        for task in list(self._scoring):
            task.cancel()


def _fail(future: asyncio.Future, failure_class: str, detail: str) -> None:
    if not future.done():
        future.set_exception(CohortFailure(failure_class, detail))
        future.exception()  # retrieved: a member that already left must not log "never retrieved"


def describe_counts(buffer: CohortBuffer[Any, Any]) -> dict[str, int]:
    return {"open_cohorts": buffer.open_cohorts, "waiting_members": buffer.waiting_members, **buffer.counts}
