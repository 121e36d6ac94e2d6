"""Host side of the Python zygote (``zygote_main.py`` runs inside the sandbox).

One zygote per process-backend sandbox, started on the first ``exec_python`` and kept until
the sandbox is destroyed (or found tampered with at ``reset()``). A run costs a fork inside
an already started, already isolated interpreter instead of a bwrap + Python start-up.

Per run the host creates fresh stdin/stdout/stderr pipes and hands the child's ends to the
zygote over the control socket (SCM_RIGHTS); output is read and capped here exactly like an
exec's, and the deadline / output cap ask the zygote to kill every process of its
namespace. A zygote that does not answer within a grace period is killed from the host
(its whole PID namespace dies) and the run raises :class:`SandboxError`.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import struct
import time
from pathlib import Path
from typing import Any, Mapping

from .base import ExecResult, Limits, SandboxError
from .bwrap import BwrapLayout
from .ceiling import Ceiling
from .longlived import Launched
from .runner import OutputPipes, RawOutcome, StatusPipe, _feed_stdin
from .verdicts import classify

ZYGOTE_SOURCE = Path(__file__).with_name("zygote_main.py").read_text()
_HEADER = struct.Struct(">Q")
_START_TIMEOUT_S = 30.0   # bwrap + interpreter start, generous under heavy machine load
_KILL_GRACE_S = 3.0       # after a kill request, the zygote must report within this
_EOF_GRACE_S = 1.0
# The zygote's own limits: runs lower theirs from here and can never raise them. Clamped,
# like every rlimit, to what the server inherited (sandboxes/ceiling.py).
ZYGOTE_CEILING = Limits(wall_s=1e9, cpu_s=10_000_000, memory_mb=1 << 20, max_processes=4096,
                        max_file_mb=1 << 20, max_open_files=4096)


def run_limits(limits: Limits, ceiling: Ceiling) -> dict[str, list[int]]:
    """The (soft, hard) rlimits the forked child applies: the values the exec path gives
    prlimit (the zygote itself is one process of the uid, as the exec path's helpers are)."""
    return {name: list(pair) for name, pair in ceiling.rlimits(limits).items()}


def _sched_state(pid: int) -> tuple[int, frozenset[int]]:
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    nice = int(stat[stat.rindex(")") + 2:].split()[16])  # field 19 of proc(5)
    return nice, frozenset(os.sched_getaffinity(pid))


class Zygote:
    def __init__(self, launched: Launched, sock: socket.socket, log_path: Path,
                 ceiling: Ceiling = Ceiling()) -> None:
        self._launched = launched
        self._ceiling = ceiling
        self._sock = sock
        self._log_path = log_path
        self.runs = 0
        self.broken = False
        self.broken_reason = ""
        self._sched_baseline: tuple[int, frozenset[int]] | None = None

    @classmethod
    async def start(cls, layout: BwrapLayout, python: str, env: Mapping[str, str], log_path: Path) -> "Zygote":
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        status = StatusPipe()
        # argv[1]: the binds under /tmp and /dev/shm (an interpreter there) its scrub must spare.
        argv = layout.argv([python, "-I", "-S", "-B", "-c", ZYGOTE_SOURCE, json.dumps(layout.scrub_keep())],
                           ZYGOTE_CEILING, env, status_fd=status.write_fd, init_wrapper=False)
        log = open(log_path, "wb")
        try:
            launched = Launched(argv, status=status, stdin=theirs.fileno(), stdout=log.fileno(),
                                stderr=log.fileno())
        finally:
            theirs.close()
            log.close()
        ours.setblocking(False)
        zygote = cls(launched, ours, log_path, layout.ceiling)
        try:
            hello = await asyncio.wait_for(zygote._recv(), _START_TIMEOUT_S)
        except (asyncio.TimeoutError, SandboxError) as exc:
            await zygote.stop()
            raise SandboxError(f"python zygote did not start: {exc!r} {zygote._log_tail()}") from exc
        if not hello.get("ready"):
            await zygote.stop()
            raise SandboxError(f"python zygote said {hello!r}")
        pid = await launched.wait_child_pid()
        zygote._sched_baseline = _sched_state(pid) if pid else None
        return zygote

    @property
    def host_pid(self) -> int | None:
        """Host pid of the zygote (the sandbox namespace's pid 1)."""
        return self._launched.child_pid

    @property
    def alive(self) -> bool:
        return not self.broken and self._launched.returncode is None

    def tampered(self) -> bool:
        """Did a run change the zygote's scheduling? A same-uid process may raise its nice
        value or narrow its CPU affinity (it can do nothing else to it): performance only,
        but the caller then replaces the zygote."""
        pid = self.host_pid
        if pid is None or self._sched_baseline is None:
            return True
        try:
            return _sched_state(pid) != self._sched_baseline
        except OSError:
            return True

    def _log_tail(self) -> str:
        try:
            return self._log_path.read_bytes()[-1500:].decode("utf-8", "replace")
        except OSError:
            return ""

    async def _recv(self) -> dict[str, Any]:
        loop = asyncio.get_running_loop()

        async def exact(n: int) -> bytes:
            data = b""
            while len(data) < n:
                chunk = await loop.sock_recv(self._sock, n - len(data))
                if not chunk:
                    raise SandboxError("python zygote closed its control channel")
                data += chunk
            return data

        (size,) = _HEADER.unpack(await exact(_HEADER.size))
        return json.loads(await exact(size))

    async def _send(self, obj: dict[str, Any], fds: tuple[int, ...] = ()) -> None:
        body = json.dumps(obj).encode()
        loop = asyncio.get_running_loop()
        head = _HEADER.pack(len(body))
        try:
            if fds:
                # The header (with the fds) is tiny: it fits an empty socket buffer at once.
                sent = socket.send_fds(self._sock, [head], list(fds))
                head = head[sent:]
            await loop.sock_sendall(self._sock, head + body)
        except OSError as exc:
            raise SandboxError(f"python zygote unreachable: {exc}") from exc

    async def run(self, job: dict[str, Any], *, stdin: bytes | None, timeout: float,
                  limits: Limits) -> ExecResult:
        """One program run in a fresh forked child. The caller serialises runs."""
        if not self.alive:
            raise SandboxError("python zygote is not running")
        loop = asyncio.get_running_loop()
        start = time.monotonic()
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            await self._send({**job, "op": "run", "limits": run_limits(limits, self._ceiling)}, (in_r, out_w, err_w))
        except BaseException:
            for fd in (in_w, out_r, err_r):
                os.close(fd)
            await self._break("could not send a run")
            raise
        finally:
            for fd in (in_r, out_w, err_w):
                os.close(fd)
        self.runs += 1
        stdin_pipe = os.fdopen(in_w, "wb", buffering=0)
        stdin_task = asyncio.ensure_future(_feed_stdin(stdin_pipe, stdin)) if stdin else None
        if stdin_task is None:
            stdin_pipe.close()
        state = {"killed": False}
        kill_sent: asyncio.Future[None] = loop.create_future()

        def request_kill() -> None:
            if not state["killed"]:
                state["killed"] = True
                task = asyncio.ensure_future(self._send({"op": "kill"}))
                task.add_done_callback(lambda t: kill_sent.done() or kill_sent.set_result(None))

        pipes = OutputPipes(loop, out_r, err_r, limits.max_output_bytes, on_limit=request_kill)
        reply_task = asyncio.ensure_future(self._recv())
        timed_out = False
        try:
            try:
                reply = await asyncio.wait_for(asyncio.shield(reply_task), max(timeout, 0.001))
            except asyncio.TimeoutError:
                timed_out = not state["killed"]
                request_kill()
                try:
                    reply = await asyncio.wait_for(asyncio.shield(reply_task), _KILL_GRACE_S)
                except asyncio.TimeoutError:
                    await self._break("did not stop a run within the grace period")
                    raise SandboxError("python zygote did not stop a run; sandbox namespace killed") from None
            except SandboxError:
                await self._break("control channel lost during a run")
                raise
            try:
                await asyncio.wait_for(asyncio.shield(pipes.all_eof), _EOF_GRACE_S)
            except asyncio.TimeoutError:
                pass
        except asyncio.CancelledError:
            await self._break("run cancelled")
            raise
        finally:
            reply_task.cancel()
            pipes.stop()
            for fd in pipes.fds:
                os.close(fd)
            if stdin_task is not None:
                stdin_task.cancel()
            if state["killed"] and not kill_sent.done():
                try:
                    await asyncio.wait_for(kill_sent, 1.0)
                except (asyncio.TimeoutError, asyncio.CancelledError):
                    pass
        raw = RawOutcome(status=reply.get("status"), stdout=pipes.out.value(), stderr=pipes.err.value(),
                         stdout_truncated=pipes.out.truncated, stderr_truncated=pipes.err.truncated,
                         timed_out=timed_out, output_limited=pipes.output_limited,
                         wall_s=time.monotonic() - start, cpu_s=float(reply.get("cpu_s", 0.0)))
        return classify(raw, limits)

    async def _break(self, why: str) -> None:
        self.broken_reason = why
        await self.stop()

    async def stop(self) -> None:
        """Kill the zygote's namespace (everything in it) and close the channel. Idempotent."""
        self.broken = True
        await self._launched.kill()
        try:
            self._sock.close()
        except OSError:
            pass
