"""Long-context scoring metrics, as RULER, SQuAD-style QA and lc_niah (graphwalks) define them.

Pure functions over strings: ``verify`` picks one per row (see ``choose_metric``).
"""

from __future__ import annotations

import json
import re
import string
from collections import Counter
import functools
from dataclasses import dataclass
from typing import Callable

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_SPACES = re.compile(r"\s+")
_FINAL_ANSWER = re.compile(r"Final Answer:\s*\[(.*)\]")


def string_match_all(prediction: str, golds: list[str]) -> float:
    """RULER ``string_match_all``: fraction of gold strings contained in the prediction (case-insensitive)."""
    if not golds:
        return 0.0
    text = prediction.lower()
    return sum(gold.lower() in text for gold in golds) / len(golds)


def string_match_part(prediction: str, golds: list[str]) -> float:
    """RULER ``string_match_part`` (QA tasks): 1 if any gold string is contained (case-insensitive)."""
    text = prediction.lower()
    return float(any(gold.lower() in text for gold in golds))


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lower-case, drop punctuation and articles, squeeze whitespace."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in string.punctuation)
    return _SPACES.sub(" ", _ARTICLES.sub(" ", text)).strip()


def exact_match(prediction: str, golds: list[str]) -> float:
    return float(any(normalize_answer(prediction) == normalize_answer(gold) for gold in golds))


def token_f1(prediction: str, golds: list[str]) -> float:
    """SQuAD token F1, max over the gold answers."""
    pred_tokens = normalize_answer(prediction).split()
    best = 0.0
    for gold in golds:
        gold_tokens = normalize_answer(gold).split()
        if not pred_tokens or not gold_tokens:
            best = max(best, float(pred_tokens == gold_tokens))
            continue
        common = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
        if common:
            precision, recall = common / len(pred_tokens), common / len(gold_tokens)
            best = max(best, 2 * precision * recall / (precision + recall))
    return best


def final_answer_list(response: str) -> list[str] | None:
    """Nodes of ``Final Answer: [a, b]`` on the last non-empty line (graphwalks); None if absent."""
    lines = [line for line in response.strip().splitlines() if line.strip()]
    if not lines:
        return None
    match = _FINAL_ANSWER.search(lines[-1])
    if match is None:
        return None
    return [item.strip().strip("\"'").strip() for item in match.group(1).split(",") if item.strip().strip("\"'")]


def set_f1(predicted: list[str] | None, expected_json: str) -> float:
    """lc_niah answer score: F1 of predicted vs expected node sets; both empty = 1; unparsed = 0."""
    if predicted is None:
        return 0.0
    try:
        expected = set(json.loads(expected_json))
    except (json.JSONDecodeError, TypeError):
        raise ValueError(f"expected_answer is not a JSON list: {expected_json[:100]!r}") from None
    got = set(predicted)
    if not expected and not got:
        return 1.0
    if not expected or not got:
        return 0.0
    tp = len(got & expected)
    if tp == 0:
        return 0.0
    precision, recall = tp / len(got), tp / len(expected)
    return 2 * precision * recall / (precision + recall)


def ngram_overlap(reasoning: str, source: str, n: int = 16) -> float:
    """Fraction of the reasoning's word n-grams found verbatim in the input (copying penalty)."""
    words = _SPACES.sub(" ", reasoning.lower()).split()
    if len(words) < n:
        return 0.0
    source_words = _SPACES.sub(" ", source.lower()).split()
    mine = {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}
    theirs = {tuple(source_words[i:i + n]) for i in range(len(source_words) - n + 1)}
    return len(mine & theirs) / len(mine)


METRICS = {"string_match_all": string_match_all, "string_match_part": string_match_part,
           "exact_match": exact_match, "token_f1": token_f1}


# ---- dumping: paid by string_match_all/part, refused by default -------------------------------------
# RULER's metrics only ask whether each gold string occurs in the answer, so listing every candidate
# of the haystack (all magic numbers, all VAR names) or echoing the context scores like the answer.
# NeMo-Gym scores them so (config ``nemo_gym_parity: true``); by default two rules close it.

_SEGMENT = re.compile(r"[A-Za-z0-9]+|[^A-Za-z0-9]+")
_EDGE = "(?<![A-Za-z0-9])", "(?![A-Za-z0-9])"
QUESTION_CHARS = 1000  # the end of the prompt, where RULER asks its question: strings it names are not dumped


@functools.lru_cache(maxsize=4096)
def gold_shape(gold: str) -> re.Pattern[str] | None:
    """A pattern (case-sensitive) for strings of the same form as a distinctive gold: one holding a
    digit (numbers, hashes, UUIDs) or an upper-case code of 3+ letters (RULER's VAR names); None
    for word-like golds, whose look-alikes are ordinary prose."""
    gold = gold.strip()
    if not gold or not (any(c.isdigit() for c in gold) or (gold.isalpha() and gold.isupper() and len(gold) >= 3)):
        return None
    parts = []
    for segment in _SEGMENT.findall(gold):
        if not segment[0].isalnum():
            parts.append(re.escape(segment))
        elif segment.isdigit():
            parts.append(rf"\d{{{len(segment)}}}")
        elif segment.isalpha() and segment.isupper():
            parts.append(f"[A-Z]{{{len(segment)}}}")
        elif segment.isalpha() and segment.islower():
            parts.append(f"[a-z]{{{len(segment)}}}")
        else:
            parts.append(f"[A-Za-z0-9]{{{len(segment)}}}")
    return re.compile(_EDGE[0] + "".join(parts) + _EDGE[1])


@dataclass(frozen=True)
class _Candidates:
    """The forms of a row's distinctive golds, compiled once per gold list."""

    strict: re.Pattern[str]  # every form, in the golds' own case
    loose: re.Pattern[str]  # the same, any case
    golds: frozenset[str]  # lower-cased
    case: Callable[[str], str] | None  # how the golds write their letters (None: mixed)


@functools.lru_cache(maxsize=4096)
def _candidates(golds: tuple[str, ...]) -> _Candidates | None:
    shapes = sorted({shape.pattern for shape in map(gold_shape, golds) if shape is not None})
    if not shapes:
        return None
    letters = "".join(c for g in golds for c in g if c.isalpha())
    case = str.upper if letters.isupper() else str.lower if not letters or letters.islower() else None
    either = "|".join(shapes)
    return _Candidates(re.compile(either), re.compile(either, re.IGNORECASE),
                       frozenset(g.strip().lower() for g in golds), case)


@dataclass
class DumpCheck:
    """How much of an answer is candidates other than the golds (see :func:`candidate_precision`)."""

    precision: float  # golds found / (golds found + other candidates named); 1.0 when nothing to check
    others: list[str]  # the other candidates the answer names


def candidate_precision(prediction: str, golds: list[str], prompt: Callable[[], str]) -> DumpCheck:
    """Of the candidates an answer names — strings of a distinctive gold's form that occur in the
    prompt with that form (the haystack's other needles, VAR names...) — the share that are golds.
    Strings the question itself (the prompt's last 1,000 characters) names are not counted; word-like
    golds are not checked. ``prompt`` is called only when the answer names a string beside the golds."""
    forms = _candidates(tuple(golds))
    if forms is None:
        return DumpCheck(1.0, [])
    suspects = {t.lower() for t in forms.loose.findall(prediction)} - forms.golds
    if not suspects:
        return DumpCheck(1.0, [])
    text = prompt()
    question = text[-QUESTION_CHARS:].lower()
    suspects = {t for t in suspects if t not in question}
    if len(suspects) <= 32 and forms.case is not None:
        # A few names (an honest answer's other words of the gold's length): look each one up in the
        # gold's own case, instead of collecting every candidate of a long prompt.
        haystack = {t for t in suspects if _occurs(text, forms.case(t))}
    else:
        haystack = {t.lower() for t in forms.strict.findall(text)}  # the prompt's own candidates
    others = sorted(suspects & haystack)
    if not others:
        return DumpCheck(1.0, [])
    lowered = prediction.lower()
    found = sum(g in lowered for g in forms.golds)
    return DumpCheck(found / (found + len(others)) if found else 0.0, others)


def _occurs(text: str, token: str) -> bool:
    """``token`` occurs in ``text`` as a whole token (no letter or digit either side)."""
    start = text.find(token)
    while start >= 0:
        end = start + len(token)
        if (start == 0 or not text[start - 1].isalnum()) and (end == len(text) or not text[end].isalnum()):
            return True
        start = text.find(token, start + 1)
    return False


def dump_budget(golds: list[str], min_chars: int, factor: float) -> int:
    """The longest answer a string-match row pays: ``factor`` times the golds' length, at least ``min_chars``."""
    return max(min_chars, int(factor * sum(len(g) for g in golds)))
