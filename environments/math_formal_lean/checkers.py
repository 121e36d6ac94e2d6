"""The two ways a Lean file gets compiled: a local ``lean`` in a sandbox, or a Lean REPL
server over HTTP (the Kimina Lean server protocol).

Both return a :class:`CompileResult`: ``completed`` (Lean ran to the end; its messages say
whether the proof holds), ``timeout`` (past the compile deadline), or ``unavailable`` (the
checker itself failed: sandbox error, lean missing or crashed, server down, an answer that
is not the protocol's). Only ``completed`` can score; the other two carry a failure class.

Kimina protocol (project-numina/kimina-lean-server, ``app/routers/backward.py``):
``POST /verify`` ``{"codes": [{"custom_id": ID, "proof": CODE}], "timeout": S,
"disable_cache": false}`` -> ``{"results": [{"custom_id": ID, "error": str | null,
"response": {"env": int, "messages": [{"severity", "pos", "endPos", "data"}], "sorries": [...],
"time": float}}]}``; a timeout is ``error: "Lean REPL command timed out in S seconds"``;
``429`` means no free REPL; ``Authorization: Bearer KEY`` when the server has an API key.
"""

from __future__ import annotations

import asyncio
import math
import os
import shutil
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import aiohttp

from sandboxes import Limits, ResourceVerdict, SandboxBackend, SandboxError, SandboxSpec
from servers.wire import FailureClass

from .lean_messages import SORRY_WARNING, LeanMessage, errors, parse_cli_output, parse_repl_messages

PROOF_FILE = "Proof.lean"


@dataclass
class CompileResult:
    status: str  # completed | timeout | unavailable
    messages: list[LeanMessage] = field(default_factory=list)
    output: str = ""  # raw checker output (clipped), for the reply's diagnostics
    exit_code: int | None = None
    seconds: float = 0.0
    failure_class: str | None = None  # set when unavailable
    detail: str = ""
    cpu_s: float | None = None  # CPU the compile used, where the checker knows it (local)
    # Timed out (local): the compile's own time when it was stopped -- wall time minus the time it
    # waited for a CPU other processes held. Under the limit: a busy machine's wall-clock cap stopped it.
    own_s: float | None = None


def unavailable(failure_class: FailureClass, detail: str, started: float, output: str = "") -> CompileResult:
    return CompileResult("unavailable", output=output, seconds=time.monotonic() - started,
                         failure_class=failure_class.value, detail=detail)


class LocalLeanChecker:
    """``lean_command FILE`` (e.g. ``lake env lean``) in a fresh sandbox per compile, run from
    ``project_dir`` (a Lean project with Mathlib built) when given."""

    name = "local"

    def __init__(self, backend: Callable[[], SandboxBackend], command: Sequence[str], *, project_dir: str | None,
                 env: dict[str, str], image: str | None, limits: Callable[[float], Limits],
                 max_output_chars: int) -> None:
        self._backend = backend
        self.image = image
        self.command = list(command)
        self.project_dir = project_dir
        self.env = dict(env)
        self._limits = limits
        self.max_output_chars = max_output_chars

    def argv(self, workdir: str) -> list[str]:
        argv = [*self.command, f"{workdir}/{PROOF_FILE}"]
        if self.project_dir:
            # lake finds the project (and its Mathlib) from the working directory.
            argv = ["/bin/sh", "-c", 'cd "$0" && exec "$@"', self.project_dir, *argv]
        return argv

    async def compile(self, code: str, timeout_s: float) -> CompileResult:
        started = time.monotonic()
        limits = self._limits(timeout_s)
        spec = SandboxSpec(image=self.image, files={PROOF_FILE: code}, env=self.env, limits=limits)
        try:
            sandbox = await self._backend().create(spec)
            try:
                ran = await sandbox.exec(self.argv(spec.workdir), timeout=timeout_s, limits=limits)
            finally:
                await sandbox.destroy()
        except SandboxError as exc:
            return unavailable(FailureClass.SANDBOX_ERROR, f"the Lean sandbox failed: {exc}", started)
        output = ran.text("stdout") + ran.text("stderr")
        clipped = output[-self.max_output_chars:]
        seconds = time.monotonic() - started
        messages = parse_cli_output(output)
        verdict = ran.verdict
        if verdict in (ResourceVerdict.TIMEOUT, ResourceVerdict.CPU_LIMIT):
            return CompileResult("timeout", messages, clipped, ran.exit_code, seconds,
                                 detail=f"lean ran past {timeout_s:g} s ({verdict.value})", cpu_s=ran.cpu_s,
                                 own_s=ran.own_s)
        if verdict is ResourceVerdict.OUTPUT_LIMIT and errors(messages):
            # Errors cannot disappear later in the file: the proof fails whatever the cut-off part said.
            return CompileResult("completed", messages, clipped, ran.exit_code, seconds)
        if verdict is not ResourceVerdict.OK:
            hint = {ResourceVerdict.MEMORY_LIMIT: " (Mathlib needs several GB: raise memory_mb)",
                    ResourceVerdict.OUTPUT_LIMIT: " (raise max_output_bytes)"}.get(verdict, "")
            return unavailable(FailureClass.SANDBOX_ERROR, f"lean crashed or was stopped: {verdict.value}{hint}: "
                               f"{clipped[-300:]}", started, clipped)
        if ran.exit_code in (126, 127):
            return unavailable(FailureClass.SANDBOX_ERROR, f"the Lean command could not run (exit {ran.exit_code}): "
                               f"{clipped[-300:]} -- check lean_command, lean_toolchain_dirs and lean_env.PATH",
                               started, clipped)
        if ran.exit_code != 0 and not errors(messages):
            return unavailable(FailureClass.SANDBOX_ERROR, f"lean exited {ran.exit_code} without an error message: "
                               f"{clipped[-300:]}", started, clipped)
        return CompileResult("completed", messages, clipped, ran.exit_code, seconds)

    def command_found(self) -> tuple[bool, str]:
        """Whether the command's program exists, looked up as the sandbox will (lean_env.PATH)."""
        program = self.command[0]
        if "/" in program:
            return os.access(program, os.X_OK), program
        # The sandbox's default PATH starts with the server's Python (sandboxes.bwrap.sandbox_env).
        path = self.env.get("PATH", f"{os.path.dirname(sys.executable)}:/usr/local/bin:/usr/bin:/bin")
        found = shutil.which(program, path=path)
        return found is not None, found or f"{program} (not on PATH={path})"

    async def health(self) -> dict[str, Any]:
        if self.image:  # the command runs inside the image: nothing on this host to look at
            return {"ok": True, "checker": self.name, "command": self.command, "image": self.image}
        ok, where = self.command_found()
        report: dict[str, Any] = {"ok": ok, "checker": self.name, "command": self.command, "program": where}
        if self.project_dir:
            report["project_dir"] = self.project_dir
            if not os.path.isdir(self.project_dir):
                report.update(ok=False, hint=f"lean_project_dir {self.project_dir} does not exist")
        if not ok:
            report["hint"] = ("no Lean toolchain found: install elan + a Mathlib project and set lean_command / "
                              "lean_project_dir / lean_toolchain_dirs, or use checker: kimina with kimina_url")
        return report

    async def close(self) -> None:
        return None


class KiminaChecker:
    """A Lean REPL server speaking the Kimina protocol (module docstring)."""

    name = "kimina"

    def __init__(self, url: str, *, api_key: str | None, retries: int, request_overhead_s: float,
                 max_output_chars: int) -> None:
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.retries = retries
        self.request_overhead_s = request_overhead_s
        self.max_output_chars = max_output_chars
        self._http: aiohttp.ClientSession | None = None

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
            self._http = aiohttp.ClientSession(headers=headers)
        return self._http

    async def _post(self, body: dict[str, Any], timeout_s: float, started: float) -> dict[str, Any] | CompileResult:
        deadline = aiohttp.ClientTimeout(total=timeout_s + self.request_overhead_s)
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                await asyncio.sleep(min(2.0, 0.25 * 2 ** attempt))
            try:
                async with self._session().post(f"{self.url}/verify", json=body, timeout=deadline) as reply:
                    text = await reply.text()
                    if reply.status in (429, 502, 503, 504):
                        last = f"HTTP {reply.status}: {text[:300]}"
                        continue
                    if reply.status != 200:
                        return unavailable(FailureClass.DEPENDENCY_ERROR, f"the Lean server answered HTTP {reply.status}: "
                                           f"{text[:300]}", started)
                    try:
                        return await reply.json(content_type=None)
                    except ValueError:
                        return unavailable(FailureClass.DEPENDENCY_ERROR, f"the Lean server's reply is not JSON: "
                                           f"{text[:300]}", started)
            except asyncio.TimeoutError:
                return CompileResult("timeout", seconds=time.monotonic() - started,
                                     detail=f"the Lean server did not answer within {timeout_s + self.request_overhead_s:g} s")
            except aiohttp.ClientError as exc:
                last = f"{type(exc).__name__}: {exc}"
        return unavailable(FailureClass.DEPENDENCY_ERROR, f"the Lean server at {self.url} is unavailable "
                           f"({self.retries + 1} tries): {last}", started)

    async def compile(self, code: str, timeout_s: float) -> CompileResult:
        started = time.monotonic()
        custom_id = uuid.uuid4().hex
        body = {"codes": [{"custom_id": custom_id, "proof": code}], "timeout": max(1, math.ceil(timeout_s)),
                "disable_cache": False}
        data = await self._post(body, timeout_s, started)
        if isinstance(data, CompileResult):
            return data
        results = data.get("results") if isinstance(data, dict) else None
        if not isinstance(results, list) or len(results) != 1 or not isinstance(results[0], dict):
            return unavailable(FailureClass.DEPENDENCY_ERROR, f"not a Kimina /verify reply: {str(data)[:300]}", started)
        result = results[0]
        seconds = time.monotonic() - started
        error, response = result.get("error"), result.get("response")
        if error:
            if "timed out" in str(error).lower():
                return CompileResult("timeout", seconds=seconds, detail=str(error))
            return unavailable(FailureClass.DEPENDENCY_ERROR, f"the Lean REPL failed: {str(error)[:500]}", started)
        if not isinstance(response, dict):
            return unavailable(FailureClass.DEPENDENCY_ERROR, f"reply without response or error: {str(result)[:300]}",
                               started)
        messages = parse_repl_messages(response.get("messages") or [])
        if response.get("sorries") and not any(SORRY_WARNING in m.text for m in messages):
            # The REPL lists sorries apart from the messages; one is enough to fail the proof.
            messages.append(LeanMessage("warning", SORRY_WARNING))
        raw = "\n".join(f"{m.line}:{m.column}: {m.severity}: {m.text}" for m in messages)
        return CompileResult("completed", messages, raw[-self.max_output_chars:], None, seconds)

    async def health(self) -> dict[str, Any]:
        try:
            async with self._session().get(f"{self.url}/health", timeout=aiohttp.ClientTimeout(total=5)) as reply:
                ok = reply.status == 200
                return {"ok": ok, "checker": self.name, "url": self.url, "status": reply.status}
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            return {"ok": False, "checker": self.name, "url": self.url, "error": f"{type(exc).__name__}: {exc}",
                    "hint": "start the Lean server (kimina-lean-server) or fix kimina_url"}

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
