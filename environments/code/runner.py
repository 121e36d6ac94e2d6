"""Run one submission's tests in one sandbox exec and judge every test in the server.

The in-sandbox half is ``harness.py`` (see its docstring for why the program cannot forge
results). This half builds the job, runs the exec under a global backstop
``(t + 1) * n + 5`` seconds (LiveCodeBench's join timeout), keeps only records that carry
this run's random token, and turns raw outputs into verdicts by comparing them with the
expected outputs, which never enter the sandbox.
"""

from __future__ import annotations

import json
import math
import secrets
import signal
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sandboxes.base import ExecResult, Limits, ResourceVerdict, Sandbox

from .compare import call_matches, stdio_matches

HARNESS_SOURCE = (Path(__file__).with_name("harness.py")).read_text()
EXIT_MEMORY, EXIT_OUTPUT = 96, 97  # must match harness.py

AC, WA, TLE, RE, MLE, OLE, SKIPPED = "AC", "WA", "TLE", "RE", "MLE", "OLE", "SKIPPED"
# LiveCodeBench's per-test result codes, for consumers that read ``result`` like LCB does.
LCB_CODE: dict[str, Any] = {AC: True, WA: -2, TLE: -3, RE: -4, MLE: -4, OLE: -4, SKIPPED: -1}


@dataclass(frozen=True)
class RunSettings:
    python: str | None  # None: the sandbox's own interpreter via exec_python (zygote where available)
    timeout_s: float
    memory_mb: int
    output_limit_bytes: int
    max_total_output_bytes: int
    stop_on_failure: bool
    float_tolerance: float
    max_processes: int
    max_open_files: int


@dataclass
class TestVerdict:
    index: int
    verdict: str
    wall_s: float = 0.0
    cpu_s: float = 0.0
    detail: str | None = None


@dataclass
class RunOutcome:
    compile_error: str | None = None
    tests: list[TestVerdict] = field(default_factory=list)
    bad_row: str | None = None  # the row itself is unusable (e.g. a call-based input is not JSON)
    exec_verdict: str = "ok"
    wall_s: float = 0.0

    @property
    def passed(self) -> int:
        return sum(t.verdict == AC for t in self.tests)

    @property
    def first_failure(self) -> str | None:
        return next((t.verdict for t in self.tests if t.verdict != AC), None)

    def as_extras(self) -> dict[str, Any]:
        return {
            "compile_error": self.compile_error,
            "verdicts": [t.verdict for t in self.tests],
            "first_failure": "CE" if self.compile_error else self.first_failure,
            "tests_passed": self.passed,
            "tests_total": len(self.tests),
            "tests": [{k: v for k, v in asdict(t).items() if v is not None} for t in self.tests],
            "result": [LCB_CODE[t.verdict] for t in self.tests],
            "unit_tests_time_taken": round(self.wall_s, 4),
        }


def backstop_s(timeout_s: float, n_tests: int) -> float:
    """LiveCodeBench's global join timeout: every test may use its limit, plus slack."""
    return (timeout_s + 1.0) * n_tests + 5.0


def exec_limits(settings: RunSettings, inputs: list[str]) -> Limits:
    wall = backstop_s(settings.timeout_s, len(inputs))
    biggest_input = max((len(i.encode()) for i in inputs), default=0)
    file_mb = math.ceil(max(biggest_input, settings.output_limit_bytes) / (1 << 20)) + 1
    return Limits(
        wall_s=wall, cpu_s=wall,
        # The harness holds every input and output in memory next to the interpreter.
        memory_mb=settings.memory_mb + 256 + 3 * math.ceil(sum(map(len, inputs)) / (1 << 20)),
        max_processes=settings.max_processes, max_file_mb=file_mb,
        max_open_files=settings.max_open_files, max_output_bytes=settings.max_total_output_bytes)


def _test_verdict(rec: dict[str, Any], expected: str, fn_name: str | None, settings: RunSettings) -> TestVerdict:
    index, wall, cpu = rec["test"], float(rec.get("wall_s", 0)), float(rec.get("cpu_s", 0))
    sig, code = rec.get("signal"), rec.get("exit")
    cap = settings.output_limit_bytes

    def verdict(name: str, detail: str | None = None) -> TestVerdict:
        return TestVerdict(index, name, wall, cpu, detail)

    if rec.get("timed_out") or sig == signal.SIGXCPU:
        return verdict(TLE, f"over the {settings.timeout_s:g}s per-test limit")
    if sig == signal.SIGXFSZ or code == EXIT_OUTPUT or rec.get("stdout_bytes", 0) >= cap \
            or rec.get("result_bytes", 0) >= cap:
        return verdict(OLE, f"output over {cap} bytes")
    if code == EXIT_MEMORY:
        return verdict(MLE, f"MemoryError under the {settings.memory_mb} MiB limit")
    if sig is not None:
        return verdict(RE, f"killed by signal {signal.Signals(sig).name if sig in signal.valid_signals() else sig}")
    if code != 0:
        return verdict(RE, (rec.get("stderr_tail") or f"exit status {code}")[-1000:])
    got = rec.get("result") if fn_name is not None else rec.get("stdout", "")
    matches = call_matches if fn_name is not None else stdio_matches
    if matches(got or "", expected, tolerance=settings.float_tolerance):
        return verdict(AC)
    return verdict(WA, f"got {str(got)[:200]!r}, expected {expected[:200]!r}")


def _records(result: ExecResult, token: bytes) -> list[dict[str, Any]]:
    prefix = token + b" "
    records = []
    for line in result.stdout.split(b"\n"):
        if not line.startswith(prefix):
            continue  # only the harness knows the token; anything else is ignored
        try:
            records.append(json.loads(line[len(prefix):]))
        except ValueError:
            continue  # a line cut by the output cap
    return records


def _missing_verdict(result: ExecResult) -> tuple[str, str]:
    """What an unreported test gets, from how the whole exec ended."""
    if result.verdict is ResourceVerdict.TIMEOUT:
        return TLE, "global time limit (backstop) reached"
    if result.verdict is ResourceVerdict.OUTPUT_LIMIT:
        return OLE, "total output over the limit"
    if result.verdict is ResourceVerdict.MEMORY_LIMIT:
        return MLE, "the run exceeded its memory limit"
    return RE, f"test harness stopped ({result.verdict.value}, exit {result.exit_code}): the program killed it"


async def run_submission(sandbox: Sandbox, code: str, inputs: list[str], outputs: list[str],
                         fn_name: str | None, settings: RunSettings) -> RunOutcome:
    """Raises SandboxError on infrastructure failure; everything the program does is a verdict."""
    token = secrets.token_hex(16).encode()
    job = {"code": code, "fn_name": fn_name, "inputs": inputs, "timeout_s": settings.timeout_s,
           "memory_mb": settings.memory_mb, "output_limit_bytes": settings.output_limit_bytes,
           "stop_on_failure": settings.stop_on_failure}
    limits = exec_limits(settings, inputs)
    stdin = token + json.dumps(job).encode()
    if settings.python is None:
        result = await sandbox.exec_python(code=HARNESS_SOURCE, stdin=stdin, timeout=limits.wall_s, limits=limits)
    else:
        result = await sandbox.exec([settings.python, "-I", "-B", "-c", HARNESS_SOURCE],
                                    stdin=stdin, timeout=limits.wall_s, limits=limits)
    outcome = RunOutcome(exec_verdict=result.verdict.value, wall_s=result.wall_s)
    records = _records(result, token)
    if not records:
        outcome.exec_verdict = result.verdict.value
        # The harness never got as far as compiling: an infrastructure problem, not the program's.
        raise HarnessFailed(f"test harness produced no records ({result.verdict.value}, exit {result.exit_code}): "
                            f"{result.text('stderr')[-1500:]}")
    head = records[0]
    if head.get("compile") == "error":
        outcome.compile_error = head.get("detail") or "compile error"
        return outcome
    by_index = {r["test"]: r for r in records if "test" in r}
    done = any("done" in r for r in records)
    stopped = False
    for index, expected in enumerate(outputs):
        rec = by_index.get(index)
        if rec is not None and "bad_input" in rec:
            outcome.bad_row = f"test {index}: {rec['bad_input']}"
            return outcome
        if rec is not None:
            test = _test_verdict(rec, expected, fn_name, settings)
        elif done or stopped:
            test = TestVerdict(index, SKIPPED)  # harness stopped at the first failure (config)
        else:
            test = TestVerdict(index, *_missing_verdict(result))
            stopped = True
        outcome.tests.append(test)
    return outcome


class HarnessFailed(RuntimeError):
    """The harness itself could not run (bad interpreter path, sandbox broken)."""
