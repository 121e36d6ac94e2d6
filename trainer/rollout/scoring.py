"""Scoring: every call the trainer makes to an environment server, under one retry policy.

:class:`EnvCalls` is the trainer's client to the environment servers (``seed_session``, tool
calls, ``/verify``, ``/compare``). Every call goes through :class:`RetryPolicy`, the one retry
rule (``env.failed_rollout_retries`` in a run, ``--retries`` for ``driver rollout``): a call that
fails with a failure class — a 503 (after the wait its ``Retry-After`` asks for), a connection
error, a ``/verify`` answer carrying a failure class, a ``/compare`` that could not score the
group — is tried again that many times with exponential backoff; then the failure class stands
and the sample is masked. A 4xx on a session or tool call is an answer, not retried. The
underlying :class:`servers.client.EnvClient` retries nothing itself.

:class:`Scorer` scores finished samples: the verify step one-turn episodes stop before (the
engine's reward actor runs it while the next batch decodes), or one ``POST /compare`` for a group
of an environment that scores whole groups (genrm; with ``env.group_scoring=verify``, every sample
through ``/verify`` tagged with its group for the server's cohort buffer). :class:`EnvInfo` reads
what each environment is (stateful, serves ``/compare``) from its ``/info``, once.

Infrastructure failures never raise out of here: they come back as failure classes
(``connection_error``, ``overloaded``, ``verifier_error``...) with reward 0, counted in ``stats``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, TypeVar

from servers.client import EnvClient, EnvClientError, SessionHandle
from servers.wire import (FAILURE_CLASS_KEY, FAILURE_DETAIL_KEY, ROLLOUT_INDEX_KEY, TASK_INDEX_KEY, TERMINAL_FAILURES,
                          FailureClass)
from trainer.responses import single_turn_response
from trainer.rollout.sample import PROMPT_TOO_LONG, Sample
from trainer.rollout.task import Task

_NOT_RETRIED = {f.value for f in TERMINAL_FAILURES}  # the same row fails the same way every time

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    retries: int = 0          # tries after the first
    backoff_s: float = 0.2    # wait before retry n: backoff_s * 2**n, at most max_backoff_s (or what a 503 asked)
    max_backoff_s: float = 8.0

    def _wait(self, attempt: int, asked: float | None) -> float:
        return max(min(self.max_backoff_s, self.backoff_s * 2 ** attempt), asked or 0.0)

    async def run(self, attempt: Callable[[], Awaitable[tuple[T, float | None]]]) -> tuple[T, int]:
        """``attempt()`` returns (result, None) when the result stands, or (result, seconds the server
        asked to wait, 0 if none) when it failed with a failure class. Returns (result, retries used)."""
        n = 0
        while True:
            result, again = await attempt()
            if again is None or n == self.retries:
                return result, n
            await asyncio.sleep(self._wait(n, again))
            n += 1

    async def call(self, fn: Callable[[], Awaitable[T]]) -> T:
        """``fn()``, tried again while it raises a failure-classed EnvClientError (503, connection)."""
        n = 0
        while True:
            try:
                return await fn()
            except EnvClientError as exc:
                if exc.failure_class is None or n == self.retries:
                    raise
                await asyncio.sleep(self._wait(n, exc.retry_after))
            n += 1


def failure_reply(base: dict[str, Any], exc: Exception) -> dict[str, Any]:
    """A reply with reward 0 and the failure class of ``exc``: the server's own class when its body
    carries one, else the client's (``overloaded``, ``connection_error``), else ``invalid_row`` for
    a request the server refused (a 4xx: it cannot score this row; asking again gets the same
    answer), ``verifier_error`` for a 5xx and ``connection_error`` for no answer."""
    status = getattr(exc, "status", None)
    failure: Any = getattr(exc, "failure_class", None) or (
        FailureClass.CONNECTION_ERROR if status is None else
        FailureClass.INVALID_ROW if 400 <= status < 500 else FailureClass.VERIFIER_ERROR)
    body = getattr(exc, "body", None)
    if isinstance(body, dict) and body.get(FAILURE_CLASS_KEY):
        failure = body[FAILURE_CLASS_KEY]
    return {**base, "reward": 0.0, FAILURE_CLASS_KEY: getattr(failure, "value", failure), FAILURE_DETAIL_KEY: str(exc)[:2000]}


class EnvCalls:
    """The trainer's calls to environment servers (module docstring). Use as ``async with``."""

    def __init__(self, urls: dict[str, Any], *, retry: RetryPolicy, timeout_s: float = 300.0,
                 max_concurrency_per_server: int = 64):
        self.retry = retry
        self.client = EnvClient(urls, max_concurrency_per_server=max_concurrency_per_server, timeout_s=timeout_s,
                                retries=0)

    async def __aenter__(self) -> "EnvCalls":
        return self

    async def __aexit__(self, *_: Any) -> None:
        await self.close()

    async def close(self) -> None:
        await self.client.close()

    async def seed_session(self, env: str, row: dict[str, Any]) -> SessionHandle:
        return await self.retry.call(lambda: self.client.seed_session(env, row))

    async def call_tool(self, session: SessionHandle, name: str, arguments: dict[str, Any]) -> tuple[int, Any]:
        return await self.retry.call(lambda: self.client.call_tool(session, name, arguments))

    async def verify(self, env: str, row: dict[str, Any], response: dict[str, Any], *,
                     session: SessionHandle | None = None) -> tuple[dict[str, Any], int]:
        """``/verify``; returns (reply, retries used). A reply that still carries a failure class
        after the retries is returned as it is (the caller masks the sample). A row the server
        refuses (a 4xx: it cannot score it) is not asked again: the same row gets the same answer."""
        async def attempt() -> tuple[dict[str, Any], float | None]:
            wait = 0.0
            try:
                reply = await self.client.verify(env, row, response, session=session, raise_on_failure=True)
            except EnvClientError as exc:
                reply, wait = failure_reply({**row, "response": response}, exc), exc.retry_after or 0.0
            if reply.get(FAILURE_CLASS_KEY) is None or reply[FAILURE_CLASS_KEY] in _NOT_RETRIED:
                return reply, None
            return reply, wait

        return await self.retry.run(attempt)

    async def compare(self, env: str, body: dict[str, Any], n: int) -> tuple[list[float], list[str | None], int]:
        """``POST /compare`` of ``n`` responses: (rewards, failure class per response, retries used)."""
        async def attempt() -> tuple[tuple[list[float], list[str | None]], float | None]:
            try:
                status, reply = await self.client.post(env, "/compare", body)
            except EnvClientError as exc:
                failure = exc.failure_class.value if exc.failure_class else FailureClass.CONNECTION_ERROR.value
                return ([0.0] * n, [failure] * n), exc.retry_after or 0.0
            if status != 200:  # the server could not score the group
                return ([0.0] * n, [f"http_error:{status}"] * n), 0.0
            failures = [f and str(f.get(FAILURE_CLASS_KEY)) for f in reply.get("failures") or [None] * n]
            return ([float(r) for r in reply["rewards"]], failures), (0.0 if any(failures) else None)

        (rewards, failures), retried = await self.retry.run(attempt)
        return rewards, failures, retried


class EnvInfo:
    """What each environment server says about itself on ``/info``, asked once per environment
    (an unreachable server is asked again next time; meanwhile it counts as neither stateful nor
    scoring groups, and its rollouts fail with a class)."""

    def __init__(self, urls: dict[str, Any]):
        self.urls = urls
        self._info: dict[str, dict[str, Any]] = {}

    def get(self, env: str) -> dict[str, Any] | None:
        if env not in self._info:
            from trainer.fleet import fetch_info

            url = self.urls.get(env)
            if url is None:
                return None  # no server for it here: scoring reports the routing error
            try:
                self._info[env] = fetch_info(url if isinstance(url, str) else url[0])
            except (OSError, ValueError):
                return None
        return self._info[env]

    async def aget(self, env: str) -> dict[str, Any] | None:
        return self._info[env] if env in self._info else await asyncio.to_thread(self.get, env)

    def stateful(self, env: str) -> bool:
        """It serves tools or keeps per-rollout state: its rollouts run in a session."""
        return bool((self.get(env) or {}).get("stateful"))

    async def scores_groups(self, env: str) -> bool:
        """It serves ``POST /compare`` (rewards relative to the group, e.g. genrm)."""
        return "compare" in ((await self.aget(env) or {}).get("endpoints") or {})


def sample_response(model: str, s: Sample, task: Task) -> dict[str, Any]:
    """The Responses-API ``response`` of a sample that does not carry one (built from its text: a
    test's sample, a rollouts file's): its tool calls are ``function_call`` items when the row
    offers tools."""
    return single_turn_response(s.text, create_params=task.create_params, model=model, prompt_ids=s.prompt_ids,
                                gen_ids=s.gen_ids, logprobs=s.gen_logprobs, versions=s.versions, truncated=s.truncated)


class Scorer:
    """Scores finished samples of a task (module docstring); ``stats`` counts failures and retries."""

    def __init__(self, env: EnvCalls, info: EnvInfo, *, model: str, group_scoring: str = "compare"):
        self.env, self.info, self.model, self.group_scoring = env, info, model, group_scoring
        self.stats: dict[str, Any] = {"failed": 0, "retried": 0, "failures_by_class": {}}

    async def score_group(self, task: Task, samples: list[Sample], cohort: int, *, cohorts: bool = True) -> None:
        """Score one task's samples. ``cohort`` names the group for a cohort ``/verify``; with
        ``cohorts=False`` (validation) a group-scoring environment always gets ``/compare``."""
        if any(s.scored for s in samples):  # session rollouts: verified at the end of each episode
            await asyncio.gather(*(self._verify(task, s) for s in samples))
            return
        if await self.info.scores_groups(task.env):
            if self.group_scoring == "compare" or not cohorts:
                return await self._compare(task, samples)
            # cohort /verify: the server groups the samples by task index and waits for all of them
            sent = [s for s in samples if s.failure != PROMPT_TOO_LONG]
            tagged = {**task.row, TASK_INDEX_KEY: cohort, "num_rollouts_per_prompt": len(sent)}
            await asyncio.gather(*(self._verify(task, s, {**tagged, ROLLOUT_INDEX_KEY: j}) for j, s in enumerate(samples)))
            return
        await asyncio.gather(*(self._verify(task, s) for s in samples))

    async def _verify(self, task: Task, s: Sample, row: dict[str, Any] | None = None) -> None:
        s.env = task.env
        if s.failure == PROMPT_TOO_LONG or s.scored:  # never generated, or a session rollout verified already
            self.stats["retried"] += s.verify_retries
            if s.failure:
                self.count_failure(s.failure)
            return
        response = s.response if s.response is not None else sample_response(self.model, s, task)
        reply, retried = await self.env.verify(task.env, task.row if row is None else row, response)
        self.stats["retried"] += retried
        failure = reply.get(FAILURE_CLASS_KEY)
        s.reward = float(reply.get("reward", 0.0)) if failure is None else 0.0
        s.failure, s.response, s.scored = None if failure is None else str(failure), None, True
        if s.failure is not None:
            self.count_failure(s.failure)

    async def _compare(self, task: Task, samples: list[Sample]) -> None:
        """One ``POST /compare`` for the group; per-response failure classes come back masked."""
        for s in samples:
            s.env = task.env
            if s.failure == PROMPT_TOO_LONG:
                self.count_failure(s.failure)
        todo = [s for s in samples if s.failure != PROMPT_TOO_LONG]
        if len(todo) < 2:  # nothing to compare a lone response with
            for s in todo:
                s.reward, s.failure = 0.0, "group_too_small"
                self.count_failure(s.failure)
            return
        params = task.create_params
        history = params.get("input", [])
        history = [{"role": "user", "content": history}] if isinstance(history, str) else list(history)
        if params.get("instructions"):
            history.insert(0, {"role": "system", "content": params["instructions"]})
        body: dict[str, Any] = {"conversation_history": history,
                                "response_objs": [s.response if s.response is not None else
                                                  sample_response(self.model, s, task) for s in todo]}
        if task.row.get("principle") is not None:
            body["principle"] = task.row["principle"]
        rewards, failures, retried = await self.env.compare(task.env, body, len(todo))
        self.stats["retried"] += retried
        for s, reward, failure in zip(todo, rewards, failures):
            s.reward, s.failure = (reward, None) if failure is None else (0.0, failure)
            s.response, s.scored = None, True
            if failure is not None:
                self.count_failure(failure)

    def count_failure(self, failure: str) -> None:
        self.stats["failed"] += 1
        self.stats["failures_by_class"][failure] = self.stats["failures_by_class"].get(failure, 0) + 1
