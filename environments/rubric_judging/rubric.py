"""A rubric's reward: one judge call per item, the items' scores aggregated (NeMo-Gym's
multichallenge / inverse_if aggregation modes)."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Literal, Sequence, TypeVar

from servers.environment import Verdict

T = TypeVar("T")

Aggregation = Literal["mean", "all", "min", "max", "any", "weighted"]


def aggregate(mode: str, scores: list[float], weights: list[float]) -> float:
    if mode == "mean":
        return sum(scores) / len(scores)
    if mode in ("all", "min"):
        return min(scores)
    if mode in ("any", "max"):
        return max(scores)
    total = sum(weights)
    return sum(s * w for s, w in zip(scores, weights)) / total if total else 0.0


async def score_rubric(answer: str, items: Sequence[T], judge_item: Callable[[T], Awaitable[dict[str, Any]]], *,
                       mode: str) -> Verdict:
    """The reward of ``answer`` under a rubric: every item judged concurrently by ``judge_item``
    (an evaluation dict with ``score`` 0/1 and, under ``weighted``, ``weight``; default 1), the
    scores aggregated by ``mode``. No answer (empty, or reasoning that never closed) fails every
    item without a judge call. A judge failure on any item raises (``judge_error``, masked): a
    partial rubric is not a score."""
    extras: dict[str, Any] = {"generated_response": answer, "aggregation_mode": mode, "num_total": len(items)}
    if not answer:
        return Verdict(0.0, extras={**extras, "num_passed": 0, "rubric_evaluations": [], "scored_by": "empty_response"})
    evaluations = await asyncio.gather(*(judge_item(item) for item in items))
    scores = [e["score"] for e in evaluations]
    reward = aggregate(mode, scores, [e.get("weight", 1.0) for e in evaluations])
    return Verdict(reward, extras={**extras, "num_passed": sum(s == 1.0 for s in scores),
                                   "rubric_evaluations": evaluations, "scored_by": "judge"})
