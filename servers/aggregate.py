"""``POST /aggregate_metrics``: per-task and overall metrics over verify replies, under
NeMo-Gym's names and scales, with verigym's failure counts beside them.

What matches Gym 0.7's ``compute_aggregate_metrics`` (``nemo_gym/reward_profile.py``) and the
``compute_pass_majority_metrics`` its own servers (mcqa, math_with_judge, code_gen) add:

* ``mean/<field>``, ``max/``, ``min/``, ``median/``, ``std/`` (sample std; 0 for one rollout)
  over every numeric top-level field of the replies (``reward``, reward components, numeric
  diagnostics; booleans as 0/1; fields starting with ``_`` left out) and the numeric fields of
  ``response.usage``: per task in ``group_level_metrics``, over all rollouts in ``agent_metrics``;
* ``pass@{k}/accuracy`` (combinatorial pass@k for 0/1 rewards, the best of the first k
  otherwise), ``pass@1[avg-of-{k}]/accuracy`` and, when replies carry ``extracted_answer``,
  ``majority@{k}/accuracy`` and ``…/no_answer``, for k = 1 … rollouts per task: **percentages**
  (0-100), as Gym's; ``accuracy`` is the reward;
* masked replies (``mask_sample``, or a verigym failure class) are left out of every quality
  number and counted as ``coverage/*`` (present only when something was masked);
* ``num_repeats``; ``key_metrics``: every ``mean/*``, the highest-k pass/majority figures, the
  coverage counts.

verigym's own, in ``agent_metrics``: ``num_tasks``, ``num_rollouts`` (scored), ``num_failed``,
``failures_by_class`` (``_ng_failure_class``) and ``failures_by_kind`` (Gym's ``failure_kind``).
Left out of Gym's output: histograms, per-rollout ``rollout_infos``, repeat-level statistics.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from statistics import fmean, median, stdev
from typing import Any, Iterable

from servers.wire import FAILURE_CLASS_KEY, FAILURE_KIND_KEY, MASK_SAMPLE_KEY, ROLLOUT_INDEX_KEY, TASK_INDEX_KEY

ANSWER_KEY = "extracted_answer"  # what majority@k votes over (mcqa, math: Gym's answer_key)
STATS = ("mean", "max", "min", "median", "std")


def _is_masked(reply: dict[str, Any]) -> bool:
    return bool(reply.get(MASK_SAMPLE_KEY)) or bool(reply.get(FAILURE_CLASS_KEY))


def numeric_fields(reply: dict[str, Any]) -> dict[str, float]:
    """The fields Gym's reward profiler takes statistics of: numeric top-level fields (booleans
    as 0/1) not starting with ``_``, and the numeric fields of ``response.usage``."""
    usage = (reply.get("response") or {}).get("usage") if isinstance(reply.get("response"), dict) else None
    merged = {**reply, **usage} if isinstance(usage, dict) else reply
    out: dict[str, float] = {}
    for key, value in merged.items():
        if key.startswith("_") or key == MASK_SAMPLE_KEY:
            continue
        if isinstance(value, bool):
            out[key] = float(value)
        elif isinstance(value, (int, float)) and math.isfinite(value):
            out[key] = float(value)
    return out


def describe(rows: list[dict[str, float]]) -> dict[str, float]:
    """``<stat>/<field>`` over ``rows`` (pandas' ``DataFrame.describe`` as Gym uses it)."""
    columns: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        for key, value in row.items():
            columns[key].append(value)
    out: dict[str, float] = {}
    single = len(rows) == 1  # Gym reports std 0, not NaN, for a group of one rollout
    for key, values in columns.items():
        out[f"mean/{key}"] = fmean(values)
        out[f"max/{key}"] = max(values)
        out[f"min/{key}"] = min(values)
        out[f"median/{key}"] = median(values)
        if len(values) > 1:
            out[f"std/{key}"] = stdev(values)
        elif single:
            out[f"std/{key}"] = 0.0
    return out


def pass_majority(tasks: list[list[dict[str, Any]]]) -> dict[str, float]:
    """Gym's ``compute_pass_majority_metrics`` with ``accuracy`` = reward, in percent."""
    if not tasks:
        return {}
    with_answers = any(ANSWER_KEY in r for rollouts in tasks for r in rollouts)
    scores = []
    answers = []
    for rollouts in tasks:
        task_scores = []
        for r in rollouts:
            s = {"accuracy": float(r.get("reward", 0.0))}
            if with_answers:
                s["no_answer"] = 1.0 if r.get(ANSWER_KEY) is None else 0.0
            task_scores.append(s)
        scores.append(task_scores)
        answers.append([r.get(ANSWER_KEY) for r in rollouts])
    names = sorted({name for task in scores for s in task for name in s})
    metrics: dict[str, float] = {}
    for k in range(1, max(len(t) for t in tasks) + 1):
        for name in names:
            passed = []
            for task in scores:
                vals = [s[name] for s in task]
                if k > len(vals):
                    continue
                if all(v in (0.0, 1.0) for v in vals):
                    wrong = sum(1 for v in vals if not v)
                    passed.append(1.0 if wrong < k else 1.0 - math.comb(wrong, k) / math.comb(len(vals), k))
                else:
                    passed.append(max(vals[:k]))
            if passed:
                metrics[f"pass@{k}/{name}"] = 100.0 * fmean(passed)
            metrics[f"pass@1[avg-of-{k}]/{name}"] = 100.0 * fmean(fmean(s[name] for s in task[:k]) for task in scores)
            if with_answers:
                metrics[f"majority@{k}/{name}"] = 100.0 * fmean(_majority(task[:k], ans[:k], name)
                                                                for task, ans in zip(scores, answers))
    return metrics


def _majority(scores: list[dict[str, float]], answers: list[Any], name: str) -> float:
    votes = Counter((str(a), s[name]) for a, s in zip(answers, scores) if a is not None)
    if not votes:
        return 0.0
    top = max(votes.values())
    tied = [score for (_, score), count in votes.items() if count == top]
    return sum(tied) / len(tied)


def _highest_k(metrics: dict[str, float], prefix: str, names: Iterable[str]) -> dict[str, float]:
    """Gym's ``highest_k_metrics``: ``{prefix}{k}.../{name}`` at the largest k present."""
    out: dict[str, float] = {}
    for name in names:
        best: tuple[int, str] | None = None
        for key in metrics:
            head, _, tail = key.partition("/")
            if tail != name or not head.startswith(prefix):
                continue
            digits = head[len(prefix):].removesuffix("]")
            if digits.isdigit() and (best is None or int(digits) > best[0]):
                best = (int(digits), key)
        if best is not None:
            out[best[1]] = metrics[best[1]]
    return out


def aggregate_metrics(replies: list[dict[str, Any]]) -> dict[str, Any]:
    replies = [r for r in replies if isinstance(r, dict)]
    scored = [r for r in replies if not _is_masked(r)]
    masked = [r for r in replies if _is_masked(r)]
    groups: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for reply in scored:
        groups[reply.get(TASK_INDEX_KEY, 0)].append(reply)
    order = sorted(groups, key=lambda k: (not isinstance(k, (int, float)), k if isinstance(k, (int, float)) else str(k)))

    coverage: dict[str, int] = {}
    if masked:
        coverage = {"coverage/measured_rollouts": len(scored), "coverage/masked_rollouts": len(masked),
                    "coverage/measured_tasks": len(groups),
                    "coverage/fully_masked_tasks": len({r.get(TASK_INDEX_KEY, 0) for r in replies} - set(groups))}
    failures = {
        "num_tasks": len(groups), "num_rollouts": len(scored), "num_failed": len(masked),
        "failures_by_class": dict(Counter(str(r[FAILURE_CLASS_KEY]) for r in masked if r.get(FAILURE_CLASS_KEY))),
        "failures_by_kind": dict(Counter(str(r[FAILURE_KIND_KEY]) for r in masked if r.get(FAILURE_KIND_KEY))),
    }
    if not scored:  # every rollout masked: means over nothing would invent a zero
        return {"group_level_metrics": [], "agent_metrics": {**coverage, **failures}, "key_metrics": dict(coverage)}

    group_level = []
    for task_index in order:
        members = groups[task_index]
        group_level.append({TASK_INDEX_KEY: task_index, **describe([numeric_fields(m) for m in members]),
                            "num_rollouts": len(members)})
    quality = {**describe([numeric_fields(r) for r in scored]), **pass_majority([groups[k] for k in order])}
    agent_metrics = {**quality, **coverage,
                     "num_repeats": len({r.get(ROLLOUT_INDEX_KEY, 0) for r in replies}), **failures}
    key_metrics = {k: v for k, v in quality.items() if k.startswith("mean/")}
    key_metrics.update(_highest_k(quality, "pass@1[avg-of-", ["accuracy"]))
    key_metrics.update(_highest_k(quality, "pass@", ["accuracy"]))
    key_metrics.update(_highest_k(quality, "majority@", ["accuracy"]))
    key_metrics.update(coverage)
    return {"group_level_metrics": group_level, "agent_metrics": agent_metrics, "key_metrics": key_metrics}
