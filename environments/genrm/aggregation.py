"""GenRM pairwise comparisons -> one reward per response. Pure functions, no I/O.

The order of operations is NeMo-Gym's ``genrm_compare`` (``resources_servers/genrm_compare/
utils.py`` ``aggregate_scores`` / ``apply_length_bonuses`` / ``apply_style_penalties``):

1. tiebreak, per comparison: when ``score_1 == score_2``, ``delta = 3.5 - ranking``;
   ``score_1 += delta``, ``score_2 -= delta`` (ranking 1..6: below 3.5 prefers response 1);
2. base reward of a response = mean of its (tiebroken) scores over every comparison it took
   part in (each judge vote is one more comparison);
3. conciseness bonus: the response with the shortest non-empty reasoning of the whole group
   gets ``+reasoning_bonus`` if its score is at or above the top-``top_percentile`` threshold
   (the ``max(0, int(n * top_percentile) - 1)``-th highest score); then the same for answers
   with ``answer_bonus``;
4. group-relative length term: ``w_i = 1 - (l_i - l_min) / (l_max - l_min)`` (0 for all when
   every length is equal), ``w~_i = w_i - mean(w)``;
   ``R_i += reasoning_coeff * w~_i(reasoning) + answer_coeff * w~_i(answer)``;
5. optional style penalty: the same zero-centred weight over the answers' style density
   (markdown headers, list items, bold spans and emoji per character, code blocks excluded).

Lengths are characters of the stripped text. Reasoning is the text of the response's
``reasoning`` items (their ``summary`` parts), the answer the ``output_text`` of its messages.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Literal

from servers.judge.untrusted import VerdictFormat, spaced

RANKING_MIDPOINT = 3.5  # rankings run 1 (response 1 much better) .. 6 (response 2 much better)
EMPTY_ANSWER = "None"  # what the GenRM is shown for an empty answer (NeMo-Gym's placeholder)

Strategy = Literal["circular", "all_pairs"]


def comparison_pairs(strategy: Strategy, n: int) -> list[tuple[int, int]]:
    """``circular``: (0,1), (1,2), ..., (n-1,0) — n comparisons; ``all_pairs``: every i < j."""
    if n < 2:
        raise ValueError(f"a comparison needs at least 2 responses, got {n}")
    if strategy == "circular":
        return [(i, (i + 1) % n) for i in range(n)]
    if strategy == "all_pairs":
        return list(itertools.combinations(range(n), 2))
    raise ValueError(f"unknown comparison strategy {strategy!r}: circular or all_pairs")


# ---- reading a response and a GenRM reply ----------------------------------------------------
def _get(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)


def response_texts(response: Any) -> tuple[str, str]:
    """(reasoning, answer) of a Responses-API object: a dict, or the server's validated model
    (read in place: dumping 16 pydantic responses per group costs more than the rest of /compare)."""
    reasoning: list[str] = []
    answer: list[str] = []
    output = _get(response, "output")
    for item in output if isinstance(output, list) else []:
        kind = _get(item, "type")
        if kind == "reasoning":
            reasoning.extend(str(_get(s, "text") or "") for s in _get(item, "summary") or [])
        elif kind == "message":
            content = _get(item, "content")
            if isinstance(content, str):
                answer.append(content)
            elif isinstance(content, list):
                answer.extend(str(_get(c, "text") or "") for c in content if _get(c, "type") == "output_text")
    return "".join(reasoning), "".join(answer)


def shown_answer(answer: str) -> str:
    """The text the GenRM reads for a response: its answer, never its reasoning."""
    return answer if answer.strip() else EMPTY_ANSWER


def _json_objects(text: str) -> Iterable[Any]:
    """Top-level JSON values that start with ``{`` anywhere in ``text``, left to right."""
    decoder = json.JSONDecoder()
    pos = text.find("{")
    while pos != -1:
        try:
            value, end = decoder.raw_decode(text, pos)
        except ValueError:
            pos = text.find("{", pos + 1)
            continue
        yield value
        pos = text.find("{", end)


def _scores_of(value: Any) -> tuple[float, float, float] | None:
    if not isinstance(value, dict):
        return None
    if isinstance(value.get("overall"), dict):  # {"rubric_evaluations": [...], "overall": {...}}
        value = value["overall"]
    try:
        got = tuple(float(value[k]) for k in ("score_1", "score_2", "ranking"))
    except (KeyError, TypeError, ValueError):
        return None
    return got if all(math.isfinite(x) for x in got) else None  # type: ignore[return-value]


_FENCED_JSON = re.compile(r"```json\s*([\s\S]*?)\s*```", re.IGNORECASE)
# In a response: a key of the GenRM's verdict JSON, spaced out or not (servers/judge/untrusted.py).
_SCORE_KEY = re.compile(r"[\"']\s*(?:" + "|".join(spaced(k) for k in ("score_1", "score_2", "ranking", "overall"))
                        + r")\s*[\"']\s*:", re.IGNORECASE)


def parse_genrm_reply(text: str) -> tuple[float, float, float] | None:
    """``(score_1, score_2, ranking)`` from a GenRM reply, or None when it holds no verdict.

    Like NeMo-Gym: the first valid object inside a fenced ```json block wins, else the last valid
    top-level ``{...}`` of the text; ``{"overall": {...}}`` nesting is read. Unlike NeMo-Gym, all
    three keys must be present and numeric — a missing key is no verdict (the GenRM is asked
    again, then the comparison fails), never filled with a default score.
    """
    for block in _FENCED_JSON.finditer(text):
        for value in _json_objects(block.group(1)):
            scores = _scores_of(value)
            if scores is not None:
                return scores
    last = None
    for value in _json_objects(text):
        scores = _scores_of(value)
        if scores is not None:
            last = scores
    return last


GENRM_SCORES = VerdictFormat(parse_genrm_reply, (_SCORE_KEY,))  # what a response must not carry into the GenRM


# ---- aggregation ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Comparison:
    """One GenRM verdict on responses ``i`` (shown as response_1) and ``j`` (response_2)."""

    i: int
    j: int
    vote: int  # judge pass (0 .. num_judges_per_comparison - 1)
    score_1: float
    score_2: float
    ranking: float


@dataclass(frozen=True)
class Shaping:
    """The reward-shaping knobs (config keys of the same names)."""

    reasoning_bonus: float = 0.0
    answer_bonus: float = 0.0
    top_percentile: float = 0.2
    group_reasoning_length_penalty_coeff: float = 0.0
    group_answer_length_penalty_coeff: float = 0.0
    group_style_penalty_coeff: float = 0.0


@dataclass
class Aggregate:
    rewards: list[float | None]  # None: a failed response (no reward)
    base_scores: list[float | None]  # after the tiebreak and the mean, before bonuses and length/style terms
    adjustments: list[float | None]  # rewards - base_scores
    metrics: dict[str, float] = field(default_factory=dict)


def tiebroken(c: Comparison) -> tuple[float, float]:
    """The comparison's two scores after the ranking tiebreak (only when they are equal)."""
    if c.score_1 == c.score_2:
        delta = RANKING_MIDPOINT - c.ranking
        return c.score_1 + delta, c.score_2 - delta
    return c.score_1, c.score_2


def mean_scores(comparisons: list[Comparison], n: int, skip: frozenset[int] = frozenset()) -> list[float | None]:
    """Step 1-2: per response, the mean of its tiebroken scores (None for the ``skip``ped).
    Comparisons are summed in (vote, i, j) order, NeMo-Gym's, so float sums match it bit for bit."""
    total, count = [0.0] * n, [0] * n
    for c in sorted(comparisons, key=lambda c: (c.vote, c.i, c.j)):
        s1, s2 = tiebroken(c)
        total[c.i] += s1
        total[c.j] += s2
        count[c.i] += 1
        count[c.j] += 1
    missing = [k for k in range(n) if count[k] == 0 and k not in skip]
    if missing:  # no default score: a response nobody compared has no reward
        raise ValueError(f"responses {missing} take part in no comparison")
    return [None if k in skip else total[k] / count[k] for k in range(n)]


def top_threshold(scores: list[float], top_percentile: float) -> float:
    """The score at or above which a response counts as a top performer."""
    ranked = sorted(scores, reverse=True)
    return ranked[max(0, int(len(scores) * top_percentile) - 1)]


def shortest_nonempty(lengths: list[int]) -> int | None:
    """Index of the shortest length > 0 (the first on ties), None when all are 0."""
    valid = [(length, k) for k, length in enumerate(lengths) if length > 0]
    return min(valid)[1] if valid else None


def centred_weights(values: list[float]) -> list[float]:
    """``w_i = 1 - (v_i - v_min) / (v_max - v_min)`` minus its mean; all 0 when the values are equal."""
    low, high = min(values), max(values)
    if high == low:
        return [0.0] * len(values)
    raw = [1.0 - (v - low) / (high - low) for v in values]
    mean = sum(raw) / len(raw)
    return [w - mean for w in raw]


_CODE_BLOCK = re.compile(r"```[\s\S]*?```", re.MULTILINE)
_EMOJI = re.compile("[\U0001f600-\U0001f64f\U0001f300-\U0001f5ff\U0001f680-\U0001f6ff\U0001f1e0-\U0001f1ff"
                    "\U00002702-\U000027b0\U000024c2-\U0001f251\U0001f900-\U0001f9ff\U0001fa00-\U0001fa6f"
                    "\U0001fa70-\U0001faff\U00002600-\U000026ff\U00002700-\U000027bf]")
_STYLE_PATTERNS = (re.compile(r"^#{1,6}\s", re.MULTILINE), re.compile(r"^\s*\d+\.\s", re.MULTILINE),
                   re.compile(r"^\s*[-*+]\s", re.MULTILINE), re.compile(r"\*\*[^*\n]+\*\*"),
                   re.compile(r"__[^_\n]+__"), _EMOJI)


def style_density(text: str) -> float:
    """Markdown style elements (headers, list items, bold, emoji; Arena-Hard's count) per character,
    code blocks left out of both counts; 0 for an empty text."""
    body = _CODE_BLOCK.sub("", text)
    length = len(body.strip())
    if length == 0:
        return 0.0
    return sum(len(p.findall(body)) for p in _STYLE_PATTERNS) / length


def aggregate(comparisons: list[Comparison], texts: list[tuple[str, str]], shaping: Shaping,
              failed: frozenset[int] = frozenset()) -> Aggregate:
    """Rewards of the ``len(texts)`` responses (``texts[k] = (reasoning, answer)``) from their
    comparisons, in the order of the module docstring.

    ``failed`` responses (one of their comparisons got no verdict) get no reward; the others keep
    the mean over all their comparisons, and the bonus and the length/style terms are relative to
    the responses that were scored."""
    kept = [k for k in range(len(texts)) if k not in failed]
    base_all = mean_scores(comparisons, len(texts), failed)
    texts = [texts[k] for k in kept]
    n = len(texts)
    base = [float(base_all[k]) for k in kept]  # type: ignore[arg-type]
    scores = list(base)
    if n >= 2:
        reasoning_len = [len(r.strip()) for r, _ in texts]
        answer_len = [len(a.strip()) for _, a in texts]
        threshold = top_threshold(scores, shaping.top_percentile)  # taken before any bonus, as NeMo-Gym
        for bonus, lengths in ((shaping.reasoning_bonus, reasoning_len), (shaping.answer_bonus, answer_len)):
            k = shortest_nonempty(lengths)
            if bonus > 0 and k is not None and scores[k] >= threshold:
                scores[k] += bonus
        if shaping.group_reasoning_length_penalty_coeff > 0 or shaping.group_answer_length_penalty_coeff > 0:
            w_reasoning = centred_weights([float(x) for x in reasoning_len])
            w_answer = centred_weights([float(x) for x in answer_len])
            for k in range(n):
                scores[k] += (w_reasoning[k] * shaping.group_reasoning_length_penalty_coeff
                              + w_answer[k] * shaping.group_answer_length_penalty_coeff)
        if shaping.group_style_penalty_coeff > 0:
            w_style = centred_weights([style_density(a) for _, a in texts])
            for k in range(n):
                scores[k] += w_style[k] * shaping.group_style_penalty_coeff
    raw = [x for c in comparisons for x in (c.score_1, c.score_2)]
    rewards: list[float | None] = [None] * len(base_all)
    adjustments: list[float | None] = [None] * len(base_all)
    for pos, k in enumerate(kept):
        rewards[k], adjustments[k] = scores[pos], scores[pos] - base[pos]
    metrics: dict[str, float] = {}
    if raw:
        mean = sum(raw) / len(raw)
        metrics["mean_individual_score"] = mean
        metrics["std_individual_score"] = math.sqrt(sum((x - mean) ** 2 for x in raw) / len(raw))
    if comparisons:
        metrics["tiebreak_usage_rate"] = sum(c.score_1 == c.score_2 for c in comparisons) / len(comparisons)
    return Aggregate(rewards=rewards, base_scores=base_all, adjustments=adjustments, metrics=metrics)
