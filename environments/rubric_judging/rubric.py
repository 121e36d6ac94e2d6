"""Per-item rubric scores -> one reward (NeMo-Gym's multichallenge / inverse_if aggregation modes)."""

from __future__ import annotations

from typing import Literal

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
