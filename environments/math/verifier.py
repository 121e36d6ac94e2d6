"""math: final-answer equivalence with math-verify (NeMo-Gym ``math_with_judge``, library path).

The final-answer grading is the shared library environments/math_grading/ (``math_python``
scores its answers with the same code). The response's final answer is extracted
(``extract.py``); gold and answer are put in
notations math-verify reads (``notation.rewrite_pair``: repeating decimals, degree signs,
plain-text units, inequalities as intervals); the pair is decided exactly when it is a
plain number or the same string (``scoring.fast_equivalence``, in the event loop), or when it
is a small expression decided by its values (``symbolic.symbolic_equivalence``, event loop,
no sympy), and otherwise by math-verify (plus a complex-number check) in the CPU pool with a
deadline (``final_answer.score_final_answer``).
Results are cached by ``(gold, extracted)``: GRPO samples many responses per prompt and
most of them end in one of a few answers.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from environments.math.judge_fallback import MathJudgeConfig, MathJudgeFallback
from environments.math_grading.answer_cost import AnswerCostConfig
from environments.math_grading.extract import DEFAULT_RULES, extract_answer, is_incomplete
from environments.math_grading.final_answer import ExtractionRule, ResultCache, score_final_answer
from servers.answer_text import strip_think
from servers.environment import EnvConfig, Environment, Verdict
from servers.wire import ResponseObject, RowModel


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


class MathEnvironment(MathJudgeFallback, Environment):
    name = "math"
    agent_names = ("math_with_judge_simple_agent", "math_simple_agent",)  # NeMo-Gym agent_ref.name values routed here
    domain = "math"
    summary = "Final answer (last \\boxed{} or Answer: line) checked for equivalence with math-verify"
    Row = MathRow
    Config = MathConfig
    uses_cpu_pool = True
    cpu_pool_preload = ("sympy", "math_verify", "environments.math_grading.scoring")

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._results = ResultCache(self.config.result_cache_size)

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
