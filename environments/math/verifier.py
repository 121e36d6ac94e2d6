"""math: final-answer equivalence with math-verify (NeMo-Gym ``math_with_judge``, library path).

The response's final answer is extracted (``extract.py``), decided exactly when it is a
plain number or the same string as the gold (``scoring.fast_equivalence``, in the event
loop), and otherwise checked by math-verify in the CPU pool with a per-call deadline.
Results are cached by ``(gold, extracted)``: GRPO samples many responses per prompt and
most of them end in one of a few answers.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Literal

from pydantic import Field, field_validator

from environments.math.extract import extract_answer
from environments.math.scoring import fast_equivalence, library_score
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


class MathConfig(EnvConfig):
    extraction: list[ExtractionRule] = Field(
        default_factory=lambda: ["boxed", "answer_line", "last_number"],
        description="Answer extraction rules tried in order; ['boxed'] = NeMo-Gym's strict behaviour.")
    fast_path: bool = Field(True, description="Decide plain numbers / identical strings without sympy.")
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


class MathEnvironment(Environment):
    name = "math"
    domain = "math"
    summary = "Final answer (last \\boxed{}, Answer: line, or final number) checked for equivalence with math-verify"
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
        extracted, rule = extract_answer(response.output_text, cfg.extraction)
        extras: dict[str, Any] = {"expected_answer": gold, "extracted_answer": extracted, "extraction_rule": rule}
        if extracted is None:
            return Verdict(0.0, extras={**extras, "library_reward": 0.0, "scored_by": "no_answer"})

        cached = self._results.get((gold, extracted))
        if cached is None:
            cached = await self._score(gold, extracted, cfg)
            if isinstance(cached, Verdict):
                return Verdict.failure(cached.failure_class, cached.failure_detail or "", **extras)
            self._results.put((gold, extracted), cached)
        reward, scored_by, error = cached
        if error is not None:
            return Verdict.failure(FailureClass.VERIFIER_ERROR, error, **extras, scored_by=scored_by)
        return Verdict(reward, extras={**extras, "library_reward": reward, "scored_by": scored_by})

    async def _score(self, gold: str, extracted: str, cfg: MathConfig) -> tuple[float, str, str | None] | Verdict:
        if cfg.fast_path:
            decided = fast_equivalence(gold, extracted)
            if decided is not None:
                return (1.0 if decided else 0.0), "exact", None
        try:
            reward, error = await self.cpu(library_score, gold, extracted, timeout=cfg.cpu_task_timeout_s)
        except CpuTimeout as exc:
            # Not cached: a deadline hit says nothing about the answer, and the machine may just be loaded.
            return Verdict.failure(FailureClass.TIMEOUT, f"math-verify passed its {cfg.cpu_task_timeout_s:g}s deadline: {exc}")
        return reward, "math_verify", error
