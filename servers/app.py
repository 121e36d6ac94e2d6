"""The HTTP face of one environment server.

Our own dispatch table over a lean HTTP/1.1 transport (``servers/http_server.py``): it strips NeMo-Gym's ``/ng-rollout/<id>/``
observability prefix before routing and keeps every error a JSON ``{error, detail}``.

Routes
  GET  /                 {"status": "ok"}           (NeMo-Gym liveness)
  GET  /health           readiness incl. the environment's dependencies (503 when not ready)
  GET  /metrics          Prometheus text
  GET  /info             name, domain, version, row fields, config, tools
  GET  /reverify_mode    "stateless" | "unsupported"
  POST /verify           row + response -> row echoed + reward (+ components, diagnostics)
  POST /seed_session     row -> {"session_id"} + session cookie; or (NeMo-Gym >= 0.7)
                         {resources_session_id, episode_id, task_id, task_data} -> {resources_session_id}
  POST /close_session    {resources_session_id, episode_id} -> {resources_session_id} (NeMo-Gym >= 0.7)
  POST /aggregate_metrics
  POST /<tool_name>      tool call within the session named by the cookie
  POST /<endpoint>       a stateless route the environment declares (@endpoint; genrm's /compare)

Every POST must carry a JSON content type (``application/json`` or ``application/*+json``),
else 415: a web page can POST ``text/plain`` (or a typeless body) to a server on localhost
without a CORS preflight, and such a request must never be scored or reach a tool. A known
route called with the wrong method is 405 with ``Allow``; an unknown path is 404.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import re
import resource
import signal
import socket
from typing import Any, Awaitable, Callable, Coroutine

import orjson
from servers.environment import Environment
from servers.http_server import HttpServer, Reply, Request, json_reply
from servers.lazy_body import decode_unread_prompt
from servers.service import UNSCORABLE_CHOICES, EnvService, error
from servers.wire import SESSION_COOKIE, UNSCORABLE_HEADER
from servers.worker_group import WorkerGroup

log = logging.getLogger("verigym.server")

_ROLLOUT_PREFIX = re.compile(r"^/ng-rollout/[A-Za-z0-9][A-Za-z0-9._-]*(/.*)?$")
SESSION_HEADER = "X-Verigym-Session"
POST_ROUTES = frozenset({"/verify", "/seed_session", "/close_session", "/aggregate_metrics"})
JSON_CONTENT_TYPES = ("application/json", "application/*+json")


def is_json_content_type(header: str | None) -> bool:
    """``application/json`` or a structured-syntax ``application/<x>+json``; parameters ignored."""
    if not header:
        return False
    mime = header.split(";", 1)[0].strip().lower()
    return mime == "application/json" or (mime.startswith("application/") and mime.endswith("+json"))


def _json(status: int, body: Any, *, headers: dict[str, str] | None = None) -> Reply:
    if isinstance(body, bytes):  # already JSON: a /verify reply spliced onto the request's bytes
        return Reply(status, body, headers=headers)
    return json_reply(status, body, headers)


class EnvServer:
    """Routes HTTP requests to an :class:`EnvService`."""

    def __init__(self, env: Environment):
        self.service = EnvService(env)
        self.env = env
        self.group: WorkerGroup | None = None  # set when this is one worker of several (servers/prefork.py)
        self.max_body = int(env.config.max_body_mb * 1024 * 1024)
        self._get: dict[str, Callable[[Request], Awaitable[Reply]]] = {
            "/": self._root, "/health": self._health, "/metrics": self._metrics, "/info": self._info,
            "/reverify_mode": self._reverify_mode,
        }

    async def dispatch(self, request: Request) -> Reply:
        path = request.path
        if path.startswith("/ng-rollout/"):  # the regex only for prefixed paths (rare; hot path stays cheap)
            match = _ROLLOUT_PREFIX.match(path)
            if match:
                path = match.group(1) or "/"
        path = path.rstrip("/") or "/"
        if self.group is not None:
            routed = await self.group.intercept(self, request, path)
            if routed is not None:  # whole-server /health, /metrics; another worker's session (it counts the call)
                return routed
        route = path if path in self._get or path in POST_ROUTES or path[1:] in self.env.endpoints() else "tool"
        try:
            response = await self._route(request, path)
        except Exception as exc:  # noqa: BLE001 - the server keeps serving whatever a handler does
            log.exception("unhandled error on %s", path)
            response = _json(*error(500, f"internal error: {type(exc).__name__}: {exc}"))
        self.service.metrics.observe_request(route, response.status)
        return response

    def _allowed_method(self, path: str) -> str | None:
        """The one method ``path`` answers, or None when no route or tool has that path."""
        if path in self._get:
            return "GET"
        if path in POST_ROUTES or path[1:] in self.env.tools() or path[1:] in self.env.endpoints():
            return "POST"
        return None

    async def _route(self, request: Request, path: str) -> Reply:
        method = request.method
        if method == "GET" and path in self._get:
            return await self._get[path](request)
        if method != "POST" or path in self._get:
            allowed = self._allowed_method(path)
            if allowed is None:
                return _json(*error(404, f"no route {path}", {"routes": sorted(self._get) + sorted(POST_ROUTES),
                                                               "tools": sorted(self.env.tools())}))
            return _json(*error(405, f"method {method} not allowed on {path}; use {allowed}"),
                         headers={"Allow": allowed})
        content_type = request.headers.get("Content-Type")
        if not is_json_content_type(content_type):
            # Checked before the body is read: a cross-site "simple request" is refused unread.
            return _json(*error(415, f"POST {path} needs Content-Type: application/json, got "
                                     f"{content_type or 'no Content-Type header'}",
                                {"accepted": list(JSON_CONTENT_TYPES), "received": content_type}))
        if self.service.draining:
            return _json(*error(503, "server is shutting down"), headers={"Retry-After": "1"})

        body = None
        if path == "/verify" and not self.env.reads_create_params:  # its prompt is only echoed: not built
            body = decode_unread_prompt(await request.read())  # None: the full parse decides (and words errors)
        if body is None:
            body = await self._read_json(request)
        if isinstance(body, Reply):
            return body
        session_id = request.cookies.get(SESSION_COOKIE) or request.headers.get(SESSION_HEADER)
        unscorable = request.headers.get(UNSCORABLE_HEADER)
        if unscorable is not None:
            unscorable = unscorable.strip().lower()
            if unscorable not in UNSCORABLE_CHOICES:
                return _json(*error(400, f"{UNSCORABLE_HEADER} must be one of {', '.join(UNSCORABLE_CHOICES)}, "
                                         f"got {unscorable!r}"))
        if path == "/verify":
            status, reply = await self.service.verify(body, session_id, raw=await request.read(),
                                                      unscorable=unscorable)
            headers = {"Retry-After": "1"} if status == 503 else None
            return _json(status, reply, headers=headers)
        if path == "/seed_session":
            status, reply, new_id = await self.service.seed_session(body, unscorable=unscorable)
            response = _json(status, reply, headers={"Retry-After": "1"} if status == 503 else None)
            if new_id:
                response.set_cookie(SESSION_COOKIE, new_id, httponly=True, samesite="Lax")
            return response
        if path == "/close_session":
            return _json(*await self.service.close_session(body))
        if path == "/aggregate_metrics":
            return _json(*await self.service.aggregate(body))
        name = path[1:]
        if name in self.env.endpoints():
            return _json(*await self.service.call_endpoint(name, body))
        if "/" in name:
            return _json(*error(404, f"no route {path}"))
        response = _json(*await self.service.call_tool(name, body, session_id))
        if session_id and self.service.sessions.get(session_id) is not None:
            # Gym's agents (<= 0.6) carry on with the cookies of the LAST resources reply, as Gym's
            # own servers set theirs on every reply: a tool reply without it would lose the session.
            response.set_cookie(SESSION_COOKIE, session_id, httponly=True, samesite="Lax")
        return response

    async def _read_json(self, request: Request) -> Any:
        if request.content_length is not None and request.content_length > self.max_body:
            return _json(*error(413, f"request body of {request.content_length} bytes is over the "
                                     f"{self.max_body}-byte limit (config max_body_mb)"))
        raw = await request.read()  # the transport refused a body over max_body before reading it
        if not raw:
            return {}
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            return _json(*error(400, "malformed JSON in request body", str(exc)))

    async def _root(self, _: Request) -> Reply:
        return _json(200, {"status": "ok"})

    async def _health(self, _: Request) -> Reply:
        return _json(*await self.service.health())

    async def _info(self, _: Request) -> Reply:
        return _json(*self.service.info())

    async def _reverify_mode(self, _: Request) -> Reply:
        stateful = self.env.stateful or bool(self.env.tools())
        return _json(200, "unsupported" if stateful else "stateless")

    def metrics_text(self) -> str:
        """This process's Prometheus text (one worker's, when there are several)."""
        text = self.service.metrics.render(sessions=len(self.service.sessions))
        return text + self.group.metrics_lines(self.env.name) if self.group is not None else text

    async def _metrics(self, _: Request) -> Reply:
        return Reply(200, self.metrics_text().encode(), "text/plain; charset=utf-8")


def run_event_loop(main: Coroutine[Any, Any, Any]) -> Any:
    """``asyncio.run(main)``, on uvloop when it is installed (``VERIGYM_UVLOOP=0`` opts out).

    Profiles of a server at concurrency 64 put most of a small verification's cost in the
    event loop and the socket transports, not in the verifier; uvloop's C loop cut the server's
    CPU per mcqa request by ~12% and the load generator's by ~15% (interleaved A/B runs).
    Plain asyncio stays the fallback (no wheel for the platform, or opted out).
    """
    if os.environ.get("VERIGYM_UVLOOP", "1") != "0":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                return runner.run(main)
    return asyncio.run(main)


def raise_fd_limit() -> None:
    """Thousands of concurrent connections need thousands of descriptors: lift soft to hard."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def bind_socket(host: str, port: int, *, reuse_port: bool = False, listen: bool = True) -> socket.socket:
    """A non-blocking TCP socket on ``host:port``. ``reuse_port``: SO_REUSEPORT, so the workers of
    one server each listen on the same port and the kernel spreads connections over them."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    if not listen:
        return sock
    sock.listen(8192)
    sock.setblocking(False)
    return sock


class RunningServer:
    """A started server: ``url``, and ``await stop()`` (drain in-flight, then close)."""

    def __init__(self, server: EnvServer, http: HttpServer, url: str):
        self.server, self.http, self.url = server, http, url

    async def stop(self, drain_timeout: float = 30.0) -> None:
        service = self.server.service
        service.draining = True
        self.http.stop_accepting()  # no new connections; idle keep-alive ones closed
        deadline = asyncio.get_running_loop().time() + drain_timeout
        while service.in_flight or service.metrics.queued:
            if asyncio.get_running_loop().time() > deadline:
                log.warning("drain timeout: %d verifications still in flight", service.in_flight)
                break
            await asyncio.sleep(0.02)
        await self.http.close()
        if self.server.group is not None:
            await self.server.group.close()
        await service.stop()


async def start_server(env: Environment, host: str = "127.0.0.1", port: int = 0, *,
                       sock: socket.socket | None = None, group: WorkerGroup | None = None) -> RunningServer:
    """Start ``env`` on ``host:port`` (0 = a free port) inside the running event loop.

    A worker of a multi-worker server (servers/prefork.py) passes its listening ``sock`` (shared
    port) and its ``group``; it also answers its peers on the group's private Unix socket."""
    raise_fd_limit()
    server = EnvServer(env)
    if group is not None:
        server.group = group
        server.service.sessions.id_prefix = group.session_prefix
    await server.service.start()
    # Everything built so far (modules, pydantic schemas, a preload such as sympy) lives as long
    # as the server: frozen, the collector never walks it again, so the pages a worker shares
    # with its master (servers/prefork.py) are not written by every gen-2 collection and stay
    # shared. (In-process A/B runs showed no CPU change per verification either way.)
    gc.collect()
    gc.freeze()
    http = HttpServer(server.dispatch, max_body=server.max_body)
    sock = sock if sock is not None else bind_socket(host, port)
    await http.start(sock)
    if group is not None:
        await http.start(unix_path=group.own_socket)
    bound_port = sock.getsockname()[1]
    shown_host = f"[{host}]" if ":" in host else host
    return RunningServer(server, http, f"http://{shown_host}:{bound_port}")


async def serve_until_signalled(env: Environment, host: str, port: int,
                                on_ready: Callable[[str], None] | None = None, *,
                                sock: socket.socket | None = None, group: WorkerGroup | None = None) -> None:
    """Serve until SIGTERM/SIGINT: stop accepting, drain in-flight work, exit cleanly."""
    running = await start_server(env, host, port, sock=sock, group=group)
    if on_ready:
        on_ready(running.url)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await running.stop()
