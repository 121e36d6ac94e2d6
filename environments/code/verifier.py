"""``code``: competition programming (LiveCodeBench / NeMo-Gym ``code_gen`` rows).

Reward: 1.0 when every unit test passes (``reward_mode: binary``) or the fraction of
passing tests (``reward_mode: fraction``). Extraction in ``extract.py``, the in-sandbox
test loop in ``harness.py``, judging in ``runner.py`` / ``compare.py``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from sandboxes import Limits, SandboxError, SandboxSpec
from sandboxes.base import Sandbox
from sandboxes.env_support import CanaryFailed, SandboxConfig, SandboxedEnvironment
from sandboxes.pool import SandboxPool
from servers.environment import EnvConfig, Environment, Verdict
from servers.wire import FailureClass, ResponseObject, RowModel, response_from_text

from .extract import extract_code
from .runner import HarnessFailed, RunSettings, exec_limits, run_submission

# The start-up canary: one correct solution scored through verify() (harness, interpreter,
# limits, pool: the path every request takes), which must give reward 1.
CANARY_ROW = {"responses_create_params": {"input": [{"role": "user", "content": "start-up canary"}]},
              "verifier_metadata": {"unit_tests": {"inputs": ["20\n"], "outputs": ["42"]}}}
CANARY_ANSWER = "```python\nprint(int(input()) + 22)\n```"


class UnitTests(BaseModel):
    model_config = ConfigDict(extra="allow")

    inputs: list[str] = Field(min_length=1)
    outputs: list[str] = Field(min_length=1)
    fn_name: str | None = None  # call-based (LeetCode style) when set; stdin/stdout otherwise

    @field_validator("fn_name")
    @classmethod
    def _blank_is_none(cls, value: str | None) -> str | None:
        # Datasets write "" for stdin/stdout problems; as a name it made every test a failed call.
        return value if value is None or value.strip() else None

    @model_validator(mode="after")
    def _same_length(self) -> "UnitTests":
        if len(self.inputs) != len(self.outputs):
            raise ValueError(f"unit_tests has {len(self.inputs)} inputs but {len(self.outputs)} outputs")
        return self


class VerifierMetadata(BaseModel):
    model_config = ConfigDict(extra="allow")

    unit_tests: UnitTests


class CodeRow(RowModel):
    verifier_metadata: VerifierMetadata


class CodeConfig(SandboxConfig, EnvConfig):
    python: str | None = Field(None, description="Interpreter inside the sandbox; null = the sandbox's own "
                               "(the server's, served by the backend's exec_python: a pre-forked zygote).")
    sandbox_pool_size: int = Field(0, ge=0, description="Warm sandboxes kept ready (reset between verifications); "
                                   "0 = a fresh sandbox per verification.")
    sandbox_pool_max: int = Field(32, ge=1, description="Most pooled sandboxes alive at once (pool only).")
    test_timeout_s: float = Field(6.0, gt=0, description="Wall-clock limit per unit test (LiveCodeBench: 6).")
    memory_mb: int = Field(1024, ge=64, description="Address-space limit of the program, per test.")
    output_limit_mb: float = Field(16.0, gt=0, description="Largest stdout (or return value) of one test.")
    max_total_output_mb: float = Field(96.0, gt=0, description="Cap on everything one submission sends back.")
    max_processes: int = Field(64, ge=4, description="Processes the program may run at once.")
    max_open_files: int = Field(256, ge=16, description="Open file descriptors per process.")
    reward_mode: Literal["binary", "fraction"] = Field("binary", description="all-pass 1/0, or fraction passed.")
    stop_at_first_failure: bool = Field(True, description="Binary mode: stop after the first TLE/RE/MLE/OLE.")
    float_tolerance: float = Field(1e-6, ge=0, description="Numeric tolerance when outputs differ as text; 0 = exact.")


class CodeEnv(SandboxedEnvironment, Environment):
    name = "code"
    agent_names = ("code_gen_simple_agent", "competitive_coding_simple_agent",)  # NeMo-Gym agent_ref.name values routed here
    domain = "coding"
    summary = "Competition Python code run against unit tests (stdin/stdout or fn_name) in a sandbox."
    needs = ("sandbox",)
    Row = CodeRow
    Config = CodeConfig

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.pool: SandboxPool | None = None

    async def setup(self) -> None:
        await super().setup()
        cfg = self.config
        if cfg.sandbox_pool_size:
            self.pool = SandboxPool(self.backend, SandboxSpec(), size=cfg.sandbox_pool_size,
                                    max_size=max(cfg.sandbox_pool_size, cfg.sandbox_pool_max))
            await self.pool.start(wait=False)  # fills in the background; acquire() grows on demand

    async def close(self) -> None:
        if self.pool is not None:
            await self.pool.close()
        await super().close()

    def sandbox_run_limits(self) -> Limits:
        return exec_limits(self.settings(), ["1\n"])

    async def sandbox_canary(self) -> str:
        verdict = await self.verify(CodeRow.model_validate(CANARY_ROW),
                                    ResponseObject.model_validate(response_from_text(CANARY_ANSWER)), None)
        if verdict.failure_class is not None or verdict.reward != 1.0:
            failure = getattr(verdict.failure_class, "value", verdict.failure_class)
            raise CanaryFailed(f"a correct solution scored {verdict.reward} "
                               f"({failure}: {verdict.failure_detail or verdict.extras.get('tests')})")
        return "a correct solution scored 1 through verify"

    def settings(self) -> RunSettings:
        cfg = self.config
        return RunSettings(
            python=cfg.python, timeout_s=cfg.test_timeout_s, memory_mb=cfg.memory_mb,
            output_limit_bytes=int(cfg.output_limit_mb * (1 << 20)),
            max_total_output_bytes=int(cfg.max_total_output_mb * (1 << 20)),
            stop_on_failure=cfg.stop_at_first_failure and cfg.reward_mode == "binary",
            float_tolerance=cfg.float_tolerance, max_processes=cfg.max_processes,
            max_open_files=cfg.max_open_files)

    async def _run(self, sandbox: Sandbox, code: str, tests: UnitTests):  # type: ignore[no-untyped-def]
        return await run_submission(sandbox, code, tests.inputs, tests.outputs, tests.fn_name, self.settings())

    async def verify(self, row: CodeRow, response: ResponseObject, session: Any | None) -> Verdict:
        text = response.output_text
        code = extract_code(text)
        extras: dict[str, Any] = {"extracted_model_output": text, "extracted_model_code": code}
        if code is None:
            return Verdict(0.0, extras={**extras, "first_failure": "NO_CODE", "verdicts": []})
        tests = row.verifier_metadata.unit_tests
        try:
            if self.pool is not None:
                # Reset (workspace wiped, leftovers killed) before the next holder gets it.
                async with self.pool.acquire() as sandbox:
                    outcome = await self._run(sandbox, code, tests)
            else:
                sandbox = await self.backend.create(SandboxSpec())
                try:
                    outcome = await self._run(sandbox, code, tests)
                finally:
                    await sandbox.destroy()
        except (SandboxError, HarnessFailed) as exc:
            return Verdict.failure(FailureClass.SANDBOX_ERROR, str(exc)[-2000:], **extras)
        if outcome.bad_row:
            return Verdict.failure(FailureClass.VERIFIER_ERROR, f"unusable unit test: {outcome.bad_row}", **extras)
        extras.update(outcome.as_extras())
        total = len(tests.outputs)
        if outcome.compile_error:
            return Verdict(0.0, extras=extras)
        if self.config.reward_mode == "fraction":
            return Verdict(outcome.passed / total, extras=extras)
        return Verdict(1.0 if outcome.passed == total else 0.0, extras=extras)
