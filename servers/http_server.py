"""The environment server's HTTP/1.1 transport: an asyncio protocol, not aiohttp's web server.

Why: on a small verification (mcqa) aiohttp's request/response machinery was ~40% of the
server's CPU per request (a bare aiohttp echo server cost ~78 µs per request, a plain asyncio
protocol ~23 µs, same client, same machine). The server needs little of it: JSON bodies with a
Content-Length (or chunked), keep-alive, pipelining, one handler. ``EnvServer.dispatch``
takes a :class:`Request` with aiohttp's names (``method``, ``path``, ``headers``, ``cookies``,
``content_length``, ``rel_url``, ``await read()``) and returns a :class:`Reply`. A server
process does not import aiohttp at all (~0.18 CPU-s of every server's start); aiohttp stays
the client (``servers/client.py``, peers of a multi-worker server) and the model server's.

What it does: HTTP/1.0 and 1.1, keep-alive (``Connection: close`` honoured), pipelined
requests answered in order, ``Expect: 100-continue``, chunked request bodies, a body over the
limit refused with 413 before it is read (then the connection is closed), a request head over
64 KiB refused with 431, a malformed one with 400, idle connections closed after
``KEEPALIVE_S``, reading paused while a request is handled and while the peer does not read
its replies (bounded memory per connection), HEAD answered without a body.
"""

from __future__ import annotations

import asyncio
import logging
from http import HTTPStatus
from http.cookies import CookieError, SimpleCookie
from typing import Any, Awaitable, Callable
from urllib.parse import unquote

import orjson
from multidict import CIMultiDict, CIMultiDictProxy

log = logging.getLogger("verigym.server")

MAX_HEAD = 64 * 1024
KEEPALIVE_S = 75.0
_REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}


class Request:
    """The part of ``aiohttp.web.Request`` the server's dispatch reads."""

    __slots__ = ("method", "path", "rel_url", "headers", "content_length", "_body", "_cookies")

    def __init__(self, method: str, target: str, headers: CIMultiDictProxy[str], body: bytes):
        self.method = method
        self.rel_url = target
        self.path = unquote(target.split("?", 1)[0])
        self.headers = headers
        self.content_length = len(body)
        self._body = body
        self._cookies: dict[str, str] | None = None

    @property
    def cookies(self) -> dict[str, str]:
        if self._cookies is None:
            jar: SimpleCookie = SimpleCookie()
            try:
                jar.load(self.headers.get("Cookie", ""))
            except CookieError:
                pass
            self._cookies = {name: morsel.value for name, morsel in jar.items()}
        return self._cookies

    async def read(self) -> bytes:
        return self._body


class Reply:
    """An HTTP reply: status, body bytes, headers, ``Set-Cookie`` values."""

    __slots__ = ("status", "body", "headers", "cookies")

    def __init__(self, status: int, body: bytes, content_type: str = "application/json",
                 headers: dict[str, str] | None = None):
        self.status, self.body = status, body
        self.headers = {"Content-Type": content_type, **headers} if headers else {"Content-Type": content_type}
        self.cookies: list[str] = []

    def set_cookie(self, name: str, value: str, *, httponly: bool = False, samesite: str | None = None) -> None:
        self.cookies.append(f"{name}={value}" + ("; HttpOnly" if httponly else "") + "; Path=/"
                            + (f"; SameSite={samesite}" if samesite else ""))


def json_reply(status: int, body: Any, headers: dict[str, str] | None = None) -> Reply:
    return Reply(status, orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY), headers=headers)


Handler = Callable[[Any], Awaitable[Reply]]


class _BadRequest(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class HttpProtocol(asyncio.Protocol):
    def __init__(self, server: "HttpServer"):
        self.server = server
        self.transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._busy = False  # a request is being handled: parse no further until it is answered
        self._closing = False
        self._writable: asyncio.Future | None = None
        self._idle: asyncio.TimerHandle | None = None
        self._continue_sent = False

    # ---- connection -------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  (uvloop's transports are no asyncio.Transport)
        self.server.connections.add(self)
        self._arm_idle()

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        self._closing = True
        if self._idle is not None:
            self._idle.cancel()
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    def pause_writing(self) -> None:
        if self._writable is None or self._writable.done():
            self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    def _arm_idle(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
        self._idle = asyncio.get_running_loop().call_later(KEEPALIVE_S, self.close)

    def close(self) -> None:
        if self.transport is not None and not self._closing:
            self._closing = True
            self.transport.close()

    @property
    def idle(self) -> bool:
        return not self._busy and not self._buf

    # ---- reading ------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        self._buf += data
        if self._busy:
            if len(self._buf) > MAX_HEAD + self.server.max_body:
                self.transport.pause_reading()  # pipelined data beyond one more request waits in the kernel
            return
        self._arm_idle()
        self._next()

    def _next(self) -> None:
        """Parse one complete request off the buffer, if there is one, and start handling it."""
        try:
            parsed = self._parse()
        except _BadRequest as exc:
            self._reply_error(exc.status, str(exc))
            return
        if parsed is None:
            return
        method, target, headers, body, keep_alive = parsed
        self._busy = True
        if self._idle is not None:  # a verification may take minutes: no idle deadline while it runs
            self._idle.cancel()
            self._idle = None
        self._continue_sent = False
        # Held by the server until it ends, even if the client goes: the loop keeps only a weak
        # reference to a task, and a handler awaiting a stream (a call forwarded to a peer
        # worker; asyncio's StreamReaderProtocol holds its reader weakly) is otherwise an
        # unreachable cycle that the collector destroys mid-await, leaving the client without
        # an answer (issue 17: the forwarded session call that hung ~1 run in 3).
        task = asyncio.get_running_loop().create_task(self._handle(Request(method, target, headers, body), keep_alive))
        self.server.tasks.add(task)
        task.add_done_callback(self.server.tasks.discard)

    def _parse(self) -> tuple[str, str, CIMultiDictProxy[str], bytes, bool] | None:
        buf = self._buf
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > MAX_HEAD:
                raise _BadRequest(431, "request head over 64 KiB")
            return None
        if end > MAX_HEAD:
            raise _BadRequest(431, "request head over 64 KiB")
        lines = bytes(buf[:end]).split(b"\r\n")
        try:
            method, target, version = lines[0].decode("latin-1").split(" ")
        except ValueError:
            raise _BadRequest(400, "malformed request line") from None
        if not version.startswith("HTTP/1.") or not target.startswith("/") and "://" not in target:
            raise _BadRequest(400, "malformed request line")
        if "://" in target:  # absolute-form: keep the path
            target = "/" + target.split("://", 1)[1].partition("/")[2]
        headers: CIMultiDict[str] = CIMultiDict()
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep or not name or name != name.strip():
                raise _BadRequest(400, "malformed header line")
            headers.add(name.decode("latin-1"), value.strip().decode("latin-1"))
        connection = headers.get("Connection", "").lower()
        keep_alive = "close" not in connection if version == "HTTP/1.1" else "keep-alive" in connection
        start = end + 4
        if "chunked" in headers.get("Transfer-Encoding", "").lower():
            decoded = self._dechunk(start)
            if decoded is None:
                self._maybe_continue(headers)
                return None
            body, consumed = decoded
        else:
            try:
                length = int(headers.get("Content-Length", "0"))
            except ValueError:
                raise _BadRequest(400, "malformed Content-Length") from None
            if length < 0:
                raise _BadRequest(400, "malformed Content-Length")
            if length > self.server.max_body:
                raise _BadRequest(413, f"request body of {length} bytes is over the {self.server.max_body}-byte "
                                       "limit (config max_body_mb)")
            if len(buf) - start < length:
                self._maybe_continue(headers)
                return None
            body, consumed = bytes(buf[start:start + length]), start + length
        del buf[:consumed]
        return method, target, CIMultiDictProxy(headers), body, keep_alive

    def _dechunk(self, at: int) -> tuple[bytes, int] | None:
        buf, parts, size_total = self._buf, [], 0
        while True:
            eol = buf.find(b"\r\n", at)
            if eol < 0:
                return None
            try:
                size = int(bytes(buf[at:eol]).split(b";", 1)[0], 16)
            except ValueError:
                raise _BadRequest(400, "malformed chunk size") from None
            size_total += size
            if size_total > self.server.max_body:
                raise _BadRequest(413, f"request body is over the {self.server.max_body}-byte limit (config max_body_mb)")
            if size == 0:  # the last chunk; optional trailer lines, then an empty line
                end = buf.find(b"\r\n\r\n", eol)
                return None if end < 0 else (b"".join(parts), end + 4)
            if len(buf) < eol + 2 + size + 2:
                return None
            parts.append(bytes(buf[eol + 2:eol + 2 + size]))
            at = eol + 2 + size + 2

    def _maybe_continue(self, headers: CIMultiDict[str]) -> None:
        if not self._continue_sent and headers.get("Expect", "").lower() == "100-continue":
            self._continue_sent = True
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    # ---- answering ----------------------------------------------------------------------
    async def _handle(self, request: Request, keep_alive: bool) -> None:
        try:
            response = await self.server.handler(request)
        except Exception as exc:  # noqa: BLE001 - dispatch answers errors itself; this is a last resort
            log.exception("unhandled error on %s", request.path)
            response = json_reply(500, {"error": f"internal error: {exc!r}", "detail": None})
        if self._closing:
            return
        keep_alive = keep_alive and not self.server.closing
        self.transport.write(_serialize(response, keep_alive, head=request.method == "HEAD"))
        if not keep_alive:
            self.close()
            return
        if self._writable is not None and not self._writable.done():
            await self._writable  # the peer is not reading its replies: answer nothing more until it does
        self._busy = False
        if self._closing:
            return
        self.transport.resume_reading()
        self._arm_idle()
        if self._buf:
            self._next()

    def _reply_error(self, status: int, message: str) -> None:
        body = orjson.dumps({"error": message, "detail": None})
        self.transport.write(b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                             b"Connection: close\r\n\r\n%s" % (status, _REASONS.get(status, b""), len(body), body))
        self.close()


def _serialize(response: Reply, keep_alive: bool, head: bool = False) -> bytes:
    body = response.body
    status = response.status
    parts = [b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b"Unknown"))]
    for name, value in response.headers.items():
        parts.append(f"{name}: {value}\r\n".encode("latin-1"))
    for cookie in response.cookies:
        parts.append(f"Set-Cookie: {cookie}\r\n".encode("latin-1"))
    parts.append(b"Content-Length: %d\r\n" % len(body))
    if not keep_alive:
        parts.append(b"Connection: close\r\n")
    parts.append(b"\r\n")
    if not head:
        parts.append(bytes(body))
    return b"".join(parts)


class HttpServer:
    """Serve ``handler`` on listening sockets: ``await start(sock)``, ``stop_accepting()``, ``close()``."""

    def __init__(self, handler: Handler, *, max_body: int):
        self.handler = handler
        self.max_body = max_body
        self.connections: set[HttpProtocol] = set()
        self.tasks: set[asyncio.Task] = set()  # requests being handled (strong references, see HttpProtocol._next)
        self.closing = False
        self._servers: list[asyncio.AbstractServer] = []

    async def start(self, sock: Any = None, *, unix_path: str | None = None) -> None:
        loop = asyncio.get_running_loop()
        if unix_path is not None:
            server = await loop.create_unix_server(lambda: HttpProtocol(self), unix_path, backlog=8192)
        else:
            server = await loop.create_server(lambda: HttpProtocol(self), sock=sock, backlog=8192)
        self._servers.append(server)

    def stop_accepting(self) -> None:
        """Close the listening sockets; open connections keep being served (and are told to close)."""
        self.closing = True
        for server in self._servers:
            server.close()
        for conn in list(self.connections):
            if conn.idle:
                conn.close()

    async def close(self) -> None:
        self.stop_accepting()
        for conn in list(self.connections):
            conn.close()
        for server in self._servers:
            await server.wait_closed()
