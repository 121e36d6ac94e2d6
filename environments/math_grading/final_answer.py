"""The verdict for an extracted final answer, shared by ``math`` and ``math_python``: the cost
guard, notation rewrites, the exact and symbolic fast paths, else math-verify in the
environment's CPU pool (``score_final_answer``). Results are cached by ``(gold, extracted)``
(``ResultCache``): GRPO samples many responses per prompt and most end in one of a few answers."""

from __future__ import annotations

from typing import Any, Literal

from environments.math_grading.answer_cost import CostLimits, costly_answer, oversized_answer
from environments.math_grading.notation import rewrite_pair
from environments.math_grading.scoring import fast_equivalence, library_score
from environments.math_grading.symbolic import symbolic_equivalence
from servers.cpu_pool import CpuTimeout
from servers.environment import Environment, Verdict
from servers.lru import LRU
from servers.wire import FailureClass

ExtractionRule = Literal["boxed", "answer_line", "last_number"]


# (gold, extracted) -> (reward, scored_by, error)
ResultCache = LRU[tuple[str, str], tuple[float, str, str | None]]


async def score_final_answer(env: Environment, gold: str, extracted: str, extras: dict[str, Any], *,
                             fast_path: bool = True, symbolic_fast_path: bool = True, timeout: float,
                             cache: ResultCache | None = None, limits: CostLimits = CostLimits(),
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
