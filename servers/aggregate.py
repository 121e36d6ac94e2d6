"""``POST /aggregate_metrics``: per-task and overall metrics over verify replies.

Key names follow NeMo-Gym (``mean/reward``, ``pass@1[avg-of-k]/accuracy``, ``pass@k/accuracy``).
A reply with a failure class is counted as failed and left out of the reward means,
so infrastructure trouble cannot pull a score down unseen.
"""

from __future__ import annotations

from collections import defaultdict
from statistics import fmean
from typing import Any

from servers.wire import FAILURE_CLASS_KEY, TASK_INDEX_KEY


def aggregate_metrics(replies: list[dict[str, Any]], *, success_threshold: float = 1.0) -> dict[str, Any]:
    groups: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    failures: dict[str, int] = defaultdict(int)
    for i, reply in enumerate(replies):
        if not isinstance(reply, dict):
            continue
        if reply.get(FAILURE_CLASS_KEY):
            failures[str(reply[FAILURE_CLASS_KEY])] += 1
            continue
        groups[reply.get(TASK_INDEX_KEY, f"row{i}")].append(reply)

    group_level = []
    for task_index, members in groups.items():
        rewards = [float(m.get("reward", 0.0)) for m in members]
        successes = [r >= success_threshold for r in rewards]
        group_level.append({
            TASK_INDEX_KEY: task_index,
            "num_rollouts": len(members),
            "mean/reward": fmean(rewards),
            "max/reward": max(rewards),
            "pass@1[avg-of-k]/accuracy": fmean(successes),
            "pass@k/accuracy": float(any(successes)),
        })
    scored = [g for g in group_level]
    key_metrics: dict[str, Any] = {}
    if scored:
        key_metrics = {
            "mean/reward": fmean(g["mean/reward"] for g in scored),
            "pass@1[avg-of-k]/accuracy": fmean(g["pass@1[avg-of-k]/accuracy"] for g in scored),
            "pass@k/accuracy": fmean(g["pass@k/accuracy"] for g in scored),
        }
    agent_metrics = {
        **key_metrics,
        "num_tasks": len(scored),
        "num_rollouts": sum(g["num_rollouts"] for g in scored),
        "num_failed": sum(failures.values()),
        "failures_by_class": dict(failures),
    }
    return {"group_level_metrics": group_level, "agent_metrics": agent_metrics, "key_metrics": key_metrics}
