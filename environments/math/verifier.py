"""math: final-answer equivalence with math-verify (NeMo-Gym ``math_with_judge``, library path).

The response's final answer is extracted (``extract.py``); gold and answer are put in
notations math-verify reads (``notation.rewrite_pair``: repeating decimals, degree signs,
plain-text units, inequalities as intervals); the pair is decided exactly when it is a
plain number or the same string (``scoring.fast_equivalence``, in the event loop), or when it
is a small expression decided by its values (``symbolic.symbolic_equivalence``, event loop,
no sympy), and otherwise by math-verify (plus a complex-number check) in the CPU pool with a
deadline.
Results are cached by ``(gold, extracted)``: GRPO samples many responses per prompt and
most of them end in one of a few answers.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Literal

from pydantic import Field, field_validator

from environments.math.answer_cost import AnswerCostConfig, CostLimits, costly_answer, oversized_answer
from environments.math.extract import DEFAULT_RULES, extract_answer, is_incomplete
from environments.math.notation import rewrite_pair
from environments.math.judge_fallback import MathJudgeConfig, MathJudgeFallback
from environments.math.scoring import fast_equivalence, library_score
from environments.math.symbolic import symbolic_equivalence
from servers.answer_text import strip_think
from servers.cpu_pool import CpuTimeout
from servers.environment import EnvConfig, Environment, Verdict
from servers.wire import FailureClass, ResponseObject, RowModel

ExtractionRule = Literal["boxed", "answer_line", "last_number"]


class MathRow(RowModel):
    question: str = Field("", description="The problem text (diagnostics only; the prompt is in responses_create_params).")
    expected_answer: str = Field(..., min_length=1, description="Gold final answer: number, LaTeX, interval, set, ...")

    @field_validator("expected_answer", mode="before")
    @classmethod
    def _numbers_as_text(cls, value: Any) -> Any:
        # Datasets often store integer golds as JSON numbers; math-verify reads text.
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        return value


class MathConfig(MathJudgeConfig, AnswerCostConfig, EnvConfig):
    extraction: list[ExtractionRule] = Field(
        default_factory=lambda: list(DEFAULT_RULES),
        description="Answer extraction rules tried in order; ['boxed'] = NeMo-Gym's strict behaviour; "
                    "'last_number' (opt-in) also scores the last number of an unmarked response, never of "
                    "one marked status 'incomplete'.")
    fast_path: bool = Field(True, description="Decide plain numbers / identical strings without sympy.")
    symbolic_fast_path: bool = Field(
        True, description="Decide small expressions (integers, \\frac, \\sqrt, \\pi, powers, one-letter variables) "
                          "by their values at sample points without sympy; math-verify decides the rest.")
    result_cache_size: int = Field(65536, ge=0, description="(gold, extracted) -> reward LRU entries; 0 disables.")


class _LRU:
    def __init__(self, size: int):
        self.size = size
        self._data: OrderedDict[tuple[str, str], tuple[float, str, str | None]] = OrderedDict()

    def get(self, key: tuple[str, str]) -> tuple[float, str, str | None] | None:
        value = self._data.get(key)
        if value is not None:
            self._data.move_to_end(key)
        return value

    def put(self, key: tuple[str, str], value: tuple[float, str, str | None]) -> None:
        if self.size <= 0:
            return
        self._data[key] = value
        self._data.move_to_end(key)
        while len(self._data) > self.size:
            self._data.popitem(last=False)


class MathEnvironment(MathJudgeFallback, Environment):
    name = "math"
    agent_names = ("math_with_judge_simple_agent", "math_simple_agent",)  # NeMo-Gym agent_ref.name values routed here
    domain = "math"
    summary = "Final answer (last \\boxed{} or Answer: line) checked for equivalence with math-verify"
    Row = MathRow
    Config = MathConfig
    uses_cpu_pool = True
    cpu_pool_preload = ("sympy", "math_verify", "environments.math.scoring")

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._results = _LRU(self.config.result_cache_size)

    async def verify(self, row: MathRow, response: ResponseObject, session: Any | None) -> Verdict:
        cfg: MathConfig = self.config  # type: ignore[assignment]
        gold = row.expected_answer
        incomplete = is_incomplete(response)
        # The shared reading: reasoning removed, and a block that never closed is no answer.
        extracted, rule = extract_answer(strip_think(response.output_text), cfg.extraction, incomplete=incomplete)
        extras: dict[str, Any] = {"expected_answer": gold, "extracted_answer": extracted, "extraction_rule": rule}
        if incomplete:
            extras["response_incomplete"] = True
        if extracted is None:
            return Verdict(0.0, extras={**extras, "library_reward": 0.0, "scored_by": "no_answer"})

        verdict = await score_final_answer(self, gold, extracted, extras, fast_path=cfg.fast_path,
                                           symbolic_fast_path=cfg.symbolic_fast_path,
                                           timeout=cfg.cpu_task_timeout_s, cache=self._results,
                                           limits=cfg.answer_limits, cpu_share=cfg.deadline_cpu_share)
        return await self.apply_judge_fallback(row.question, gold, extracted, verdict)  # judge_fallback.py


async def score_final_answer(env: Environment, gold: str, extracted: str, extras: dict[str, Any], *,
                             fast_path: bool = True, symbolic_fast_path: bool = True, timeout: float,
                             cache: _LRU | None = None, limits: CostLimits = CostLimits(),
                             cpu_share: float = 0.5) -> Verdict:
    """The verdict for an extracted final answer: the cost guard (``answer_cost.py``), notation
    rewrites, exact fast path, the symbolic fast path (``scored_by: symbolic``), else math-verify
    in ``env``'s CPU pool. Shared by ``math`` and ``math_python`` so both score the same answer
    alike. Each step is one call below, in order; a later, more expensive decider (an equivalence
    judge) belongs after ``library_score``'s 0.

    A cost the answer causes is the answer's: an answer past ``limits`` scores 0 up front
    (``refused_costly``), and a deadline hit after the worker spent ``cpu_share`` of it on the CPU scores 0
    (``deadline``, cached: the same answer costs nothing the next time) once the gold alone is
    shown to score within the deadline. A deadline hit with little CPU (the worker waited for
    a CPU) is failure class ``timeout``, not cached: it says nothing about the answer. A gold
    math-verify cannot parse, or cannot even score against itself in time, is
    ``verifier_error`` (a data problem, masked rather than a silent 0).
    """
    result = cache.get((gold, extracted)) if cache is not None else None
    if result is None:
        # Too long or too deep to read at all: refused before any parsing (cheap to decide again: not cached).
        if (refused := oversized_answer(extracted, limits)) is not None:
            return _refused_costly(refused, extras)
        gold_form, answer_form = rewrite_pair(gold, extracted)
        decided = fast_equivalence(gold_form, answer_form) if fast_path else None
        if decided is not None:
            result = (1.0 if decided else 0.0), "exact", None
        elif (symbolic := symbolic_equivalence(gold_form, answer_form) if symbolic_fast_path else None) is not None:
            result = (1.0 if symbolic else 0.0), "symbolic", None
        else:
            # The fast paths cannot compute a large number; math-verify can: the answer's sizes first.
            if (refused := costly_answer(answer_form, limits)) is not None:
                return _refused_costly(refused, extras)
            try:
                reward, error = await env.cpu(library_score, gold_form, answer_form, timeout=timeout)
            except CpuTimeout as exc:
                if not exc.worked_for(cpu_share * timeout):
                    return Verdict.failure(FailureClass.TIMEOUT, f"math-verify passed its {timeout:g}s deadline "
                                           f"without using the CPU (an overloaded machine): {exc}", **extras)
                if not await _gold_scores_in_time(env, gold_form, timeout):
                    return Verdict.failure(FailureClass.VERIFIER_ERROR, f"math-verify cannot score expected_answer "
                                           f"{gold[:200]!r} against itself within {timeout:g}s", **extras)
                reward, error = 0.0, None
                extras = {**extras, "deadline_cpu_s": round(exc.cpu_s, 3)}
                result = reward, "deadline", error
            else:
                result = reward, "math_verify", error
        if cache is not None:
            cache.put((gold, extracted), result)
    reward, scored_by, error = result
    if error is not None:
        return Verdict.failure(FailureClass.VERIFIER_ERROR, error, **extras, scored_by=scored_by)
    return Verdict(reward, extras={**extras, "library_reward": reward, "scored_by": scored_by})


def _refused_costly(reason: str, extras: dict[str, Any]) -> Verdict:
    return Verdict(0.0, extras={**extras, "library_reward": 0.0, "scored_by": "refused_costly", "cost_refusal": reason})


async def _gold_scores_in_time(env: Environment, gold_form: str, timeout: float) -> bool:
    """The control after a costly deadline: the gold against itself, under the same deadline."""
    try:
        await env.cpu(library_score, gold_form, gold_form, timeout=timeout)
    except CpuTimeout:
        return False
    return True
