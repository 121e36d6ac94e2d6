"""Transport-free request handling: validation, backpressure, deadlines, failure classes.

``servers.app`` wraps this in HTTP; ``envs verify``/``envs check`` and the conformance
suite call it in-process. Both paths therefore score a row identically.

Every method returns ``(status, body)`` — the HTTP status the server will send and the
JSON body — and never raises for bad input.

A row the server cannot score gets one of two answers (``Unscorable``): ``reject``, a 422 naming
the problem (a direct caller fixing its data), or ``mask``, a 200 masked sample carrying failure
class ``invalid_row`` (inside a rollout, where a 4xx would end Gym's collection or be retried by
NeMo-RL as a transport error). The default is ``mask`` for ``/seed_session`` and for a
``/verify`` inside a session (every Gym agent seeds before it verifies) and ``reject`` for a bare
``/verify``; the caller's ``X-Verigym-Unscorable`` header overrides either (servers/app.py).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from typing import Any

import orjson
from pydantic import ValidationError

from servers.aggregate import aggregate_metrics
from servers.cpu_pool import CpuPool, CpuTaskError, CpuTimeout, CpuWorkerCrashed
from servers.environment import Environment, SessionError, ToolError, Verdict
from servers.lazy_body import has_unread_prompt
from servers.metrics import ServerMetrics
from servers.replies import build_reply, in_full, splice_reply
from servers.sessions import Session, SessionFailure, SessionStore
from servers.wire import (FAILURE_CLASS_KEY, FailureClass, ResourcesCloseRequest, ResourcesSeedRequest,
                          ResponseObject, is_resources_seed)

log = logging.getLogger("verigym.server")

Reply = tuple[int, Any]
MASK, REJECT = "mask", "reject"
UNSCORABLE_CHOICES = (MASK, REJECT)


def error(status: int, message: str, detail: Any = None) -> Reply:
    return status, {"error": message, "detail": detail}


def failure_class_of(exc: BaseException) -> FailureClass:
    """The class of an exception our side raised (never the response's doing): a deadline is
    ``timeout``, a sandbox's or container's failure (sandboxes' ``SandboxError`` family, matched by
    name: servers do not import sandboxes) ``sandbox_error``, anything else ``verifier_error``."""
    if isinstance(exc, asyncio.TimeoutError):
        return FailureClass.TIMEOUT
    if any("sandbox" in cls.__name__.lower() for cls in type(exc).__mro__):
        return FailureClass.SANDBOX_ERROR
    return FailureClass.VERIFIER_ERROR


def validation_detail(exc: ValidationError, prefix: str = "") -> list[dict[str, Any]]:
    """Pydantic errors as ``[{"loc": "response.output.0.type", "msg": ...}]`` (the field path)."""
    out = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(part) for part in ((prefix,) if prefix else ()) + tuple(err["loc"]))
        out.append({"loc": loc, "msg": err["msg"], "type": err["type"]})
    return out


def problems_text(detail: list[dict[str, Any]]) -> str:
    """``validation_detail`` as one line: ``loc: msg; ...`` (a whole-row problem without ``loc``)."""
    return "; ".join(f"{d['loc']}: {d['msg']}" if d["loc"] else d["msg"] for d in detail)


class EnvService:
    def __init__(self, env: Environment):
        self.env = env
        cfg = env.config
        self.metrics = ServerMetrics(env.name)
        self.metrics.extra = env.metrics_text
        self.pool: CpuPool | None = None
        self.sessions = SessionStore(ttl_s=cfg.session_ttl_s, max_sessions=cfg.max_sessions, close=env.close_session)
        self._slots = asyncio.Semaphore(cfg.max_concurrent)
        self.draining = False
        self.started = False

    # ---- lifecycle -----------------------------------------------------------------
    async def start(self) -> None:
        env, cfg = self.env, self.env.config
        if env.uses_cpu_pool:
            self.pool = CpuPool(cfg.cpu_workers, default_timeout=cfg.cpu_task_timeout_s,
                                preload=env.cpu_pool_preload, memory_mb=cfg.cpu_worker_memory_mb)
            await self.pool.start()
            env.runtime._cpu_call = self.pool.run
        env.warm_up()  # a no-op's cost where envs serve already ran it before forking this worker
        await env.setup()
        self.sessions.start()
        self.started = True

    async def stop(self) -> None:
        await self.sessions.close_all()
        await self.env.close()
        if self.pool is not None:
            await self.pool.close()

    @property
    def in_flight(self) -> int:
        return self.metrics.in_flight

    # ---- read-only routes ------------------------------------------------------------
    async def health(self) -> Reply:
        checks: dict[str, Any] = {"started": self.started, "draining": self.draining}
        if self.pool is not None:
            checks["cpu_pool"] = {"ok": self.pool.alive, "workers": self.pool.size,
                                  "timeouts": self.pool.timeouts, "crashes": self.pool.crashes}
        try:
            env_health = await asyncio.wait_for(self.env.health(), timeout=10)
        except Exception as exc:  # noqa: BLE001 - a failing health check is reported, not raised
            env_health = {"ok": False, "error": repr(exc)}
        checks["environment"] = env_health
        ok = self.started and not self.draining and env_health.get("ok", False) and \
            (self.pool is None or self.pool.alive)
        return (200 if ok else 503), {"status": "ok" if ok else "unavailable", "checks": checks}

    def info(self) -> Reply:
        described = self.env.describe()
        described["config"] = self.env.config.model_dump(mode="json")
        described.update(self.env.runtime_info())
        return 200, described

    # ---- /verify -----------------------------------------------------------------------
    async def verify(self, body: Any, session_id: str | None = None, raw: bytes | None = None, *,
                     unscorable: str | None = None) -> Reply:
        """``raw``: the request's JSON bytes, when the caller has them (the HTTP route); the reply
        is then those bytes with the verdict's fields appended (``splice_reply``), not the parsed
        body serialised again, whenever that gives the same object. ``unscorable``: the caller's
        choice for a row that cannot be scored (module docstring); None = by the session."""
        if not isinstance(body, dict):
            return error(422, "the request body must be a JSON object (a row plus 'response')")
        session = self.sessions.get(session_id) if session_id else None
        mode = unscorable or (MASK if session_id else REJECT)
        legacy = session is None or session.external_id is None
        if session is not None and session.failure is not None:
            await self.sessions.pop_and_close(session.id)
            return self._masked(in_full(body, raw), session.failure.failure_class, session.failure.detail,
                                legacy=legacy)
        try:
            row = self.env.Row.model_validate(body)
        except ValidationError as exc:
            return await self._unscorable(mode, in_full(body, raw), "the row does not match this environment's "
                                          "fields", validation_detail(exc), session, legacy)
        if "response" not in body:
            return await self._unscorable(mode, in_full(body, raw), "missing field 'response' (a Responses-API "
                                          "object)", [{"loc": "response", "msg": "Field required", "type": "missing"}],
                                          session, legacy)
        try:
            response = ResponseObject.model_validate(body["response"])
        except ValidationError as exc:
            return await self._unscorable(mode, in_full(body, raw), "'response' is not a valid Responses-API object",
                                          validation_detail(exc, "response"), session, legacy)

        cfg = self.env.config
        # The cheap counter first: Semaphore.locked() scans its waiters on every request.
        if self.metrics.queued >= cfg.max_queued and self._slots.locked():
            self.metrics.rejected_overload += 1
            return error(503, "server overloaded: too many verifications queued; retry later",
                         {"retry_after_s": 1, "max_queued": cfg.max_queued})
        self.metrics.queued += 1
        start = time.perf_counter()
        async with self._slots:
            self.metrics.queued -= 1
            self.metrics.in_flight += 1
            try:
                verdict = await self._run_verify(row, response, session.state if session else None)
            finally:
                self.metrics.in_flight -= 1
        if session is not None:
            await self.sessions.pop_and_close(session.id)
        failure = verdict.failure_class
        # str() of a str-Enum member is "FailureClass.TIMEOUT" on 3.11: label metrics by value.
        self.metrics.observe_verify(time.perf_counter() - start, verdict.reward,
                                    (failure.value if isinstance(failure, FailureClass) else str(failure))
                                    if failure else None)
        if raw is not None:
            spliced = splice_reply(raw, body, verdict)
            if spliced is not None:
                return 200, spliced
            if has_unread_prompt(body):  # decoded without its prompt (servers/lazy_body.py): now in full
                body = orjson.loads(raw)
        return 200, build_reply(body, verdict, legacy=legacy)

    async def _unscorable(self, mode: str, body: dict[str, Any], message: str, detail: list[dict[str, Any]],
                          session: Session | None, legacy: bool) -> Reply:
        """A row that cannot be scored: 422 naming the fields (``reject``), or a masked sample
        (``mask``) whose reason names them as well and which, like any verify answer, ends the
        rollout's session (a rejected caller may fix its request and verify in it again)."""
        if mode == REJECT:
            return error(422, message, detail)
        if session is not None:
            await self.sessions.pop_and_close(session.id)
        return self._masked(body, FailureClass.INVALID_ROW, f"{message}: {problems_text(detail)}", legacy=legacy)

    def _masked(self, body: dict[str, Any], failure: FailureClass, detail: str, *, legacy: bool) -> Reply:
        self.metrics.failures[failure.value] += 1  # counted like any failure; no verification ran to time
        return 200, build_reply(body, Verdict.failure(failure, detail), legacy=legacy)

    async def _run_verify(self, row: Any, response: ResponseObject, state: Any) -> Verdict:
        timeout = self.env.config.verify_timeout_s
        try:
            # asyncio.timeout, not wait_for: wait_for wraps the coroutine in a new Task per call,
            # a measurable share of a sub-millisecond verification (mcqa).
            async with asyncio.timeout(timeout):
                verdict = await self.env.verify(row, response, state)
            if not isinstance(verdict, Verdict):
                raise TypeError(f"verify() returned {type(verdict).__name__}, not Verdict")
            verdict.check()
            return verdict
        except (asyncio.TimeoutError, CpuTimeout) as exc:
            return Verdict.failure(FailureClass.TIMEOUT, f"verification passed its deadline ({timeout:g}s): {exc}")
        except CpuWorkerCrashed as exc:
            return Verdict.failure(FailureClass.VERIFIER_ERROR, str(exc))
        except CpuTaskError as exc:
            log.warning("verifier error in %s: %s", self.env.name, exc)
            return Verdict.failure(FailureClass.VERIFIER_ERROR, str(exc)[-2000:])
        except Exception as exc:  # noqa: BLE001 - any verifier bug becomes a visible failure class
            # A JudgeError can only come from a loaded judge client; servers without judges never
            # import it (nor aiohttp with it): looked up here, not imported at the top.
            judge = sys.modules.get("servers.judge.client")
            if judge is not None and isinstance(exc, judge.JudgeError):
                # A judge that is down, too slow or never gives a verdict: masked, never a default score.
                return Verdict.failure(FailureClass.JUDGE_ERROR, str(exc), judge_error_kind=exc.kind)
            log.exception("verifier error in %s", self.env.name)
            return Verdict.failure(FailureClass.VERIFIER_ERROR, f"{type(exc).__name__}: {exc}")

    # ---- sessions and tools ---------------------------------------------------------------
    async def seed_session(self, body: Any, *, unscorable: str | None = None) -> tuple[int, Any, str | None]:
        """Open a rollout's session: ``(status, reply, session id for the cookie)``.

        Two contracts: a legacy seed is the row (what Gym's agents send; reply ``{"session_id"}``);
        a Gym >= 0.7 seed carries ``resources_session_id`` and the row in ``task_data`` (reply
        ``{"resources_session_id"}``; seeding the same id and episode again returns the same
        session; a closed id cannot be seeded again). A seed that fails on the row or on the
        environment opens, in ``mask`` mode (the default), a session that records the failure:
        its verify answers a masked sample, so the rollout ends and the collection goes on."""
        if not isinstance(body, dict):
            status, err = error(422, "the request body must be a JSON object (the row)")
            return status, err, None
        seed: ResourcesSeedRequest | None = None
        if is_resources_seed(body):
            try:
                seed = ResourcesSeedRequest.model_validate(body)
            except ValidationError as exc:
                status, err = error(422, "not a NeMo-Gym resources seed", validation_detail(exc))
                return status, err, None
            rsid = seed.resources_session_id
            if self.sessions.was_closed(rsid):
                status, err = error(409, f"session {rsid!r} was closed; seed a new resources_session_id")
                return status, err, None
            existing = self.sessions.by_external(rsid)
            if existing is not None:
                if existing.episode != seed.episode_id:
                    status, err = error(409, f"session {rsid!r} is open for another episode",
                                        {"episode_id": existing.episode})
                    return status, err, None
                return 200, {"resources_session_id": rsid}, existing.id
            # Gym 0.7 gives the prompt to the agent and the row's other fields to the resources
            # server: the seed sees the row with an empty prompt (verify gets the whole row).
            row = {"responses_create_params": {"input": []}, **seed.task_data}
        else:
            row = body
        if self.sessions.full:
            status, err = error(503, "too many open sessions; retry later or verify finished rollouts",
                                {"max_sessions": self.env.config.max_sessions})
            return status, err, None
        mode = unscorable or MASK
        failure: SessionFailure | None = None
        state = None
        if mode == MASK:
            # Checked here, not only at verify: a row that cannot be scored gets no sandbox,
            # database or container for a rollout whose reward will be masked anyway.
            try:
                self.env.Row.model_validate(row)
            except ValidationError as exc:
                failure = SessionFailure(FailureClass.INVALID_ROW, "the row does not match this environment's "
                                         f"fields: {problems_text(validation_detail(exc))}")
        if failure is None:
            try:
                state = await asyncio.wait_for(self.env.seed_session(row), self.env.config.verify_timeout_s)
            except SessionError as exc:
                if mode == REJECT:
                    status, err = error(422, str(exc))
                    return status, err, None
                failure = SessionFailure(FailureClass.INVALID_ROW, str(exc))
            except Exception as exc:  # noqa: BLE001
                log.exception("seed_session failed in %s", self.env.name)
                cls = failure_class_of(exc)
                detail = f"seed_session failed: {type(exc).__name__}: {exc}"
                if mode == REJECT:
                    # Infrastructure trouble is retryable (503 + Retry-After, the client backs off);
                    # a verifier bug is not (500).
                    status = 500 if cls is FailureClass.VERIFIER_ERROR else 503
                    return status, {"error": detail, "detail": None, FAILURE_CLASS_KEY: cls.value}, None
                failure = SessionFailure(cls, detail)
        if seed is None:
            session = self.sessions.add(state, failure=failure)
            return 200, {"session_id": session.id}, session.id
        session = self.sessions.add(state, external_id=seed.resources_session_id, episode=seed.episode_id,
                                    failure=failure)
        return 200, {"resources_session_id": seed.resources_session_id}, session.id

    async def close_session(self, body: Any) -> Reply:
        """``POST /close_session`` (Gym >= 0.7): idempotent; closing an id never seeded also
        keeps a later seed of it out. A failing release answers 500 and keeps the session, so
        the caller can retry."""
        try:
            close = ResourcesCloseRequest.model_validate(body)
        except ValidationError as exc:
            return error(422, "expected {\"resources_session_id\", \"episode_id\"}", validation_detail(exc))
        try:
            await self.sessions.close_external(close.resources_session_id)
        except Exception as exc:  # noqa: BLE001 - reported, the session stays for a retried close
            log.exception("close_session failed in %s", self.env.name)
            return 500, {"error": f"close_session failed: {type(exc).__name__}: {exc}", "detail": None,
                         FAILURE_CLASS_KEY: FailureClass.VERIFIER_ERROR.value}
        return 200, {"resources_session_id": close.resources_session_id}

    async def call_tool(self, name: str, body: Any, session_id: str | None) -> Reply:
        spec = self.env.tools().get(name)
        if spec is None:
            return error(404, f"no route or tool named {name!r}",
                         {"tools": sorted(self.env.tools())})
        session = self.sessions.get(session_id) if session_id else None
        if session is None and session_id:
            return error(410, "unknown or expired session: call /seed_session again")
        if session is None and self.env.stateful:
            return error(400, f"tool {name!r} needs a session: call /seed_session first and send its cookie")
        if session is not None and session.failure is not None:
            # Data for the model, as any tool error: its rollout's reward will be masked anyway.
            return 200, {"error": f"this task cannot be run: {session.failure.detail}"}
        try:
            args = spec.args_model.model_validate(body if body is not None else {})
        except ValidationError as exc:
            return error(422, f"invalid arguments for tool {name!r}", validation_detail(exc))
        method = getattr(self.env, spec.method_name)
        try:
            if session is None:
                result = await asyncio.wait_for(method(None, args), self.env.config.verify_timeout_s)
            else:
                async with session.lock:
                    result = await asyncio.wait_for(method(session.state, args), self.env.config.verify_timeout_s)
                    session.last_used = time.monotonic()
        except ToolError as exc:
            return 200, {"error": str(exc)}
        except asyncio.TimeoutError:
            return 200, {"error": f"tool {name!r} timed out", FAILURE_CLASS_KEY: FailureClass.TIMEOUT.value}
        except Exception as exc:  # noqa: BLE001 - tool errors go back to the model as data, never a 500
            # Not a ToolError: our side failed (a sandbox, a container, a bug), not the model's
            # call. The model still gets the error as data, and the session remembers it, so its
            # verify answers a masked sample: a rollout whose environment broke is never scored.
            log.exception("tool %s failed in %s", name, self.env.name)
            cls, detail = failure_class_of(exc), f"tool {name!r} failed: {type(exc).__name__}: {exc}"
            if session is not None and session.failure is None:
                session.failure = SessionFailure(cls, detail)
            return 200, {"error": detail, FAILURE_CLASS_KEY: cls.value}
        return 200, result

    async def call_endpoint(self, name: str, body: Any) -> Reply:
        """A stateless route an environment declares with ``@endpoint`` (e.g. genrm's /compare)."""
        spec = self.env.endpoints()[name]
        try:
            request = spec.request_model.model_validate(body if body is not None else {})
        except ValidationError as exc:
            return error(422, f"the request does not match /{name}'s fields", validation_detail(exc))
        timeout = self.env.config.verify_timeout_s
        async with self._slots:
            self.metrics.in_flight += 1
            try:
                async with asyncio.timeout(timeout):
                    return 200, await getattr(self.env, spec.method_name)(request)
            except asyncio.TimeoutError:
                return 504, {"error": f"/{name} passed its deadline ({timeout:g}s, config verify_timeout_s)",
                             "detail": None, FAILURE_CLASS_KEY: FailureClass.TIMEOUT.value}
            except ValueError as exc:  # the request is well-formed but cannot be served (e.g. too few items)
                return error(422, str(exc))
            except Exception as exc:  # noqa: BLE001 - a bug in the endpoint: a visible 500, the server keeps serving
                log.exception("endpoint /%s failed in %s", name, self.env.name)
                return 500, {"error": f"/{name} failed: {type(exc).__name__}: {exc}", "detail": None,
                             FAILURE_CLASS_KEY: FailureClass.VERIFIER_ERROR.value}
            finally:
                self.metrics.in_flight -= 1

    async def aggregate(self, body: Any) -> Reply:
        if not isinstance(body, dict) or not isinstance(body.get("verify_responses"), list):
            return error(422, "expected {\"verify_responses\": [...]}")
        return 200, aggregate_metrics(body["verify_responses"])
