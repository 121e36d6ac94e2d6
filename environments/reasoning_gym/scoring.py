"""Answer extraction and scoring with reasoning-gym's own per-task scorers.

:func:`score_entry` runs in a CPU-pool worker: some scorers parse or evaluate the model's
text with sympy (countdown, polynomial tasks...), which a hostile answer can make slow,
so it gets the pool's deadline instead of blocking the event loop. Scorers are built
once per task per worker (``get_score_answer_fn`` builds a dataset object each call).
"""

from __future__ import annotations

import functools
import re
from typing import Any, Callable

EXTRACTION_RULES = ("answer_tag", "boxed", "answer_line", "full_text")

_ANSWER_TAG = re.compile(r"<answer>\s?(.*?)\s?</answer>", re.S)  # reasoning_gym.utils.extract_answer's pattern
_ANSWER_LINE = re.compile(r"^\s*(?:final\s+answer|answer)\s*[:：]\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)


def answer_tag(text: str) -> str | None:
    """Last ``<answer>...</answer>``, stripped (as ``reasoning_gym.utils.extract_answer``)."""
    matches = _ANSWER_TAG.findall(text)
    return matches[-1].strip() if matches else None


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` with nested braces (NeMo-Gym stops at the first ``}``)."""
    start = text.rfind("\\boxed{")
    while start >= 0:
        depth, i = 0, start + len("\\boxed")
        for j in range(i, len(text)):
            if text[j] == "{":
                depth += 1
            elif text[j] == "}":
                depth -= 1
                if depth == 0:
                    return text[i + 1:j].strip()
        start = text.rfind("\\boxed{", 0, start)  # unclosed: try an earlier one
    return None


def answer_line(text: str) -> str | None:
    matches = _ANSWER_LINE.findall(text)
    return matches[-1].rstrip(".").strip() if matches else None


def full_text(text: str) -> str | None:
    return text.strip() or None


_RULES: dict[str, Callable[[str], str | None]] = {
    "answer_tag": answer_tag, "boxed": last_boxed, "answer_line": answer_line, "full_text": full_text,
}


def extract_answer(text: str, rules: list[str] | tuple[str, ...]) -> tuple[str | None, str]:
    """``(answer, rule)`` of the first rule that finds something, else ``(None, "none")``."""
    for rule in rules:
        found = _RULES[rule](text)
        if found is not None:
            return found, rule
    return None, "none"


@functools.lru_cache(maxsize=None)
def known_tasks() -> frozenset[str]:
    """Names of reasoning-gym's registered datasets (imports the library once: ~4 s)."""
    import reasoning_gym  # noqa: F401 - registers every dataset
    from reasoning_gym.factory import DATASETS

    return frozenset(name for name in DATASETS if name != "composite")


@functools.lru_cache(maxsize=None)
def scorer(task: str) -> Callable[..., float]:
    import reasoning_gym

    return reasoning_gym.get_score_answer_fn(task)


def score_entry(task: str, answer: str | None, entry: dict[str, Any]) -> float:
    """The library's score of ``answer`` for ``entry``; exceptions propagate (a verifier error)."""
    value = float(scorer(task)(answer=answer, entry=entry))
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"reasoning-gym scorer for {task!r} returned {value}, outside [0, 1]")
    return value
