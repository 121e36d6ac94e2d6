"""One worker of a multi-worker server: session routing and whole-server /health and /metrics.

``envs serve NAME --workers N`` runs N processes that accept on one port (SO_REUSEPORT, see
``servers/prefork.py``); the kernel spreads connections over them by address hash, so the
calls of one rollout may reach any of them. Session state (a SQLite database, a sandbox)
cannot leave its process, so routing is sticky by session id instead:

* a session id names its owner: ``w<index>-<hex>`` (``SessionStore.id_prefix``);
* a call carrying another worker's session id is forwarded, unchanged, to that worker over
  its private Unix socket (in a 0700 directory of the server's; plain HTTP/1.1, one
  connection per call), and the owner's reply goes back as is — status, body,
  ``Set-Cookie`` and ``Retry-After`` included;
* a forward has a deadline (:func:`forward_deadline_s`: the owner's own verification deadline
  twice over — one for its queue, one for the call — plus a margin for the hop). An owner
  that does not answer by then (stopped, wedged), refuses the connection or hangs up (dead,
  restarting) gets the client a 503 + ``Retry-After`` carrying a failure class
  (``timeout`` or ``connection_error``), never a wait without end;
* stateless ``/verify`` (no session) is answered wherever it lands;
* a NeMo-Gym >= 0.7 seed or close names its session itself (``resources_session_id``): it goes to
  the worker a hash of that id names, so a repeated seed finds the session and a close is
  remembered where a late seed of the same id will arrive.

``GET /health`` and ``GET /metrics`` describe the whole server, whichever worker answers:
``/health`` is 200 only when every worker is healthy (``workers`` lists each one; ``checks``
are the first unhealthy worker's, else the answering one's), and ``/metrics`` holds every
worker's series with a ``worker`` label (sum over it for the server's totals). A peer's own
view is asked with the ``X-Verigym-Worker-Local`` header, which is also how a forwarded call
is marked so it is never forwarded again.
"""

from __future__ import annotations

import asyncio
import os
import re
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from servers.http_server import Reply, Request, json_reply
from servers.wire import FAILURE_CLASS_KEY, SESSION_COOKIE, FailureClass

if TYPE_CHECKING:
    from servers.app import EnvServer

LOCAL_HEADER = "X-Verigym-Worker-Local"
SESSION_HEADER = "X-Verigym-Session"
_OWNER = re.compile(r"^w(\d+)-")
_FORWARD_REQUEST_HEADERS = ("Content-Type", "Cookie", SESSION_HEADER)
_FORWARD_REPLY_HEADERS = ("Content-Type", "Retry-After", "Allow")
_FORWARD_MARGIN_S = 5.0  # the Unix-socket hop, JSON in and out, a busy owner's event loop


def forward_deadline_s(verify_timeout_s: float) -> float:
    """How long a forwarded call may take: the owner may queue the call behind its verification
    slots (up to one verification deadline) and then run it (another), plus the hop."""
    return 2 * verify_timeout_s + _FORWARD_MARGIN_S


def worker_socket(socket_dir: str | Path, index: int) -> str:
    return str(Path(socket_dir) / f"w{index}.sock")


def owner_of(session_id: str | None) -> int | None:
    """The worker index a session id names, or None (no id, or an id of a one-worker server)."""
    if not session_id:
        return None
    match = _OWNER.match(session_id)
    return int(match.group(1)) if match else None


def external_owner(body: bytes, count: int) -> int | None:
    """The worker that owns a Gym >= 0.7 session id (``resources_session_id``), by a stable hash
    of it: its seed, a repeated seed and its close (which may come without the cookie, for an id
    never seeded) all reach the one worker that remembers it. None for a body without one."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    rsid = parsed.get("resources_session_id") if isinstance(parsed, dict) else None
    return zlib.crc32(rsid.encode()) % count if isinstance(rsid, str) and rsid else None


def label_samples(text: str, worker: int) -> str:
    """Prometheus text with ``worker="<i>"`` added to every sample (comments unchanged)."""
    out = []
    label = f'worker="{worker}"'
    for line in text.splitlines():
        if not line or line.startswith("#"):
            out.append(line)
        elif "{" in line:
            name, _, rest = line.partition("{")
            out.append(f"{name}{{{label},{rest}")
        else:
            name, _, value = line.partition(" ")
            out.append(f"{name}{{{label}}} {value}")
    return "\n".join(out)


def merge_families(texts: list[str]) -> str:
    """Prometheus texts of several workers as one exposition: each family's ``# HELP``/``# TYPE``
    once, then the samples of every worker (the format wants a family's samples together)."""
    order: list[str] = []
    heads: dict[str, list[str]] = {}
    samples: dict[str, list[str]] = {}
    for text in texts:
        family, pending_help = "", []
        for line in text.splitlines():
            if line.startswith("# HELP "):
                pending_help = [line]
                continue
            if line.startswith("# TYPE "):
                family = line.split()[2]
                if family not in heads:
                    order.append(family)
                    heads[family] = pending_help + [line]
                    samples[family] = []
                pending_help = []
                continue
            if line and not line.startswith("#"):
                if family not in samples:  # samples before any TYPE line: an untyped family of their own
                    family = line.split("{", 1)[0].split(" ", 1)[0]
                    order.append(family)
                    heads[family], samples[family] = [], []
                samples[family].append(line)
    lines: list[str] = []
    for family in order:
        lines += heads[family] + samples[family]
    return "\n".join(lines) + "\n"


class WorkerGroup:
    """What worker ``index`` of ``count`` knows about its peers."""

    def __init__(self, index: int, count: int, socket_dir: str | Path):
        self.index, self.count, self.socket_dir = index, count, str(socket_dir)
        self.own_socket = worker_socket(socket_dir, index)
        self.forwarded = 0
        self.forward_errors = 0

    @property
    def session_prefix(self) -> str:
        return f"w{self.index}-"

    async def _exchange(self, index: int, method: str, target: str, headers: dict[str, str],
                        body: bytes = b"") -> tuple[int, dict[str, list[str]], bytes]:
        """One HTTP/1.1 request to peer ``index`` over its Unix socket (a connection per call: a
        local connect costs microseconds, and no HTTP client library has to be imported)."""
        reader, writer = await asyncio.open_unix_connection(worker_socket(self.socket_dir, index))
        try:
            head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
            writer.write(f"{method} {target} HTTP/1.1\r\nHost: worker\r\nConnection: close\r\n{head}"
                         f"Content-Length: {len(body)}\r\n\r\n".encode("latin-1") + body)
            raw_head = await reader.readuntil(b"\r\n\r\n")
            lines = raw_head.decode("latin-1").split("\r\n")
            status = int(lines[0].split(" ", 2)[1])
            got: dict[str, list[str]] = {}
            for line in lines[1:]:
                if line:
                    name, _, value = line.partition(":")
                    got.setdefault(name.strip().lower(), []).append(value.strip())
            payload = await reader.readexactly(int(got.get("content-length", ["0"])[0]))
            return status, got, payload
        finally:
            writer.close()

    async def close(self) -> None:
        """Nothing held between calls; kept so a server's stop reads the same with or without peers."""

    # ---- the hook EnvServer.dispatch calls ----------------------------------------------
    async def intercept(self, server: "EnvServer", request: Request, path: str) -> Reply | None:
        """A reply when this request is the group's business (whole-server status, another
        worker's session); None when this worker answers it as a one-worker server would."""
        method = request.method
        if LOCAL_HEADER in request.headers:
            if method == "GET" and path == "/health":
                status, body = await self._own_health(server)
                return json_reply(status, body)
            return None
        if method == "GET":
            if path == "/health":
                return await self._health(server)
            if path == "/metrics":
                return await self._metrics(server)
            return None
        if method != "POST":
            return None
        if path in ("/seed_session", "/close_session"):
            owner = external_owner(await request.read(), self.count)
            if owner is None or owner == self.index:
                return None  # a legacy seed opens its session wherever it lands
            return await self._forward(owner, request, forward_deadline_s(server.env.config.verify_timeout_s))
        headers = request.headers
        session_id = request.cookies.get(SESSION_COOKIE) if "Cookie" in headers else None
        owner = owner_of(session_id or headers.get(SESSION_HEADER))
        if owner is None or owner == self.index or not 0 <= owner < self.count:
            return None  # ours, none, or an id no worker owns (answered 410 here)
        return await self._forward(owner, request, forward_deadline_s(server.env.config.verify_timeout_s))

    async def _forward(self, owner: int, request: Request, deadline_s: float) -> Reply:
        body = await request.read()
        headers = {name: request.headers[name] for name in _FORWARD_REQUEST_HEADERS if name in request.headers}
        headers[LOCAL_HEADER] = str(self.index)
        self.forwarded += 1
        try:
            async with asyncio.timeout(deadline_s):
                status, got, payload = await self._exchange(owner, request.method, str(request.rel_url),
                                                            headers, body)
        except asyncio.TimeoutError:
            # Stopped or wedged: its state is out of reach for now. Infrastructure, not the
            # sample's fault: retryable, and masked if it stays so.
            return self._forward_failed(owner, FailureClass.TIMEOUT,
                                        f"did not answer within {deadline_s:g}s (the forwarding deadline; the "
                                        "call may still run there if that worker wakes up)")
        except (OSError, asyncio.IncompleteReadError, ValueError, IndexError) as exc:
            # Dead or restarting (its sessions are gone with it): retry, then start over.
            return self._forward_failed(owner, FailureClass.CONNECTION_ERROR,
                                        f"does not answer: {type(exc).__name__}: {exc}")
        out = Reply(status, payload, got.get("content-type", ["application/json"])[0],
                    {k: got[k.lower()][0] for k in _FORWARD_REPLY_HEADERS[1:] if k.lower() in got})
        out.cookies.extend(got.get("set-cookie", ()))
        return out

    def _forward_failed(self, owner: int, failure: FailureClass, what: str) -> Reply:
        self.forward_errors += 1
        return json_reply(503, {"error": f"the worker holding this session (w{owner}) {what}; retry, or seed a "
                                         "new session if it stays gone", "detail": None,
                                FAILURE_CLASS_KEY: failure.value}, headers={"Retry-After": "1"})

    async def _ask_peers(self, path: str) -> dict[int, tuple[int, bytes]]:
        async def ask(index: int) -> tuple[int, bytes]:
            try:
                status, _, payload = await asyncio.wait_for(
                    self._exchange(index, "GET", path, {LOCAL_HEADER: str(self.index)}), 10)
                return status, payload
            except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError, ValueError, IndexError) as exc:
                return 0, f"{type(exc).__name__}: {exc}".encode()

        peers = [i for i in range(self.count) if i != self.index]
        answers = await asyncio.gather(*(ask(i) for i in peers))
        return dict(zip(peers, answers))

    async def _own_health(self, server: "EnvServer") -> tuple[int, dict[str, Any]]:
        status, body = await server.service.health()
        return status, {**body, "worker": self.index, "pid": os.getpid()}

    async def _health(self, server: "EnvServer") -> Reply:
        own_status, own = await self._own_health(server)
        workers: list[dict[str, Any]] = []
        checks, first_bad = own.get("checks", {}), None
        peers = await self._ask_peers("/health")
        for index in range(self.count):
            if index == self.index:
                status, body = own_status, own
            else:
                status, raw = peers[index]
                try:
                    body = orjson.loads(raw) if status else {"status": "unreachable", "error": raw.decode()}
                except orjson.JSONDecodeError:
                    body = {"status": "unreadable"}
            workers.append({"worker": index, "pid": body.get("pid"), "status": status, "state": body.get("status")})
            if status != 200 and first_bad is None:
                first_bad = body
        if first_bad is not None:
            checks = first_bad.get("checks", checks)
        ok = first_bad is None
        return json_reply(200 if ok else 503, {"status": "ok" if ok else "unavailable", "checks": checks,
                                                "workers": workers, "answered_by": self.index})

    async def _metrics(self, server: "EnvServer") -> Reply:
        texts = [label_samples(server.metrics_text(), self.index)]
        for index, (status, raw) in sorted((await self._ask_peers("/metrics")).items()):
            if status == 200:
                texts.append(label_samples(raw.decode(), index))
        env, answering = server.env.name, len(texts)
        texts.append("# HELP verigym_workers Server processes accepting on this port.\n"
                     f'# TYPE verigym_workers gauge\nverigym_workers{{env="{env}"}} {self.count}\n'
                     "# HELP verigym_workers_answering Workers that answered this scrape.\n"
                     f'# TYPE verigym_workers_answering gauge\nverigym_workers_answering{{env="{env}"}} {answering}\n')
        return Reply(200, merge_families(texts).encode(), "text/plain; charset=utf-8")

    def metrics_lines(self, env: str) -> str:
        """This worker's forwarding counters (part of its own /metrics text)."""
        return ("# HELP verigym_forwarded_total Session calls this worker passed to the worker owning the session.\n"
                f'# TYPE verigym_forwarded_total counter\nverigym_forwarded_total{{env="{env}"}} {self.forwarded}\n'
                "# HELP verigym_forward_errors_total Forwarded calls whose owner did not answer in time "
                "(503 + Retry-After).\n"
                f"# TYPE verigym_forward_errors_total counter\n"
                f'verigym_forward_errors_total{{env="{env}"}} {self.forward_errors}\n')

