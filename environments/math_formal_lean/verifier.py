"""``math_formal_lean``: Lean 4 proofs (NeMo-Gym ``math_formal_lean`` rows), single- and multi-turn.

Reward 1.0 iff the proof, put after the row's header and statement, compiles with no error,
no ``sorry`` warning, no forbidden token (``sorry``, ``admit``, ``axiom``, ``native_decide``,
... -- ``forbidden`` in config.yaml) and, with ``check_axioms``, no axiom beyond
``allowed_axioms`` in ``#print axioms`` of the theorem (``sorryAx``, ``Lean.ofReduceBool``,
an axiom the proof declared). Extraction and assembly: ``proof.py``; the checkers (a local
``lean`` in a sandbox, or a Kimina Lean server over HTTP): ``checkers.py``.

Multi-turn, two ways: (1) NeMo-Gym's ``proof_refinement_agent`` calls ``/verify`` once per
turn; every failing reply carries ``error_feedback`` and a ``correction_prompt`` it sends
back to the model (stateless, as in NeMo-Gym). (2) A session (``/seed_session``) gives the
model the tool ``check_proof``: it compiles an attempt and returns Lean's errors as the tool
result, up to ``max_checks_per_session`` times; ``/verify`` grades the final answer's code
block (or the last checked attempt when the final message has no code block), reusing the compile of an attempt
that was already checked.

A compile past ``compile_timeout_s`` scores 0 when the proof caused it (it raised Lean's own
limits, or the compile was busy computing) and is failure class ``timeout`` (masked) when the
checker was starved (``timeout_policy: auto``; ``zero`` always scores 0 as NeMo-Gym does,
``mask`` always masks); a checker that is down or broken is
``sandbox_error`` / ``dependency_error``, never a reward. The local checker's limit counts the
compile's own time (wall time minus the time it waited for a CPU other processes held), so a
busy machine neither cuts a proof short nor turns its timeout into a masked one; a machine too
busy to give the compile its time within ``timeout_wall_stretch`` times the limit is the
checker's timeout.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, model_validator

from sandboxes.env_support import SandboxedEnvironment, SandboxLimitsConfig
from servers.environment import EnvConfig, Environment, SessionError, ToolError, Verdict, tool
from servers.wire import FailureClass, ResponseObject, RowModel

from . import lean_messages
from .checkers import CompileResult, KiminaChecker, LocalLeanChecker
from .proof import BuiltProof, build, forbidden_tokens, leaves_open, raises_lean_limits, theorem_name

ENV_DIR = "{env_dir}"
# What a proof may not contain (comments and strings excluded): placeholders, new axioms,
# compiler-trusting tactics, code that runs or redefines syntax at elaboration time, and
# ``namespace`` (a proof could declare a look-alike theorem for ``#print axioms`` to find).
DEFAULT_FORBIDDEN = ["sorry", "admit", "sorryAx", "axiom", "native_decide", "implemented_by", "extern", "unsafe",
                     "opaque", "#exit", "#eval", "run_cmd", "run_tac", "run_elab", "run_meta", "elab", "elab_rules",
                     "macro", "macro_rules", "syntax", "namespace", "debug.skipKernelTC"]
# NeMo-Gym's Nemotron refinement prompt (math_formal_lean REFINEMENT_PROMPT_TEMPLATE), word for word, so a
# proof_refinement_agent run here trains on the prompt the recipes used.
NEMOTRON_REFINEMENT_PROMPT = (
    "Here is a proof attempt for the following theorem in Lean4.\n\n{proof_attempt}\n\nThe proof is not correct. "
    "Following is the compilation error message:\n\n{error_message}\n\nYour task is to fix this proof. Before "
    "producing the Lean 4 code to formally prove the given theorem, do a detailed analysis of the error message. "
    "Your final answer must be a single, complete Lean 4 markdown code block containing the completed theorem. Do "
    "NOT include any text or explanation before or after the code block. Begin with ```lean4 and end with ```.")


class LeanRow(RowModel):
    header: str = Field(..., description="Imports, options and opens the statement needs (trusted).")
    formal_statement: str = Field(..., min_length=1, description="The theorem, ending with ':= by' (trusted).")
    informal_prefix: str | None = None
    name: str | None = None
    turn_index: int = Field(0, ge=0, description="Refinement turn (NeMo-Gym proof_refinement_agent); echoed.")


class LeanConfig(SandboxLimitsConfig, EnvConfig):
    checker: Literal["local", "kimina"] = Field("local", description="local: lean_command in a sandbox; kimina: a Lean REPL server over HTTP.")
    lean_command: list[str] = Field(default_factory=lambda: ["lake", "env", "lean"], min_length=1,
                                    description="argv that compiles a file (the file path is appended).")
    lean_project_dir: str | None = Field(None, description="Lean project with Mathlib built; the command runs there (read-only).")
    lean_toolchain_dirs: list[str] = Field(default_factory=list, description="Host folders bound read-only into the sandbox (elan home, toolchain).")
    lean_env: dict[str, str] = Field(default_factory=dict, description="Environment of the Lean command (PATH, ELAN_HOME, LEAN_PATH...).")
    lean_image: str | None = Field(None, description="Image with Lean and the project, for sandbox_backend container / apptainer (SIF path).")
    kimina_url: str = Field("http://127.0.0.1:8000", description="Base URL of the Kimina Lean server.")
    kimina_api_key_env: str | None = Field("LEAN_SERVER_API_KEY", description="Environment variable holding its API key (unset: no key).")
    kimina_retries: int = Field(2, ge=0, description="Retries on connection errors and HTTP 429/502/503/504.")
    kimina_request_overhead_s: float = Field(30.0, ge=0, description="Queueing time allowed on top of compile_timeout_s.")
    compile_timeout_s: float = Field(30.0, gt=0, description="Limit of one compile (NeMo-Gym: 30 s).")
    timeout_policy: Literal["auto", "mask", "zero"] = Field(
        "auto", description="A compile past the limit: reward 0 (zero, NeMo-Gym), failure class timeout (mask), or auto: "
        "0 when the proof caused it (it raised Lean's own limits with set_option maxHeartbeats/maxRecDepth, or the "
        "compile was busy for timeout_cpu_share of the limit), else the failure class (a starved or overloaded checker).")
    timeout_cpu_share: float = Field(0.25, gt=0, le=1, description="timeout_policy auto: a timed-out compile that used "
                                     "at least this share of compile_timeout_s in CPU was the proof's doing.")
    timeout_wall_stretch: float = Field(8.0, ge=1, description="Local checker: compile_timeout_s counts the compile's "
                                        "own time (wall minus the time it waited for a CPU other processes held), within "
                                        "this many times compile_timeout_s of wall clock; a compile the busy machine kept "
                                        "from its time that long is the checker's timeout (masked). 1 = plain wall clock.")
    memory_mb: int = Field(16384, ge=256, description="Address-space limit of lean (Mathlib's .olean files are memory-mapped).")
    max_output_chars: int = Field(4000, ge=200, description="Characters of compiler output kept in the reply.")
    extract_code_mode: Literal["last", "first"] = Field("last", description="Which fenced Lean block is the answer.")
    final_answer_key: str | None = Field(None, description="If set and present, only the text after it is searched.")
    strip_theorem_from_proof: bool = Field(True, description="Keep only the proof when the answer restates the theorem.")
    restate_formal_statement: bool = Field(True, description="Put the row's statement before the proof.")
    require_code_block: bool = Field(False, description="An answer without a fenced block scores 0 without compiling.")
    forbidden: list[str] = Field(default_factory=lambda: list(DEFAULT_FORBIDDEN), description="Tokens the proof may not contain (comments and strings excluded).")
    check_axioms: bool = Field(True, description="Append '#print axioms NAME' and require allowed_axioms only.")
    allowed_axioms: list[str] = Field(default_factory=lambda: ["propext", "Classical.choice", "Quot.sound"])
    max_feedback_errors: int = Field(8, ge=1, description="Errors shown to the model per failed attempt.")
    refinement_prompt_template: str | None = Field(None, description="correction_prompt with {proof_attempt} and "
                                                   "{error_message}; null = NeMo-Gym's Nemotron refinement prompt.")
    max_checks_per_session: int = Field(8, ge=1, description="check_proof calls per session.")


    @model_validator(mode="after")
    def _image_for_container_backends(self) -> "LeanConfig":
        if self.checker == "local" and self.sandbox_backend != "process" and not self.lean_image:
            raise ValueError(f"sandbox_backend {self.sandbox_backend} needs lean_image (an image with Lean, Mathlib "
                             "and the project at lean_project_dir)")
        return self


class ProofArgs(BaseModel):
    proof: str = Field(..., description="Lean 4 code: the theorem with its proof, or the proof alone (tactics).")


@dataclass
class Outcome:
    status: str  # completed | compile_error | has_sorry | forbidden | bad_axioms | no_proof | timeout | checker_unavailable | axioms_unknown
    built: BuiltProof
    result: CompileResult | None = None
    forbidden: list[str] = field(default_factory=list)
    axioms: list[str] | None = None
    feedback: str = ""


@dataclass
class LeanSession:
    row: LeanRow
    attempts: list[Outcome] = field(default_factory=list)
    compiled: dict[str, CompileResult] = field(default_factory=dict)  # file -> result, for verify
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


def _resolve(value: str, env_dir: str) -> str:
    return value.replace(ENV_DIR, env_dir)


class MathFormalLeanEnv(SandboxedEnvironment, Environment):
    name = "math_formal_lean"
    domain = "math"
    summary = "Lean 4 proofs compiled (local lean in a sandbox, or a Kimina Lean server): no errors, no sorry, no new axioms; multi-turn feedback"
    needs = ("lean",)
    Row = LeanRow
    Config = LeanConfig
    stateful = True
    agent_names = ("math_formal_lean_simple_agent", "math_formal_lean_refinement_agent")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cfg, env_dir = self.config, str(self.runtime.folder)
        resolved: dict[str, Any] = {
            "lean_command": [_resolve(part, env_dir) for part in cfg.lean_command],
            "lean_project_dir": _resolve(cfg.lean_project_dir, env_dir) if cfg.lean_project_dir else None,
            "lean_toolchain_dirs": [_resolve(d, env_dir) for d in cfg.lean_toolchain_dirs],
        }
        if cfg.checker == "local" and cfg.sandbox_backend == "process":
            # The process sandbox sees only what is bound: the toolchain and the project, read-only.
            binds = [*cfg.sandbox_options.get("extra_ro_binds", ()), *resolved["lean_toolchain_dirs"]]
            if resolved["lean_project_dir"]:
                binds.append(resolved["lean_project_dir"])
            resolved["sandbox_options"] = {**cfg.sandbox_options, "extra_ro_binds": binds}
        self.config = cfg.model_copy(update=resolved)
        self.open_backend_at_setup = self.config.checker == "local"
        self.checker = self._make_checker()

    def _make_checker(self) -> LocalLeanChecker | KiminaChecker:
        cfg = self.config
        if cfg.checker == "kimina":
            key = os.environ.get(cfg.kimina_api_key_env) if cfg.kimina_api_key_env else None
            return KiminaChecker(cfg.kimina_url, api_key=key, retries=cfg.kimina_retries,
                                 request_overhead_s=cfg.kimina_request_overhead_s, max_output_chars=cfg.max_output_chars)
        return LocalLeanChecker(lambda: self.backend, cfg.lean_command, project_dir=cfg.lean_project_dir,
                                env=cfg.lean_env, image=cfg.lean_image, limits=self._limits,
                                max_output_chars=cfg.max_output_chars)

    def _limits(self, wall_s: float):  # type: ignore[no-untyped-def]
        # Lean elaborates on several threads (CPU time can exceed wall time) and opens many .olean files.
        return replace(self.config.limits(wall_s), cpu_s=wall_s * 4, max_open_files=4096, max_file_mb=256,
                       wall_stretch=self.config.timeout_wall_stretch)

    async def health(self) -> dict[str, Any]:
        report = await self.checker.health()
        if self.config.checker == "local" and report.get("ok"):
            backend = await super().health()
            report = {**report, "ok": bool(backend.get("ok")), "backend": backend}
        return report

    async def close(self) -> None:
        await self.checker.close()
        await super().close()

    # ---- grading -----------------------------------------------------------------------
    def build(self, row: LeanRow, text: str) -> BuiltProof:
        cfg = self.config
        return build(text, row.header, row.formal_statement, mode=cfg.extract_code_mode,
                     final_answer_key=cfg.final_answer_key, strip_theorem=cfg.strip_theorem_from_proof,
                     restate_statement=cfg.restate_formal_statement)

    async def check(self, row: LeanRow, built: BuiltProof, cache: dict[str, CompileResult] | None = None) -> Outcome:
        cfg = self.config
        if not built.proof.strip() or (cfg.require_code_block and not built.fenced):
            return Outcome("no_proof", built, feedback="No Lean 4 proof found: give the complete theorem with its "
                           "proof in one ```lean4 code block.")
        found = forbidden_tokens(built.proof, cfg.forbidden)
        if leaves_open(built.proof):
            found.append("an unterminated comment or string")
        if found:
            return Outcome("forbidden", built, forbidden=found, feedback=f"The proof uses {', '.join(found)}, which is "
                           "not allowed: the theorem must be proved without placeholders, new axioms or "
                           "compiler-trusting tactics.")
        name = theorem_name(row.formal_statement) if cfg.check_axioms else None
        file = built.file + (f"\n\n#print axioms {name}\n" if name else "")
        result = cache.get(file) if cache is not None else None
        if result is None:
            result = await self.checker.compile(file, cfg.compile_timeout_s)
            if cache is not None and result.status == "completed":
                cache[file] = result
        if result.status == "timeout":
            return Outcome("timeout", built, result, feedback="The compilation timed out. Simplify the proof or use "
                           "more efficient tactics.")
        if result.status != "completed":
            return Outcome("checker_unavailable", built, result)
        messages = result.messages
        if lean_messages.errors(messages):
            text = lean_messages.feedback(file, messages, max_errors=cfg.max_feedback_errors)
            return Outcome("compile_error", built, result, feedback=text)
        if lean_messages.uses_sorry(messages):
            return Outcome("has_sorry", built, result, feedback="Lean reports: declaration uses 'sorry'. Complete "
                           "every goal.")
        if name:
            axioms = lean_messages.axioms_of(messages, name)
            if axioms is None:
                return Outcome("axioms_unknown", built, result)
            extra = [a for a in axioms if a not in cfg.allowed_axioms]
            if extra:
                return Outcome("bad_axioms", built, result, axioms=axioms, feedback=f"The proof depends on "
                               f"{', '.join(extra)}; only {', '.join(cfg.allowed_axioms)} are allowed.")
            return Outcome("completed", built, result, axioms=axioms)
        return Outcome("completed", built, result)

    def _mask_timeout(self, outcome: Outcome) -> bool:
        """Whether a compile timeout is the checker's (masked) rather than the proof's (a zero)."""
        cfg = self.config
        if cfg.timeout_policy != "auto":
            return cfg.timeout_policy == "mask"
        result = outcome.result
        cpu = result.cpu_s if result is not None else None
        if (result is not None and result.own_s is not None and result.own_s < cfg.compile_timeout_s
                and (cpu is None or cpu < self._limits(cfg.compile_timeout_s).cpu_s)):
            return True  # stopped before it had its time (a machine too busy), not for using up its CPU
        if raises_lean_limits(outcome.built.proof):
            return False  # the proof switched off the limits that would have stopped it in time
        return cpu is None or cpu < cfg.timeout_cpu_share * cfg.compile_timeout_s

    def correction_prompt(self, generation: str, feedback: str) -> str:
        template = self.config.refinement_prompt_template or NEMOTRON_REFINEMENT_PROMPT
        return template.format(proof_attempt=generation or "(empty)", error_message=feedback)

    def verdict(self, row: LeanRow, outcome: Outcome, generation: str) -> Verdict:
        cfg, result = self.config, outcome.result
        extras: dict[str, Any] = {"proof_status": outcome.status, "predicted_proof": outcome.built.file,
                                  "extracted_proof": outcome.built.proof, "turn_index": row.turn_index,
                                  "checker": self.checker.name}
        if outcome.forbidden:
            extras["forbidden_found"] = outcome.forbidden
        if outcome.axioms is not None:
            extras["axioms"] = outcome.axioms
        if result is not None:
            extras["compiler_output"] = {"process_status": "timeout" if result.status == "timeout" else
                                         "completed" if result.status == "completed" else "error",
                                         "stdout": result.output, "stderr": result.detail}
            extras["messages"] = [m.as_dict() for m in result.messages[:20]]
            extras["compile_s"] = round(result.seconds, 3)
            if result.cpu_s is not None:
                extras["compile_cpu_s"] = round(result.cpu_s, 3)
            if result.own_s is not None:
                extras["compile_own_s"] = round(result.own_s, 3)
        proven = outcome.status == "completed"
        extras["needs_correction"] = not proven
        if not proven and outcome.feedback:
            extras["error_feedback"] = outcome.feedback
            extras["correction_prompt"] = self.correction_prompt(generation, outcome.feedback)
        if outcome.status == "timeout":
            extras["timeout_blamed_on"] = "checker" if self._mask_timeout(outcome) else "proof"
            if extras["timeout_blamed_on"] == "checker":
                return Verdict.failure(FailureClass.TIMEOUT, result.detail if result else "compile timeout", **extras)
        if outcome.status == "checker_unavailable":
            assert result is not None
            return Verdict.failure(result.failure_class or FailureClass.DEPENDENCY_ERROR, result.detail, **extras)
        if outcome.status == "axioms_unknown":
            return Verdict.failure(FailureClass.VERIFIER_ERROR, "'#print axioms' printed nothing for the theorem; "
                                   "set check_axioms: false if this checker does not report information messages",
                                   **extras)
        return Verdict(1.0 if proven else 0.0, extras=extras)

    async def verify(self, row: LeanRow, response: ResponseObject, session: LeanSession | None) -> Verdict:
        generation = response.output_text
        if not generation.strip() and not (session and session.attempts):
            feedback = "Empty generation received. Please provide a valid Lean 4 proof."
            return Verdict(0.0, extras={"proof_status": "empty_generation", "predicted_proof": "",
                                        "turn_index": row.turn_index, "needs_correction": True,
                                        "error_feedback": feedback,
                                        "correction_prompt": self.correction_prompt("", feedback)})
        built = self.build(row, generation)
        if session is not None and session.attempts and not built.fenced:
            built = session.attempts[-1].built  # no code block in the final message: the last checked attempt counts
        outcome = await self.check(row, built, session.compiled if session is not None else None)
        return self.verdict(row, outcome, generation)

    # ---- sessions: check_proof -----------------------------------------------------------
    async def seed_session(self, row: dict[str, Any]) -> LeanSession:
        try:
            return LeanSession(LeanRow.model_validate(row))
        except ValidationError as exc:
            raise SessionError(f"not a math_formal_lean row: {exc.errors()[:3]}") from exc

    @tool("Compile a Lean 4 proof attempt of the theorem and return Lean's errors (if any). Give the complete "
          "theorem with its proof, or the proof alone.")
    async def check_proof(self, session: LeanSession | None, args: ProofArgs) -> dict[str, Any]:
        if session is None:
            raise ToolError("check_proof needs a session: call /seed_session first")
        cfg = self.config
        async with session.lock:
            if len(session.attempts) >= cfg.max_checks_per_session:
                raise ToolError(f"check limit reached ({cfg.max_checks_per_session} per session); give your final answer")
            outcome = await self.check(session.row, self.build(session.row, args.proof), session.compiled)
            if outcome.status in ("checker_unavailable", "axioms_unknown"):  # not the model's attempt: not counted
                raise ToolError("the Lean checker is unavailable right now (not your proof's fault); try again or "
                                f"give your final answer. ({outcome.result.detail if outcome.result else ''})")
            session.attempts.append(outcome)
        left = cfg.max_checks_per_session - len(session.attempts)
        return {"compiled": outcome.status == "completed", "status": outcome.status,
                "feedback": outcome.feedback or "The proof compiles: no errors, no sorry, no extra axioms.",
                "checks_left": left}
