"""``math_python``: math with a stateful Python tool (NeMo-Gym ``math_with_code`` rows).

``/seed_session`` creates a sandbox for the rollout; ``POST /execute_python`` (alias
``/run_python``) runs a cell there, notebook-style (see ``kernel.py`` for how state
persists); ``/verify`` scores the final answer exactly like the ``math`` environment
(same extraction and the same pure scoring functions) and frees the sandbox.
"""

from __future__ import annotations

import json
import secrets
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, field_validator

from environments.math.extract import extract_answer
from environments.math.scoring import fast_equivalence, library_score
from sandboxes import Limits, ResourceVerdict, SandboxError, SandboxSpec, open_backend
from sandboxes.base import Sandbox, SandboxBackend
from servers.cpu_pool import CpuTimeout
from servers.environment import EnvConfig, Environment, ToolError, Verdict, tool
from servers.wire import FailureClass, ResponseObject, RowModel

KERNEL_SOURCE = Path(__file__).with_name("kernel.py").read_text()


class MathPythonRow(RowModel):
    expected_result: str = Field(..., min_length=1, description="Gold final answer (number or LaTeX).")
    expected_code_contains: str = Field("", description="If set, some executed cell must contain this text.")

    @field_validator("expected_result", mode="before")
    @classmethod
    def _numbers_as_text(cls, value: Any) -> Any:
        return str(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value


class MathPythonConfig(EnvConfig):
    sandbox_backend: str = Field("process", description="sandboxes.open_backend name.")
    sandbox_options: dict[str, Any] = Field(default_factory=dict, description="Backend constructor options.")
    python: str | None = Field(None, description="Interpreter inside the sandbox; null = the server's own.")
    call_timeout_s: float = Field(20.0, gt=0, description="Wall-clock limit of one tool call (replay + new cell).")
    memory_mb: int = Field(2048, ge=128, description="Address-space limit of a call (numpy/scipy/pandas need room).")
    max_processes: int = Field(32, ge=4, description="Processes a cell may run at once.")
    max_output_bytes: int = Field(1 << 20, ge=1024, description="Output captured per stream; past it the cell is killed.")
    max_output_chars: int = Field(8000, ge=100, description="Characters of stdout/stderr returned to the model.")
    max_cells: int = Field(64, ge=1, description="Cells per session; later calls get an error.")
    extraction: list[str] = Field(default_factory=lambda: ["boxed", "answer_line", "last_number"],
                                  description="Answer extraction rules (as in the math environment).")


class CodeArgs(BaseModel):
    code: str = Field(..., description="Python code to execute. Variables persist between calls.")


@dataclass
class Session:
    sandbox: Sandbox
    history: list[str] = field(default_factory=list)  # cells replayed before each new one
    executed: list[str] = field(default_factory=list)  # every cell the model sent (for expected_code_contains)


def _clip(text: str, limit: int) -> tuple[str, bool]:
    if len(text) <= limit:
        return text, False
    half = limit // 2
    return text[:half] + f"\n... [{len(text) - limit} characters cut] ...\n" + text[-half:], True


class MathPythonEnv(Environment):
    name = "math_python"
    domain = "math"
    summary = "Math with a stateful sandboxed Python tool (execute_python); final answer scored like math."
    needs = ("sandbox",)
    Row = MathPythonRow
    Config = MathPythonConfig
    stateful = True
    uses_cpu_pool = True
    cpu_pool_preload = ("sympy", "math_verify", "environments.math.scoring")

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.backend: SandboxBackend | None = None

    async def setup(self) -> None:
        self.backend = open_backend(self.config.sandbox_backend, **self.config.sandbox_options)

    async def close(self) -> None:
        if self.backend is not None:
            await self.backend.close()

    async def health(self) -> dict[str, Any]:
        return await self.backend.health() if self.backend else {"ok": False, "error": "backend not opened"}

    def _limits(self) -> Limits:
        cfg = self.config
        return Limits(wall_s=cfg.call_timeout_s, cpu_s=cfg.call_timeout_s, memory_mb=cfg.memory_mb,
                      max_processes=cfg.max_processes, max_output_bytes=cfg.max_output_bytes)

    async def seed_session(self, row: dict[str, Any]) -> Session:
        assert self.backend is not None, "setup() was not called"
        return Session(await self.backend.create(SandboxSpec(limits=self._limits())))

    async def close_session(self, state: Session | None) -> None:
        if state is not None:
            await state.sandbox.destroy()

    async def _execute(self, session: Session, args: CodeArgs) -> dict[str, Any]:
        cfg = self.config
        if len(session.executed) >= cfg.max_cells:
            raise ToolError(f"cell limit reached ({cfg.max_cells} per session); give your final answer")
        session.executed.append(args.code)
        marker = f"\n[verigym kernel {secrets.token_hex(8)} done]"
        job = json.dumps({"history": session.history, "cell": args.code, "marker": marker}).encode()
        try:
            result = await session.sandbox.exec([cfg.python or sys.executable, "-I", "-c", KERNEL_SOURCE],
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

    async def verify(self, row: MathPythonRow, response: ResponseObject, session: Session | None) -> Verdict:
        cfg = self.config
        text = response.last_message_text or response.output_text
        gold = row.expected_result
        extracted, rule = extract_answer(text, cfg.extraction)
        extras: dict[str, Any] = {"expected_answer": gold, "extracted_answer": extracted, "extraction_rule": rule,
                                  "tool_calls": len(session.executed) if session else len(response.function_calls)}
        if row.expected_code_contains:
            cells = list(session.executed) if session else []
            cells += [c.arguments or "" for c in response.function_calls]
            extras["code_requirement_met"] = any(row.expected_code_contains in c for c in cells)
            if not extras["code_requirement_met"]:
                return Verdict(0.0, extras=extras)
        if extracted is None:
            return Verdict(0.0, extras={**extras, "scored_by": "no_answer"})
        decided = fast_equivalence(gold, extracted)
        if decided is not None:
            return Verdict(1.0 if decided else 0.0, extras={**extras, "scored_by": "exact"})
        try:
            reward, error = await self.cpu(library_score, gold, extracted, timeout=cfg.cpu_task_timeout_s)
        except CpuTimeout as exc:
            return Verdict.failure(FailureClass.TIMEOUT, f"math-verify passed its deadline: {exc}", **extras)
        if error is not None:
            return Verdict.failure(FailureClass.VERIFIER_ERROR, error, **extras)
        return Verdict(reward, extras={**extras, "scored_by": "math_verify"})
