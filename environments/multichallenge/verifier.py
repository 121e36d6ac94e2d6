"""multichallenge: the final response judged against the row's rubric, one judge call per item
(NeMo-Gym ``multichallenge``, same rows, same prompt template and labels).

Each rubric item is a yes/no question with ``pass_criteria`` (the answer that passes); the
judge answers ``[[YES]]``/``[[NO]]`` on its last line. Items are judged concurrently; the
reward aggregates the per-item scores (``aggregation``: mean by default, or all / min / max /
any / weighted). A judge that fails on any item makes the sample ``judge_error`` (masked):
a partial rubric is not a score.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from servers.environment import EnvConfig, Environment, Verdict
from servers.judge import (JudgedConfig, JudgedEnvironment, VerdictFormat, final_answer, find_label, judge_prompt,
                           label_verdict)
from servers.wire import ResponseObject, RowModel

DEFAULT_TEMPLATE = """You are evaluating whether a model's response meets a specific criterion.

CONVERSATION CONTEXT:
{context}

MODEL'S FINAL RESPONSE:
{response}

EVALUATION QUESTION:
{question}

EXPECTED ANSWER: {pass_criteria}

Does the model's response satisfy the criterion described in the evaluation question?
Think step by step, then respond with exactly [[YES]] or [[NO]] on the last line."""


class RubricItem(BaseModel):
    model_config = ConfigDict(extra="allow")

    question: str = Field(min_length=1, description="A yes/no question about the final response.")
    pass_criteria: str = Field("YES", description="The judge answer that passes: YES or NO (others: YES passes).")
    weight: float = Field(1.0, ge=0, description="Weight under aggregation 'weighted'.")


class MultiChallengeRow(RowModel):
    rubric: list[RubricItem] | None = Field(None, description="Rubric items (else metadata.rubric).")
    context: str | None = Field(None, description="The conversation as text (else built from the prompt messages).")
    metadata: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _rubric_present(self) -> "MultiChallengeRow":
        if not self.rubric and self.metadata and isinstance(self.metadata.get("rubric"), list):
            self.rubric = [RubricItem.model_validate(item) for item in self.metadata["rubric"]]
        if not self.rubric:
            raise ValueError("the row needs a non-empty 'rubric' (list of {question, pass_criteria})")
        return self


class MultiChallengeConfig(JudgedConfig, EnvConfig):
    aggregation: Literal["mean", "all", "min", "max", "any", "weighted"] = Field(
        "mean", description="Per-item scores -> reward: mean (fraction passed), all (1 iff every item passes), "
                            "min, max, any, weighted (weight-averaged).")
    judge_prompt_template: str = Field(DEFAULT_TEMPLATE, description="Placeholders {context} {response} "
                                                                     "{question} {pass_criteria}.")
    judge_system_message: str | None = Field(
        "You are a precise evaluator. Assess responses objectively based on the given criteria.",
        description="System message of every judge call; null = none.")
    yes_label: str = Field("[[YES]]", description="The judge's YES verdict label.")
    no_label: str = Field("[[NO]]", description="The judge's NO verdict label.")


_MARKDOWN = re.compile(r"[^A-Za-z]")
_BARE_VERDICT_LINE = re.compile(r"(?m)^[^A-Za-z\n]*(?:YES|NO)[^A-Za-z\n]*$")


def parse_yes_no(text: str, yes_label: str, no_label: str) -> str | None:
    """YES / NO: the label that occurs last; else a final line that is just YES or NO in capitals
    (markdown and punctuation ignored: ``**YES**``); else None (no verdict: asked again, then
    judge_error)."""
    verdict = find_label(text, {yes_label: "YES", no_label: "NO"})
    if verdict is not None:
        return verdict
    lines = [line for line in text.strip().splitlines() if line.strip()]
    last = _MARKDOWN.sub("", lines[-1]) if lines else ""
    return last if last in ("YES", "NO") else None


def yes_no_verdict(yes_label: str, no_label: str) -> VerdictFormat[str]:
    """:func:`parse_yes_no` with its markers: both labels and a line that is just YES or NO."""
    labels = label_verdict({yes_label: "YES", no_label: "NO"})
    return VerdictFormat(lambda text: parse_yes_no(text, yes_label, no_label), (*labels.markers, _BARE_VERDICT_LINE))


def build_context(row: MultiChallengeRow) -> str:
    """The row's ``context``, else the prompt messages as ``[ROLE]: content`` blocks (NeMo-Gym's form)."""
    if row.context:
        return row.context
    messages = row.responses_create_params.input
    if isinstance(messages, str):
        return f"[USER]: {messages}"
    return "\n\n".join(f"[{str(m.get('role', 'unknown')).upper()}]: {m.get('content', '')}" for m in messages)


def aggregate(mode: str, scores: list[float], weights: list[float]) -> float:
    if mode == "mean":
        return sum(scores) / len(scores)
    if mode in ("all", "min"):
        return min(scores)
    if mode in ("any", "max"):
        return max(scores)
    total = sum(weights)
    return sum(s * w for s, w in zip(scores, weights)) / total if total else 0.0


class MultiChallengeEnvironment(JudgedEnvironment, Environment):
    name = "multichallenge"
    domain = "knowledge"
    summary = "Final response judged against the row's yes/no rubric, one LLM-judge call per item"
    needs = ("judge",)
    agent_names = ("multichallenge_simple_agent",)
    Row = MultiChallengeRow
    Config = MultiChallengeConfig
    judge_names = ("judge",)

    async def verify(self, row: MultiChallengeRow, response: ResponseObject, session: Any | None) -> Verdict:
        cfg: MultiChallengeConfig = self.config  # type: ignore[assignment]
        answer = final_answer(response)
        rubric = row.rubric or []
        extras: dict[str, Any] = {"generated_response": answer, "aggregation_mode": cfg.aggregation,
                                  "num_total": len(rubric)}
        if not answer:  # no final answer (empty, or reasoning that never closed): fails every item
            return Verdict(0.0, extras={**extras, "num_passed": 0, "rubric_evaluations": [],
                                        "scored_by": "empty_response"})
        context = build_context(row)
        evaluations = await asyncio.gather(*(self._judge_item(item, context, answer) for item in rubric))
        reward = aggregate(cfg.aggregation, [e["score"] for e in evaluations], [e["weight"] for e in evaluations])
        return Verdict(reward, extras={**extras, "num_passed": sum(e["score"] == 1.0 for e in evaluations),
                                       "rubric_evaluations": evaluations, "scored_by": "judge"})

    async def _judge_item(self, item: RubricItem, context: str, answer: str) -> dict[str, Any]:
        cfg: MultiChallengeConfig = self.config  # type: ignore[assignment]
        prompt = judge_prompt(cfg.judge_prompt_template, yes_no_verdict(cfg.yes_label, cfg.no_label),
                              untrusted={"response": answer},
                              trusted={"context": context, "question": item.question,
                                       "pass_criteria": item.pass_criteria},
                              system=cfg.judge_system_message, guard=cfg.response_guard)
        reply = await self.judge("judge").ask(prompt.messages, prompt.read)
        expected = "NO" if item.pass_criteria.strip().upper() == "NO" else "YES"
        return {"question": item.question, "pass_criteria": item.pass_criteria, "verdict": reply.verdict,
                "score": 1.0 if reply.verdict == expected else 0.0, "weight": item.weight,
                "judge_response": reply.text[-2000:], "cached": reply.cached}
