"""long_context: needle-in-a-haystack, variable tracking and long-document QA scoring.

Rows carry one gold source:
* ``outputs`` (RULER): ``string_match_all`` (fraction of gold strings in the answer), or
  ``string_match_part`` for QA subsets (``subset`` starting with ``qa``);
* ``expected_answer`` (lc_niah / graphwalks): a JSON list of nodes vs ``Final Answer: [...]``
  on the answer's last line, set F1, optionally penalised by the reasoning's verbatim
  16-gram overlap with the prompt (copying the haystack is not reasoning);
* ``answers`` (multi-document QA): ``token_f1`` or ``exact_match`` (SQuAD normalisation).
A row may force a metric with ``metric``.
"""

from __future__ import annotations

import json
from typing import Any, Iterator, Literal

from pydantic import Field, field_validator, model_validator

from environments.long_context import scoring
from environments.long_context.synthetic import generate_rows
from servers.environment import EnvConfig, Environment, Verdict
from servers.wire import ResponseObject, RowModel

Metric = Literal["string_match_all", "string_match_part", "exact_match", "token_f1", "set_f1"]


class LongContextRow(RowModel):
    outputs: list[str] | None = Field(None, description="RULER gold strings.")
    expected_answer: str | None = Field(None, description="lc_niah: JSON list of expected nodes.")
    answers: list[str] | None = Field(None, description="QA gold answers (any may match).")
    subset: str | None = Field(None, description="RULER task name (qa_* subsets use string_match_part).")
    length: int | None = Field(None, description="Prompt length in tokens (informational).")
    metric: Metric | None = Field(None, description="Force a metric for this row.")

    @field_validator("outputs", "answers")
    @classmethod
    def _non_empty_golds(cls, golds: list[str] | None) -> list[str] | None:
        # "" is contained in every answer and an empty list matches nothing: either would
        # give every response the same reward, silently. A broken row is a 422.
        if golds is not None and (not golds or any(not gold.strip() for gold in golds)):
            raise ValueError("give at least one gold answer, none of them empty")
        return golds

    @field_validator("expected_answer")
    @classmethod
    def _json_list_of_strings(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            nodes = json.loads(value)
        except ValueError:
            nodes = None
        if not isinstance(nodes, list) or not all(isinstance(node, str) for node in nodes):
            raise ValueError(f"expected_answer must be a JSON list of strings (lc_niah), got {value[:100]!r}")
        return value

    @model_validator(mode="after")
    def _one_gold(self) -> "LongContextRow":
        given = [n for n in ("outputs", "expected_answer", "answers") if getattr(self, n) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one gold source: 'outputs' (RULER), 'expected_answer' (lc_niah) or "
                             f"'answers' (QA); got {given or 'none'}")
        if self.metric == "set_f1" and self.expected_answer is None:
            raise ValueError("metric 'set_f1' needs 'expected_answer'")
        return self


class LongContextConfig(EnvConfig):
    qa_metric: Literal["token_f1", "exact_match"] = Field("token_f1", description="Metric for 'answers' rows.")
    overlap_grading_rule: Literal["base", "multiply", "minus"] = Field(
        "multiply", description="lc_niah rows: base = answer F1; multiply = F1 * (1 - overlap); minus = F1 - overlap.")
    overlap_ngram: int = Field(16, ge=1, description="n of the reasoning/prompt word n-gram overlap (lc_niah).")


def _input_text(row: LongContextRow) -> str:
    raw = row.responses_create_params.input
    if isinstance(raw, str):
        return raw
    parts: list[str] = []
    for item in raw:
        content = item.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts += [block.get("text") or "" for block in content if isinstance(block, dict)]
    return "\n".join(parts)


def _reasoning_text(response: ResponseObject) -> str:
    return "".join(str(s.get("text", "")) for item in response.output if item.type == "reasoning"
                   for s in (item.summary or []))


class LongContext(Environment):
    name = "long_context"
    domain = "long_context"
    summary = "RULER / lc_niah / long-document QA: string-match-all/part, set F1, EM and token F1 against gold answers."
    Row = LongContextRow
    Config = LongContextConfig
    config: LongContextConfig

    def choose_metric(self, row: LongContextRow) -> Metric:
        if row.metric:
            return row.metric
        if row.expected_answer is not None:
            return "set_f1"
        if row.outputs is not None:
            return "string_match_part" if (row.subset or "").startswith("qa") else "string_match_all"
        return self.config.qa_metric

    async def verify(self, row: LongContextRow, response: ResponseObject, session: Any) -> Verdict:
        answer = response.output_text
        metric = self.choose_metric(row)
        if metric != "set_f1":
            golds = row.outputs if row.outputs is not None else row.answers or [row.expected_answer or ""]
            score = scoring.METRICS[metric](answer, golds)
            return Verdict(reward=score, extras={"metric": metric, "score": score})
        nodes = scoring.final_answer_list(answer)
        answer_score = scoring.set_f1(nodes, row.expected_answer or "[]")
        overlap = scoring.ngram_overlap(_reasoning_text(response), _input_text(row), self.config.overlap_ngram)
        rule = self.config.overlap_grading_rule
        reward = answer_score if rule == "base" else answer_score * (1 - overlap) if rule == "multiply" \
            else answer_score - overlap
        return Verdict(reward=reward, extras={"metric": metric, "answer_score": answer_score,
                                              "reasoning_overlap": overlap, "extracted_answer": nodes})

    @classmethod
    def generate(cls, *, tasks: list[str] | None, size: int, seed: int, **options: Any) -> Iterator[dict]:
        """Synthetic RULER-style rows (``niah_single``, ``niah_multikey``, ``variable_tracking``).

        Options: ``target_tokens`` (default 4000; 1 token ~= 4 characters), ``num_distractors``
        (niah_multikey, default 3), ``chain_length`` (variable_tracking, default 5).
        """
        return generate_rows(tasks=tasks, size=size, seed=seed, **options)
