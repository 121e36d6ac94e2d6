"""equivalence_llm_judge: an open-QA answer judged equivalent (or not) to the reference by an LLM
(NeMo-Gym ``equivalence_llm_judge``: same rows, prompt, labels and passes; see equivalence.py)."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field, field_validator, model_validator

from environments.equivalence_llm_judge.equivalence import (
    EquivalenceSettings, check_regex, judge_equivalence, question_of,
)
from servers.environment import EnvConfig, Environment, Verdict
from servers.judge import JudgedConfig, JudgedEnvironment, final_answer
from servers.wire import ResponseObject, RowModel


class EquivalenceRow(RowModel):
    expected_answer: str | None = Field(None, description="The reference answer (else metadata.expected_answer).")
    template_metadata: dict[str, Any] | None = Field(
        None, description="OpenQA rows: output_regex cuts the answer out of the response (use_per_record_regex).")
    metadata: dict[str, Any] | None = None

    @field_validator("expected_answer", mode="before")
    @classmethod
    def _scalar_to_text(cls, value: Any) -> Any:
        # references like 42 or 0.5 arrive as JSON numbers
        return str(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value

    @model_validator(mode="after")
    def _reference_present(self) -> "EquivalenceRow":
        if self.expected_answer is None and self.metadata and self.metadata.get("expected_answer") is not None:
            self.expected_answer = str(self.metadata["expected_answer"])
        if self.expected_answer is None or not self.expected_answer.strip():
            raise ValueError("the row needs a non-empty 'expected_answer' (or metadata.expected_answer)")
        check_regex(self.output_regex, "template_metadata.output_regex")
        return self

    @property
    def output_regex(self) -> str | None:
        regex = (self.template_metadata or {}).get("output_regex")
        return regex if isinstance(regex, str) and regex else None


class EquivalenceConfig(JudgedConfig, EquivalenceSettings, EnvConfig):
    pass


class EquivalenceLLMJudge(JudgedEnvironment, Environment):
    name = "equivalence_llm_judge"
    domain = "knowledge"
    summary = "Open-QA answer vs reference, judged equivalent by an LLM ([[A=B]]/[[A!=B]], optional swap check)"
    needs = ("judge",)
    agent_names: ClassVar[tuple[str, ...]] = ("equivalence_llm_judge_simple_agent",)
    Row = EquivalenceRow
    Config = EquivalenceConfig
    judge_names = ("judge",)

    async def verify(self, row: EquivalenceRow, response: ResponseObject, session: Any | None) -> Verdict:
        settings: EquivalenceSettings = self.config  # type: ignore[assignment]
        expected = row.expected_answer or ""
        answer = final_answer(response)
        extras: dict[str, Any] = {"expected_answer": expected}
        if not answer:  # nothing to judge (empty, or reasoning that never closed)
            return Verdict(0.0, extras={**extras, "extracted_answer": "", "judge_evaluations": [],
                                        "scored_by": "empty_response"})
        outcome = await judge_equivalence(self.judge("judge"), settings, question=question_of(
            row, settings.question_extract_regex), expected=expected, response_text=answer,
            record_regex=row.output_regex, guard=self.config.response_guard)
        labels = (settings.judge_equal_label, settings.judge_not_equal_label)
        return Verdict(outcome.reward, extras={**extras, "extracted_answer": outcome.extracted_answer,
                                               "judge_evaluations": [p.as_dict(labels) for p in outcome.passes],
                                               "scored_by": "judge"})
