"""``math_python``: math with a stateful Python tool (NeMo-Gym ``math_with_code`` and ``ns_tools`` rows).

``/seed_session`` creates a sandbox for the rollout; ``POST /execute_python`` (aliases
``/run_python`` and ns_tools' ``/stateful_python_code_exec``) runs a cell there,
notebook-style (see ``kernel.py`` for how state persists); ``/verify`` scores the final
answer exactly like the ``math`` environment (same extraction and the same pure scoring
functions) and frees the sandbox.
"""

from __future__ import annotations

import asyncio
import io
import json
import secrets
import tokenize
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, field_validator, model_validator

from environments.math.extract import DEFAULT_RULES, extract_answer, is_incomplete
from environments.math.answer_cost import AnswerCostConfig
from environments.math.verifier import ExtractionRule, score_final_answer
from sandboxes import Limits, ResourceVerdict, SandboxError, SandboxSpec
from sandboxes.base import Sandbox, SandboxProcess
from sandboxes.env_support import CanaryFailed, SandboxedEnvironment, SandboxLimitsConfig
from servers import json_values
from servers.answer_text import strip_think
from servers.environment import EnvConfig, Environment, ToolError, Verdict, tool
from servers.wire import ResponseObject, RowModel

KERNEL_SOURCE = Path(__file__).with_name("kernel.py").read_text()
KERNEL_READY = b"[verigym kernel ready]\n"  # must match kernel.py READY
_MARKER_GRACE_S = 5.0  # after the stdout marker, how long the stderr marker may lag


# ns_tools rows may name the verifier that scores them; these are the ones whose scoring this
# environment performs (math_with_judge without its judge = math-verify on the final answer).
NS_TOOLS_VERIFIERS = frozenset({"math_with_judge", "math"})


class MathPythonRow(RowModel):
    expected_result: str | None = Field(None, min_length=1, description="Gold final answer (number or LaTeX); "
                                        "math_with_code rows.")
    expected_answer: str | None = Field(None, min_length=1, description="Gold final answer; ns_tools rows "
                                        "(the same as expected_result).")
    expected_code_contains: str = Field("", description="If set, some executed cell must contain this text.")
    verifier_type: str | None = Field(None, description="ns_tools: the verifier for this row; "
                                      f"one of {sorted(NS_TOOLS_VERIFIERS)} (or absent).")

    @field_validator("expected_result", "expected_answer", mode="before")
    @classmethod
    def _numbers_as_text(cls, value: Any) -> Any:
        return str(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value

    @field_validator("verifier_type")
    @classmethod
    def _known_verifier(cls, value: str | None) -> str | None:
        # Any other verifier (a judge, a code checker) is not what this environment runs: scoring
        # the row as math anyway would be a silent wrong reward.
        if value is not None and value not in NS_TOOLS_VERIFIERS:
            raise ValueError(f"verifier_type {value!r} is not scored here; this environment scores "
                             f"{sorted(NS_TOOLS_VERIFIERS)} (math-verify on the final answer)")
        return value

    @model_validator(mode="after")
    def _one_gold(self) -> "MathPythonRow":
        if self.expected_result is None and self.expected_answer is None:
            raise ValueError("give the gold answer as 'expected_result' (math_with_code) or 'expected_answer' (ns_tools)")
        if self.expected_result is not None and self.expected_answer is not None \
                and self.expected_result.strip() != self.expected_answer.strip():
            raise ValueError("'expected_result' and 'expected_answer' disagree; give one gold answer")
        return self

    @property
    def gold(self) -> str:
        return self.expected_result if self.expected_result is not None else self.expected_answer  # type: ignore[return-value]


class MathPythonConfig(SandboxLimitsConfig, AnswerCostConfig, EnvConfig):
    python: str | None = Field(None, description="Interpreter inside the sandbox; null = the sandbox's own "
                               "(process backend: the server's, bound read-only at its resolved path).")
    call_timeout_s: float = Field(20.0, gt=0, description="Wall-clock limit of one tool call (replay mode: replay + new cell).")
    memory_mb: int = Field(2048, ge=128, description="Address-space limit of a call (numpy/scipy/pandas need room).")
    max_processes: int = Field(32, ge=4, description="Processes a cell may run at once.")
    max_output_chars: int = Field(8000, ge=100, description="Characters of stdout/stderr returned to the model.")
    max_cells: int = Field(64, ge=1, description="Cells per session; later calls get an error.")
    persistent_kernel: bool = Field(True, description="One long-lived kernel per session where the backend "
                                    "supports it (process, container); false = replay the session's cells every call.")
    kernel_start_timeout_s: float = Field(60.0, gt=0, description="Limit for starting a session's kernel.")
    extraction: list[ExtractionRule] = Field(default_factory=lambda: list(DEFAULT_RULES),
                                  description="Answer extraction rules (as in the math environment; "
                                              "'last_number' is opt-in there too).")


class CodeArgs(BaseModel):
    code: str = Field(..., description="Python code to execute. Variables persist between calls.")


@dataclass
class Session:
    sandbox: Sandbox
    history: list[str] = field(default_factory=list)  # cells that ran (replayed after a kernel restart)
    executed: list[str] = field(default_factory=list)  # every cell the model sent (the max_cells count)
    ran: list[str] = field(default_factory=list)       # cells that ran to the end without an error (expected_code_contains)
    kernel: SandboxProcess | None = None               # the persistent kernel, started by the first cell
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # one cell at a time per session


@dataclass
class CellRun:
    """One request to the persistent kernel. ``ended``: ``ok`` (marker seen), ``timeout``,
    ``eof`` (the kernel process ended) or ``max_bytes`` (output over the cap)."""

    ended: str
    stdout: bytes
    stderr: bytes
    status: int | None = None


def code_contains(code: str, needle: str) -> bool:
    """``needle`` occurs in ``code`` outside its comments (``# sympy`` does no sympy work)."""
    lines = code.splitlines(keepends=True)
    try:
        for token in tokenize.generate_tokens(io.StringIO(code).readline):
            if token.type == tokenize.COMMENT:
                row, start = token.start
                _, end = token.end
                lines[row - 1] = lines[row - 1][:start] + " " * (end - start) + lines[row - 1][end:]
    except (tokenize.TokenError, SyntaxError):
        return False  # not Python: it could not have run
    return needle in "".join(lines)


def recorded_cells(response: ResponseObject, tool_names: set[str]) -> list[str]:
    """Code of the response's calls that ran, as the rollout recorded them: a call of one of this
    environment's tools, arguments a JSON object with a string ``code``, and a ``function_call_output``
    for its call_id that reports no failure."""
    outputs = {item.call_id: (item.model_extra or {}).get("output") for item in response.output
                if item.type == "function_call_output" and item.call_id}
    cells = []
    for call in response.function_calls:
        if call.name not in tool_names or call.call_id not in outputs:
            continue
        try:
            arguments = json_values.loads(call.arguments or "")
        except ValueError:
            continue
        output = outputs[call.call_id]
        try:
            result = json_values.loads(output) if isinstance(output, str) else output
        except ValueError:
            result = None
        failed = isinstance(result, dict) and (result.get("success") is False or "error" in result
                                               or result.get("process_status") in ("error", "timeout"))
        if isinstance(arguments, dict) and isinstance(arguments.get("code"), str) and not failed:
            cells.append(arguments["code"])
    return cells


def _clip(text: str, limit: int) -> tuple[str, bool]:
    if len(text) <= limit:
        return text, False
    half = limit // 2
    return text[:half] + f"\n... [{len(text) - limit} characters cut] ...\n" + text[-half:], True


class MathPythonEnv(SandboxedEnvironment, Environment):
    name = "math_python"
    domain = "math"
    summary = "Math with a stateful sandboxed Python tool (execute_python); final answer scored like math."
    needs = ("sandbox",)
    agent_names = ("math_with_code_simple_agent", "math_python_simple_agent", "ns_tools_simple_agent")
    Row = MathPythonRow
    Config = MathPythonConfig
    stateful = True
    uses_cpu_pool = True
    cpu_pool_preload = ("sympy", "math_verify", "environments.math.scoring")

    def _limits(self) -> Limits:
        return self.config.limits(self.config.call_timeout_s)

    def sandbox_run_limits(self) -> Limits:
        return self._limits()

    async def sandbox_canary(self) -> str:
        """One session, one cell through the tool (kernel or replay, as requests get it)."""
        session = await self.seed_session({})
        try:
            reply = await self._execute(session, CodeArgs(code="print(6 * 7)"))
        except ToolError as exc:
            raise CanaryFailed(str(exc)) from exc
        finally:
            await self.close_session(session)
        if not reply.get("success") or reply.get("stdout", "").strip() != "42":
            raise CanaryFailed(f"the cell print(6 * 7) gave {reply}")
        mode = "kernel" if self._uses_kernel(session) else "replay"
        return f"a cell ran in a session sandbox ({mode})"

    def _kernel_limits(self) -> Limits:
        # A kernel lives for the whole session: its CPU rlimit is the session's budget (every
        # cell at its wall limit, plus one replay); each cell is bounded by call_timeout_s.
        return self.config.limits(self.config.call_timeout_s * (self.config.max_cells + 1))

    def _uses_kernel(self, session: Session) -> bool:
        return self.config.persistent_kernel and session.sandbox.supports_processes

    async def seed_session(self, row: dict[str, Any]) -> Session:
        return Session(await self.backend.create(SandboxSpec(limits=self._limits())))

    async def close_session(self, state: Session | None) -> None:
        if state is not None:
            if state.kernel is not None:
                await state.kernel.kill()
            await state.sandbox.destroy()  # kills anything else it runs, too

    async def _execute(self, session: Session, args: CodeArgs) -> dict[str, Any]:
        cfg = self.config
        async with session.lock:
            if len(session.executed) >= cfg.max_cells:
                raise ToolError(f"cell limit reached ({cfg.max_cells} per session); give your final answer")
            session.executed.append(args.code)
            if self._uses_kernel(session):
                return await self._execute_in_kernel(session, args)
            return await self._execute_replay(session, args)

    # -- persistent kernel -------------------------------------------------------------

    async def _start_kernel(self, session: Session) -> SandboxProcess:
        cfg = self.config
        proc = await session.sandbox.start_process([cfg.python or session.sandbox.python, "-I", "-c", KERNEL_SOURCE, "--repl"],
                                                   limits=self._kernel_limits())
        ready = await proc.read_until(KERNEL_READY, timeout=cfg.kernel_start_timeout_s)
        if not ready.found:
            err = proc.take("stderr")[-800:].decode("utf-8", "replace")
            await proc.kill()
            raise SandboxError(f"the Python kernel did not start ({ready.reason}): {err}")
        session.kernel = proc
        return proc

    async def _request(self, kernel: SandboxProcess, job: dict[str, Any], timeout: float) -> CellRun:
        marker = f"\n[verigym kernel {secrets.token_hex(8)} done]"
        kernel.take("stdout")
        kernel.take("stderr")
        try:
            await kernel.write_stdin(json.dumps({**job, "marker": marker}).encode() + b"\n")
        except SandboxError:
            return CellRun("eof", b"", kernel.take("stderr"))
        out = await kernel.read_until(marker.encode(), timeout=timeout, max_bytes=self.config.max_output_bytes)
        if not out.found:
            return CellRun(out.reason, out.data, kernel.take("stderr"))
        status = await kernel.read_until(b"\n", timeout=_MARKER_GRACE_S)
        err = await kernel.read_until(marker.encode(), timeout=_MARKER_GRACE_S, stream="stderr",
                                      max_bytes=self.config.max_output_bytes)
        stderr = err.data[:-len(marker)] if err.found else err.data
        code = status.data.strip()
        return CellRun("ok", out.data[:-len(marker)], stderr, int(code) if code.isdigit() else 1)

    async def _restart_kernel(self, session: Session) -> bool:
        """Kill the kernel, start a new one and replay the cells that ran. False = the replay
        itself failed: the new kernel starts empty and the history is dropped."""
        if session.kernel is not None:
            await session.kernel.kill()
            session.kernel = None
        kernel = await self._start_kernel(session)
        if not session.history:
            return True
        replay = await self._request(kernel, {"replay": session.history}, self.config.call_timeout_s)
        if replay.ended == "ok":
            return True
        await kernel.kill()
        session.kernel = None
        session.history.clear()
        await self._start_kernel(session)
        return False

    async def _execute_in_kernel(self, session: Session, args: CodeArgs) -> dict[str, Any]:
        cfg = self.config
        try:
            kernel = session.kernel
            if kernel is None or kernel.returncode is not None:
                # Not started yet, or ended between calls: a new kernel with the state replayed.
                await self._restart_kernel(session) if kernel is not None else await self._start_kernel(session)
                kernel = session.kernel
            assert kernel is not None
            run = await self._request(kernel, {"cell": args.code}, cfg.call_timeout_s)
            if run.ended != "ok":
                died_status = await kernel.wait(_MARKER_GRACE_S) if run.ended == "eof" else None
                kept = await self._restart_kernel(session)
        except SandboxError as exc:
            raise ToolError(f"the Python sandbox failed (not your code): {exc}") from exc
        stdout, out_cut = _clip(run.stdout.decode("utf-8", "replace"), cfg.max_output_chars)
        stderr, err_cut = _clip(run.stderr.decode("utf-8", "replace"), cfg.max_output_chars)
        reply: dict[str, Any] = {"stdout": stdout, "stderr": stderr,
                                 "truncated": out_cut or err_cut or run.ended == "max_bytes"}
        if run.ended == "ok":
            session.history.append(args.code)
            reply["success"] = run.status == 0
            if reply["success"]:
                session.ran.append(args.code)
            return reply
        if run.ended == "timeout":
            reason = f"timed out after {cfg.call_timeout_s:g}s"
        elif run.ended == "max_bytes":
            reason = f"printed more than {cfg.max_output_bytes} bytes"
        elif died_status == 128 + 24:  # SIGXCPU: the session's CPU budget is spent
            reason = "used the session's CPU-time limit"
        else:
            reason = f"ended the Python process itself (exit status {died_status})"
        state = ("variables from your earlier successful cells are kept, this cell's effects are gone" if kept
                 else "re-running your earlier cells failed, so all variables are gone")
        reply.update(success=False, timed_out=run.ended == "timeout",
                     error=f"Execution {reason}. The kernel was restarted: {state}.")
        return reply

    # -- replay: one exec per call (backends without long-lived processes) --------------

    async def _execute_replay(self, session: Session, args: CodeArgs) -> dict[str, Any]:
        cfg = self.config
        marker = f"\n[verigym kernel {secrets.token_hex(8)} done]"
        job = json.dumps({"history": session.history, "cell": args.code, "marker": marker}).encode()
        try:
            result = await session.sandbox.exec([cfg.python or session.sandbox.python, "-I", "-c", KERNEL_SOURCE],
                                                stdin=job, timeout=cfg.call_timeout_s, limits=self._limits())
        except SandboxError as exc:
            raise ToolError(f"the Python sandbox failed (not your code): {exc}") from exc
        raw_stderr = result.text("stderr")
        completed = raw_stderr.endswith(marker)
        stdout, out_cut = _clip(result.text("stdout"), cfg.max_output_chars)
        stderr, err_cut = _clip(raw_stderr[:-len(marker)] if completed else raw_stderr, cfg.max_output_chars)
        reply: dict[str, Any] = {"stdout": stdout, "stderr": stderr,
                                 "truncated": out_cut or err_cut or result.stdout_truncated or result.stderr_truncated}
        if result.verdict is ResourceVerdict.OK and completed:
            session.history.append(args.code)
            reply["success"] = result.exit_code == 0
            if reply["success"]:
                session.ran.append(args.code)
            return reply
        # The call was killed: drop this cell so replaying it cannot kill every later call too.
        reasons = {ResourceVerdict.TIMEOUT: f"timed out after {cfg.call_timeout_s:g}s",
                   ResourceVerdict.CPU_LIMIT: "used its CPU-time limit",
                   ResourceVerdict.MEMORY_LIMIT: f"ran out of memory ({cfg.memory_mb} MiB)",
                   ResourceVerdict.OUTPUT_LIMIT: f"printed more than {cfg.max_output_bytes} bytes"}
        if result.verdict is ResourceVerdict.OK:
            reason = f"ended the Python process itself (exit status {result.exit_code})"
        else:
            reason = reasons.get(result.verdict, f"was killed ({result.verdict.value})")
        reply.update(success=False, timed_out=result.verdict in (ResourceVerdict.TIMEOUT, ResourceVerdict.CPU_LIMIT),
                     error=f"Execution {reason}. The kernel was restarted: variables from your earlier "
                           f"successful cells are kept, this cell's effects are gone.")
        return reply

    @tool("Execute Python code (numpy, scipy, pandas, sympy available) and return stdout/stderr. "
          "Variables persist between calls like a notebook.")
    async def execute_python(self, session: Session, args: CodeArgs) -> dict[str, Any]:
        return await self._execute(session, args)

    @tool("Alias of execute_python.")
    async def run_python(self, session: Session, args: CodeArgs) -> dict[str, Any]:
        return await self._execute(session, args)

    @tool("Execute Python code in a stateful Jupyter-notebook-like environment; variables persist across "
          "calls within the same session (NeMo-Skills' tool, as ns_tools rows name it).")
    async def stateful_python_code_exec(self, session: Session, args: CodeArgs) -> dict[str, Any]:
        reply = await self._execute(session, args)
        # NeMo-Skills' sandbox reports process_status: completed | error | timeout.
        status = "timeout" if reply.get("timed_out") else "completed" if reply.get("success") else "error"
        return {**reply, "process_status": status}

    async def verify(self, row: MathPythonRow, response: ResponseObject, session: Session | None) -> Verdict:
        cfg = self.config
        text = strip_think(response.last_message_text or response.output_text)
        gold = row.gold
        extracted, rule = extract_answer(text, cfg.extraction, incomplete=is_incomplete(response))
        extras: dict[str, Any] = {"expected_answer": gold, "extracted_answer": extracted, "extraction_rule": rule,
                                  "tool_calls": len(session.executed) if session else len(response.function_calls)}
        if row.expected_code_contains:
            # Required work is work that ran: with a session, the cells this server ran without an
            # error; without one (a recorded rollout), calls of this environment's tools with JSON
            # arguments that the harness recorded an output for. A call that never ran does not count.
            cells = list(session.ran) if session is not None else recorded_cells(response, set(self.tools()))
            extras["code_requirement_met"] = any(code_contains(c, row.expected_code_contains) for c in cells)
            if not extras["code_requirement_met"]:
                return Verdict(0.0, extras=extras)
        if extracted is None:
            return Verdict(0.0, extras={**extras, "scored_by": "no_answer"})
        return await score_final_answer(self, gold, extracted, extras, timeout=cfg.cpu_task_timeout_s,
                                        limits=cfg.answer_limits, cpu_share=cfg.deadline_cpu_share)
