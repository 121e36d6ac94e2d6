"""One judge endpoint: a pooled aiohttp session, a concurrency bound, a circuit breaker,
and a single HTTP attempt that classifies every way it can fail.

Judges that share a ``base_url`` share one :class:`Endpoint` (one connection pool, one
breaker: the server behind the URL is up or down for all of them).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable

import aiohttp
import orjson


class CallFailed(Exception):
    """One HTTP attempt failed. ``kind`` names why (a metric label and the failure detail);
    ``retryable`` says whether another attempt may succeed; ``trips_breaker`` whether it is
    evidence that the endpoint is down (a 400 or a 429 is not)."""

    def __init__(self, kind: str, detail: str, *, retryable: bool, trips_breaker: bool,
                 retry_after_s: float | None = None):
        super().__init__(f"{kind}: {detail}")
        self.kind, self.detail = kind, detail
        self.retryable, self.trips_breaker = retryable, trips_breaker
        self.retry_after_s = retry_after_s


class CircuitBreaker:
    """closed -> (``failures`` consecutive failures) -> open: calls fail fast for ``reset_s``
    -> half-open: one probe call goes through; its success closes, its failure re-opens.

    Failing fast matters for RL: with a dead judge every verification would otherwise hold a
    slot for ``timeout_s x retries`` and the whole rollout batch would stall behind it.
    """

    def __init__(self, failures: int, reset_s: float, clock: Callable[[], float] = time.monotonic):
        self.failures, self.reset_s, self.clock = failures, reset_s, clock
        self.consecutive = 0
        self.opened_at: float | None = None
        self.probe_in_flight = False
        self.opened_count = 0

    @property
    def state(self) -> str:
        if self.opened_at is None:
            return "closed"
        return "half_open" if self.clock() - self.opened_at >= self.reset_s else "open"

    def allow(self) -> bool:
        state = self.state
        if state == "closed":
            return True
        if state == "half_open" and not self.probe_in_flight:
            self.probe_in_flight = True
            return True
        return False

    def record_success(self) -> None:
        self.consecutive = 0
        self.opened_at = None
        self.probe_in_flight = False

    def record_failure(self) -> None:
        self.consecutive += 1
        if self.probe_in_flight or (self.opened_at is None and self.consecutive >= self.failures):
            self.opened_at = self.clock()
            self.opened_count += 1
        self.probe_in_flight = False

    def record_neutral(self) -> None:
        """An attempt that says nothing about the endpoint being up (4xx, 429): free the probe slot."""
        self.probe_in_flight = False


class Endpoint:
    def __init__(self, base_url: str, max_concurrency: int, breaker: CircuitBreaker):
        self.base_url = base_url
        self.slots = asyncio.Semaphore(max_concurrency)
        self.max_concurrency = max_concurrency
        self.breaker = breaker
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # limit = the concurrency bound: one pooled keep-alive connection per call in flight.
            connector = aiohttp.TCPConnector(limit=self.max_concurrency, limit_per_host=self.max_concurrency,
                                             keepalive_timeout=30)
            # No aiohttp timeout: post() bounds each call with its own deadline (one timer, not three).
            self._session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None),
                                                  skip_auto_headers=("User-Agent",))
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def post(self, path: str, body: dict[str, Any], headers: dict[str, str], timeout_s: float) -> Any:
        """One attempt: the decoded JSON of a 2xx reply, else :class:`CallFailed`."""
        url = self.base_url + path
        try:
            async with asyncio.timeout(timeout_s):
                async with self.session.post(url, data=orjson.dumps(body),
                                             headers={"Content-Type": "application/json", **headers}) as reply:
                    raw = await reply.read()
                    status = reply.status
                    retry_after = reply.headers.get("Retry-After")
        except asyncio.TimeoutError:
            raise CallFailed("timeout", f"no reply from {url} within {timeout_s:g}s",
                             retryable=True, trips_breaker=True) from None
        except aiohttp.ClientError as exc:
            raise CallFailed("connection", f"{url}: {type(exc).__name__}: {exc}",
                             retryable=True, trips_breaker=True) from None
        except OSError as exc:
            raise CallFailed("connection", f"{url}: {exc}", retryable=True, trips_breaker=True) from None
        if status == 429:
            raise CallFailed("rate_limited", f"{url} answered 429: {raw[:300]!r}", retryable=True,
                             trips_breaker=False, retry_after_s=_seconds(retry_after))
        if status >= 500:
            raise CallFailed("http_5xx", f"{url} answered {status}: {raw[:300]!r}", retryable=True, trips_breaker=True)
        if status >= 400:
            # 400 (bad request: a prompt over the context length...), 401/403 (key), 404 (path/model):
            # another try gives the same answer.
            raise CallFailed("http_4xx", f"{url} answered {status}: {raw[:500]!r}", retryable=False,
                             trips_breaker=False)
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise CallFailed("bad_response", f"{url} answered {status} with non-JSON: {raw[:300]!r}",
                             retryable=True, trips_breaker=False) from None

    async def served_models(self, headers: dict[str, str], timeout_s: float = 2.0) -> dict[str, Any]:
        """``GET {base_url}/models``: ``{"ok": True, "models": [ids]}`` when it answers an OpenAI model
        list, else ``{"ok": False, "error": one line}``. Up is not enough for a judge to be ready:
        the caller checks that its model is among ``models``."""
        url = self.base_url + "/models"
        try:
            async with asyncio.timeout(timeout_s):
                async with self.session.get(url, headers=headers) as reply:
                    raw = await reply.read()
                    status = reply.status
        except asyncio.TimeoutError:
            return {"ok": False, "error": f"GET {url}: no answer within {timeout_s:g}s"}
        except (aiohttp.ClientError, OSError) as exc:
            return {"ok": False, "error": f"GET {url}: {type(exc).__name__}: {exc}"}
        if status != 200:
            return {"ok": False, "status": status, "error": f"GET {url} answered {status}: {raw[:200]!r}"}
        try:
            listed = orjson.loads(raw)["data"]
            models = [str(m["id"]) for m in listed]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return {"ok": False, "status": status,
                    "error": f"GET {url} answered no OpenAI model list ({{'data': [{{'id': ...}}]}}): {raw[:200]!r}"}
        return {"ok": True, "status": status, "models": models}

def _seconds(header: str | None) -> float | None:
    try:
        return max(0.0, float(header)) if header else None
    except ValueError:
        return None  # an HTTP-date Retry-After: fall back to our own backoff
