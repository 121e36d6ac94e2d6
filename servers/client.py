"""The async client the trainer, ``envs bench`` and the tests use to talk to environment servers.

* one pooled ``aiohttp`` session for all servers;
* several replica URLs per environment, least-in-flight load balancing;
* a concurrency cap per replica (requests beyond it wait in the client, not the server);
* timeouts on every call;
* retries with exponential backoff **only** on 503 and connection errors — a 4xx is the
  caller's bug and a 200 with a failure class is an answer, so neither is retried;
* sessions stick to the replica that seeded them and carry its cookie.

When retries run out, ``verify`` does not raise: it returns a reply with a client-side
failure class (``overloaded`` / ``connection_error``) so a rollout loop can count and mask
it like any other infrastructure failure. Use ``raise_on_failure=True`` to get an exception.

A row the server cannot score is a 422 (``EnvClientError``) by default: this client tells the
server so (``X-Verigym-Unscorable: reject``). ``unscorable="mask"`` asks for what Gym's agents
get instead: a 200 masked sample with failure class ``invalid_row`` (docs/protocol.md).
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from servers.wire import FAILURE_CLASS_KEY, FAILURE_DETAIL_KEY, SESSION_COOKIE, UNSCORABLE_HEADER, FailureClass


class EnvClientError(RuntimeError):
    def __init__(self, message: str, *, status: int | None = None, body: Any = None,
                 failure_class: FailureClass | None = None, retry_after: float | None = None):
        super().__init__(message)
        self.status, self.body, self.failure_class = status, body, failure_class
        self.retry_after = retry_after  # seconds a 503 asked the caller to wait before trying again


@dataclass
class _Replica:
    url: str
    limit: asyncio.Semaphore
    in_flight: int = 0


@dataclass
class SessionHandle:
    """A seeded session: the replica it lives on and the cookie that names it."""

    env: str
    url: str
    session_id: str
    seed_reply: dict[str, Any] = field(default_factory=dict)

    @property
    def headers(self) -> dict[str, str]:
        return {"Cookie": f"{SESSION_COOKIE}={self.session_id}"}


class EnvClient:
    def __init__(self, urls: dict[str, str | list[str]], *, max_concurrency_per_server: int = 64,
                 timeout_s: float = 300.0, connect_timeout_s: float = 10.0, retries: int = 4,
                 backoff_s: float = 0.25, max_backoff_s: float = 8.0, unscorable: str = "reject"):
        self._replicas: dict[str, list[_Replica]] = {
            env: [_Replica(u.rstrip("/"), asyncio.Semaphore(max_concurrency_per_server))
                  for u in ([v] if isinstance(v, str) else v)]
            for env, v in urls.items()
        }
        self.timeout = aiohttp.ClientTimeout(total=timeout_s, connect=connect_timeout_s)
        self.retries, self.backoff_s, self.max_backoff_s = retries, backoff_s, max_backoff_s
        self._session: aiohttp.ClientSession | None = None
        self.retried = 0
        self._unscorable = {UNSCORABLE_HEADER: unscorable}

    async def __aenter__(self) -> "EnvClient":
        return self

    async def __aexit__(self, *_: Any) -> None:
        await self.close()

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, keepalive_timeout=60)
            # DummyCookieJar: cookies are per session handle, never shared between rollouts.
            self._session = aiohttp.ClientSession(connector=connector, timeout=self.timeout,
                                                  cookie_jar=aiohttp.DummyCookieJar(),
                                                  json_serialize=lambda o: orjson.dumps(o).decode())
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    @property
    def envs(self) -> list[str]:
        return list(self._replicas)

    def _pick(self, env: str) -> _Replica:
        replicas = self._replicas.get(env)
        if not replicas:
            raise EnvClientError(f"no server URL configured for environment {env!r}; known: {sorted(self._replicas)}")
        least = min(r.in_flight for r in replicas)
        return random.choice([r for r in replicas if r.in_flight == least])

    async def _post(self, replica: _Replica, path: str, body: Any,
                    headers: dict[str, str] | None = None) -> tuple[int, Any, dict[str, str]]:
        """POST with retries on 503 / connection errors. Returns (status, json, cookies)."""
        attempt = 0
        while True:
            retry_after = None
            try:
                # in_flight counts requests waiting for the replica's cap too: it is the load
                # least-in-flight balancing must see, or every pick ties once caps are full.
                replica.in_flight += 1
                try:
                    async with replica.limit:
                        async with self._http().post(replica.url + path, data=orjson.dumps(body),
                                                     headers={"Content-Type": "application/json", **(headers or {})}) as r:
                            raw = await r.read()
                            cookies = {k: m.value for k, m in r.cookies.items()}
                            status = r.status
                            if status == 503:
                                retry_after = float(r.headers.get("Retry-After", "0") or 0)
                finally:
                    replica.in_flight -= 1
                payload = orjson.loads(raw) if raw else None
                if status != 503:
                    return status, payload, cookies
                last: EnvClientError = EnvClientError(f"{replica.url}{path}: 503 overloaded", status=503, body=payload,
                                                      failure_class=FailureClass.OVERLOADED, retry_after=retry_after)
            except (aiohttp.ClientConnectionError, asyncio.TimeoutError, ConnectionError) as exc:
                last = EnvClientError(f"{replica.url}{path}: {type(exc).__name__}: {exc}",
                                      failure_class=FailureClass.CONNECTION_ERROR)
            except orjson.JSONDecodeError as exc:
                raise EnvClientError(f"{replica.url}{path}: reply is not JSON: {exc}") from None
            if attempt >= self.retries:
                raise last
            attempt += 1
            self.retried += 1
            delay = min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1)) * (0.5 + random.random())
            await asyncio.sleep(max(delay, retry_after or 0.0))

    async def verify(self, env: str, row: dict[str, Any], response: dict[str, Any] | None = None, *,
                     session: SessionHandle | None = None, raise_on_failure: bool = False) -> dict[str, Any]:
        """Score ``row`` (+ ``response``). Returns the server's reply, or a failure reply."""
        body = dict(row)
        if response is not None:
            body["response"] = response
        replica = self._replica_for(env, session)
        try:
            status, payload, _ = await self._post(replica, "/verify", body,
                                                  {**self._unscorable, **(session.headers if session else {})})
        except EnvClientError as exc:
            if raise_on_failure:
                raise
            return {**body, "reward": 0.0, FAILURE_CLASS_KEY: (exc.failure_class or FailureClass.CONNECTION_ERROR).value,
                    FAILURE_DETAIL_KEY: str(exc)}
        if status != 200:
            raise EnvClientError(f"{env} /verify answered {status}: {payload}", status=status, body=payload)
        return payload

    async def post(self, env: str, path: str, body: Any) -> tuple[int, Any]:
        """POST ``body`` to route ``path`` of ``env`` (an environment's own endpoint, e.g. genrm's
        ``/compare``), with the same balancing, caps and retries as ``verify``. Returns (status, json);
        raises :class:`EnvClientError` once retries run out."""
        status, payload, _ = await self._post(self._pick(env), path, body)
        return status, payload

    async def seed_session(self, env: str, row: dict[str, Any]) -> SessionHandle:
        replica = self._pick(env)
        status, payload, cookies = await self._post(replica, "/seed_session", row, self._unscorable)
        if status != 200:
            raise EnvClientError(f"{env} /seed_session answered {status}: {payload}", status=status, body=payload)
        session_id = cookies.get(SESSION_COOKIE) or (payload or {}).get("session_id")
        if not session_id:
            raise EnvClientError(f"{env} /seed_session set no session cookie")
        return SessionHandle(env=env, url=replica.url, session_id=session_id, seed_reply=payload or {})

    async def call_tool(self, session: SessionHandle, name: str, arguments: dict[str, Any]) -> tuple[int, Any]:
        """Call tool route ``/<name>``. Returns (status, body): the body goes back to the model as is."""
        replica = self._replica_for(session.env, session)
        status, payload, _ = await self._post(replica, f"/{name}", arguments, session.headers)
        return status, payload

    def _replica_for(self, env: str, session: SessionHandle | None) -> _Replica:
        if session is None:
            return self._pick(env)
        for replica in self._replicas.get(env, []):
            if replica.url == session.url:
                return replica
        raise EnvClientError(f"session {session.session_id} belongs to {session.url}, not a replica of {env!r}")

    async def get(self, env: str, path: str) -> tuple[int, Any]:
        replica = self._pick(env)
        async with self._http().get(replica.url + path) as r:
            raw = await r.read()
            try:
                return r.status, orjson.loads(raw)
            except orjson.JSONDecodeError:
                return r.status, raw.decode(errors="replace")

    async def wait_ready(self, env: str, timeout_s: float = 60.0) -> None:
        """Wait until every replica of ``env`` answers ``/health`` with 200."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        for replica in self._replicas[env]:
            while True:
                try:
                    async with self._http().get(replica.url + "/health") as r:
                        if r.status == 200:
                            break
                except (aiohttp.ClientConnectionError, asyncio.TimeoutError):
                    pass
                if loop.time() > deadline:
                    raise EnvClientError(f"{env} at {replica.url} not ready after {timeout_s:g}s")
                await asyncio.sleep(0.1)
