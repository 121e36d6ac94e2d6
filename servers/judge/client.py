"""Asking a judge: cache, in-flight coalescing, retries with backoff, the breaker, parsing.

:class:`Judge` is one named judge; :class:`JudgeSet` builds the judges of a server from
its config and owns their endpoints. ``Judge.ask`` returns a parsed verdict or raises
:class:`JudgeError`; it never invents one.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Generic, TypeVar

import orjson

from servers.judge.config import JudgeConfig
from servers.judge.endpoint import CallFailed, CircuitBreaker, Endpoint
from servers.judge.protocol import BadJudgeReply, Message, reply_text, request_body, request_path, strip_think
from servers.metrics import JudgeMetrics, render_judge_metrics

T = TypeVar("T")
log = logging.getLogger("verigym.judge")


class JudgeError(Exception):
    """The judge gave no usable verdict. ``kind``: connection | timeout | rate_limited |
    http_5xx | http_4xx | bad_response | unparseable | circuit_open | config. The server maps
    it to failure class ``judge_error`` (masked sample), never to a score."""

    def __init__(self, judge: str, kind: str, detail: str):
        super().__init__(f"judge {judge!r} {kind}: {detail}")
        self.judge, self.kind, self.detail = judge, kind, detail


class _CallerGone(Exception):
    """The caller making a shared call was cancelled; those waiting on it make the call themselves."""


@dataclass(frozen=True)
class JudgeAnswer(Generic[T]):
    verdict: T
    text: str  # the judge's reply, reasoning stripped
    cached: bool  # answered from the cache or by an identical call already in flight


class _LRU:
    def __init__(self, size: int):
        self.size = size
        self.data: OrderedDict[str, str] = OrderedDict()

    def get(self, key: str) -> str | None:
        value = self.data.get(key)
        if value is not None:
            self.data.move_to_end(key)
        return value

    def put(self, key: str, value: str) -> None:
        if self.size <= 0:
            return
        self.data[key] = value
        self.data.move_to_end(key)
        if len(self.data) > self.size:
            self.data.popitem(last=False)


class Judge:
    """One named judge. Use through :meth:`ask`."""

    def __init__(self, name: str, cfg: JudgeConfig, endpoint: Endpoint, metrics: JudgeMetrics):
        self.name, self.cfg, self.endpoint, self.metrics = name, cfg, endpoint, metrics
        self.cache = _LRU(cfg.cache_size)
        self._in_flight: dict[str, asyncio.Future[str]] = {}
        key = cfg.api_key()
        self.headers: dict[str, str] = {"Authorization": f"Bearer {key}"} if key else {}

    async def ask(self, messages: list[Message], parse: Callable[[str], T | None]) -> JudgeAnswer[T]:
        """Send ``messages``; return ``parse(reply)`` once it is not None.

        ``parse`` gets the reply with ``<think>`` stripped (config ``strip_think``) and returns
        the verdict or None when the reply holds none (the judge is asked again, up to
        ``parse_retries`` times). An identical request (same model, API, sampling, messages)
        is answered from the cache, or joins the identical call already in flight.
        """
        body = request_body(self.cfg, messages)
        key = hashlib.blake2b(orjson.dumps([self.cfg.api, body], option=orjson.OPT_SORT_KEYS),
                              digest_size=16).hexdigest()
        # cache_size 0 turns off both reuses: the cache and joining an identical call in flight.
        reuse = self.cache.size > 0
        while reuse:
            text = self.cache.get(key)
            joined = self._in_flight.get(key) if text is None else None
            if joined is not None:
                try:
                    # shield: this caller's cancellation must not cancel the call others wait on
                    text = await asyncio.shield(joined)
                except _CallerGone:
                    continue  # the caller making the call was cancelled: make it (or join another)
                except JudgeError:
                    self.metrics.asks["error"] += 1
                    raise
            if text is None:
                break
            verdict = parse(text)
            if verdict is None:
                break  # a cached reply this parser cannot read: ask afresh
            self.metrics.cache_hits += 1
            self.metrics.asks["ok"] += 1
            return JudgeAnswer(verdict, text, cached=True)
        self.metrics.cache_misses += 1
        # The call runs in this caller's task (no task per call: it is the hot path); callers
        # asking the same meanwhile wait on ``shared``, which this caller settles however it ends.
        shared: asyncio.Future[str] | None = asyncio.get_running_loop().create_future() if reuse else None
        if shared is not None:
            self._in_flight[key] = shared
        try:
            text = await self._fetch_parsed(body, parse)
        except JudgeError as exc:
            self.metrics.asks["error"] += 1
            self._settle(key, shared, exc)
            raise
        except BaseException:
            self._settle(key, shared, _CallerGone())
            raise
        self._settle(key, shared, text)
        self.metrics.asks["ok"] += 1
        verdict = parse(text)
        assert verdict is not None  # _fetch_parsed returns only texts that parse
        return JudgeAnswer(verdict, text, cached=False)

    def _settle(self, key: str, shared: asyncio.Future[str] | None, outcome: str | BaseException) -> None:
        if shared is None:
            return
        self._in_flight.pop(key, None)
        if isinstance(outcome, BaseException):
            shared.set_exception(outcome)
            shared.exception()  # retrieved: nobody may be waiting
        else:
            self.cache.put(key, outcome)
            shared.set_result(outcome)

    async def _fetch_parsed(self, body: dict[str, Any], parse: Callable[[str], Any]) -> str:
        text = ""
        for _ in range(self.cfg.parse_retries + 1):
            raw = await self._call(body)
            text = strip_think(raw) if self.cfg.strip_think else raw
            if parse(text) is not None:
                return text
        self.metrics.errors["unparseable"] += 1
        shown = text if text else "(empty after removing reasoning)"
        raise JudgeError(self.name, "unparseable",
                         f"no verdict in {self.cfg.parse_retries + 1} replies; last: {shown[-500:]!r}")

    async def _call(self, body: dict[str, Any]) -> str:
        """One completion, retried with jittered exponential backoff; fails fast while the breaker is open."""
        cfg, breaker = self.cfg, self.endpoint.breaker
        path = request_path(cfg)
        attempt = 0
        while True:
            if not breaker.allow():
                self.metrics.errors["circuit_open"] += 1
                raise JudgeError(self.name, "circuit_open",
                                 f"{self.endpoint.base_url} failed {breaker.consecutive} calls in a row; "
                                 f"calls fail fast until a probe succeeds (every {cfg.breaker_reset_s:g}s)")
            try:
                async with self.endpoint.slots:
                    start = time.perf_counter()
                    try:
                        payload = await self.endpoint.post(path, body, self.headers, cfg.timeout_s)
                    finally:
                        self.metrics.observe_call(time.perf_counter() - start)
                text = reply_text(cfg.api, payload)
            except BadJudgeReply as exc:
                failure = CallFailed("bad_response", str(exc), retryable=True, trips_breaker=False)
            except CallFailed as exc:
                failure = exc
            except asyncio.CancelledError:
                breaker.record_neutral()  # a cancelled probe must not hold the half-open slot forever
                raise
            else:
                if breaker.opened_at is not None:
                    log.warning("judge %r at %s answers again: circuit closed", self.name, self.endpoint.base_url)
                breaker.record_success()
                self.metrics.circuit_open = 0
                return text
            self.metrics.errors[failure.kind] += 1
            if failure.trips_breaker:
                was_open = breaker.opened_at is not None
                breaker.record_failure()
                if breaker.opened_at is not None and not was_open:
                    log.warning("judge %r at %s failed %d calls in a row (last: %s); its calls fail fast for %gs, "
                                "then one probe call decides", self.name, self.endpoint.base_url,
                                breaker.consecutive, failure, breaker.reset_s)
            else:
                breaker.record_neutral()
            self.metrics.circuit_open = int(breaker.opened_at is not None)
            if not failure.retryable or attempt >= cfg.max_retries:
                tries = f" (after {attempt + 1} attempts)" if attempt else ""
                raise JudgeError(self.name, failure.kind, failure.detail + tries)
            attempt += 1
            self.metrics.retries += 1
            delay = min(cfg.backoff_max_s, cfg.backoff_s * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)
            if failure.retry_after_s is not None:
                delay = min(cfg.backoff_max_s, max(delay, failure.retry_after_s))
            await asyncio.sleep(delay)


class JudgeSet:
    """The named judges of one server. Judges with the same ``base_url`` share an endpoint
    (connection pool, concurrency bound = the largest ``max_concurrency`` among them, breaker)."""

    def __init__(self, configs: dict[str, JudgeConfig], *, env_name: str = ""):
        self.endpoints: dict[str, Endpoint] = {}
        self.judges: dict[str, Judge] = {}
        for name, cfg in configs.items():
            endpoint = self.endpoints.get(cfg.base_url)
            if endpoint is None:
                shared = [c for c in configs.values() if c.base_url == cfg.base_url]
                endpoint = Endpoint(cfg.base_url, max(c.max_concurrency for c in shared),
                                    CircuitBreaker(min(c.breaker_failures for c in shared),
                                                   min(c.breaker_reset_s for c in shared)))
                self.endpoints[cfg.base_url] = endpoint
            try:
                self.judges[name] = Judge(name, cfg, endpoint, JudgeMetrics(env_name, name))
            except ValueError as exc:  # api_key_env unset
                raise JudgeError(name, "config", str(exc)) from None
        self._health: tuple[float, dict[str, Any]] | None = None

    def __getitem__(self, name: str) -> Judge:
        return self.judges[name]

    async def close(self) -> None:
        for endpoint in self.endpoints.values():
            await endpoint.close()

    async def health(self, max_age_s: float = 2.0) -> dict[str, Any]:
        """Per judge: ready (its endpoint lists its model on ``GET /models``) and breaker state.
        A server that answers but serves another model is not ready: every call would fail.
        Cached ``max_age_s`` so a health poller does not turn into load on the judge."""
        now = time.monotonic()
        if self._health is not None and now - self._health[0] < max_age_s:
            return self._health[1]
        # One probe per endpoint and key (a hosted /models needs the key as much as a completion).
        probes: dict[tuple[str, str], asyncio.Future[dict[str, Any]]] = {}
        for judge in self.judges.values():
            auth = judge.headers.get("Authorization", "")
            if (judge.cfg.base_url, auth) not in probes:
                probes[judge.cfg.base_url, auth] = asyncio.ensure_future(judge.endpoint.served_models(judge.headers))
        report: dict[str, Any] = {}
        for name, judge in self.judges.items():
            probe = await probes[judge.cfg.base_url, judge.headers.get("Authorization", "")]
            state = judge.endpoint.breaker.state
            entry: dict[str, Any] = {"base_url": judge.cfg.base_url, "model": judge.cfg.model, "breaker": state}
            error = probe.get("error")
            if "models" in probe:
                entry["served_models"] = probe["models"]
                if judge.cfg.model not in probe["models"]:
                    served = ", ".join(repr(m) for m in probe["models"][:10]) or "none"
                    error = (f"judge {name!r}: model {judge.cfg.model!r} is not served at {judge.cfg.base_url} "
                             f"(served: {served}); set judges.{name}.model to one of them or point "
                             f"judges.{name}.base_url at a server of {judge.cfg.model!r}")
            elif error:
                error = f"judge {name!r}: {error}"
            if error is None and state == "open":
                error = (f"judge {name!r}: its circuit is open ({judge.endpoint.breaker.consecutive} failed calls "
                         "in a row); it closes when a probe call succeeds")
            entry["ok"] = error is None
            if error is not None:
                entry["error"] = error
            report[name] = entry
        self._health = (now, report)
        return report

    def metrics_text(self) -> str:
        return render_judge_metrics([j.metrics for j in self.judges.values()])
