"""Final-answer extraction from a model's response text (pure, cheap, no sympy).

Order of preference, as math_with_judge / NeMo-RL graders do it, plus the fallbacks
issue 2 asks for:

1. the LAST ``\\boxed{...}`` or ``\\fbox{...}`` (nested braces handled; ``\\boxed 5``
   without braces too);
2. the last ``Answer:`` / ``Final answer:`` / ``The final answer is`` line;
3. opt-in only: the last plain number in the text (``-3``, ``1,000``, ``2.5``, ``3/4``).

``last_number`` is not in :data:`DEFAULT_RULES`: a response cut off mid-reasoning ends in
*some* number, and scoring it rewards truncation. A response the generator marked
incomplete (Responses API ``status: "incomplete"``, e.g. ``max_output_tokens``) is read
even more strictly: never by ``last_number``, and an answer line only when its line was
finished (a newline follows), so ``Answer: 12`` cut from ``Answer: 125`` is no answer.
"""

from __future__ import annotations

import re
from typing import Any

_BOX_COMMANDS = ("\\boxed", "\\fbox")
_ANSWER_LINE = re.compile(
    # the rest of the line, stripped by the caller ((.+?)\s*$ backtracks quadratically on trailing spaces)
    r"(?:final\s+answer|answer)\s*(?:is)?\s*[:：]\s*(.+)$|the\s+final\s+answer\s+is\s*(.+)$",
    re.IGNORECASE | re.MULTILINE,
)
# A number as written in prose: optional sign, thousands groups or digits, decimals, or a/b.
_PLAIN_NUMBER = re.compile(r"(?<![\w.])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s*/\s*\d+)?(?![\w])")


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}``/``\\fbox{...}``; None if there is none or it is unclosed.

    Linear in the text: when the last box is unclosed, the braces are matched once (a response of
    thousands of unclosed ``\\boxed{`` must not cost a scan per box)."""
    closing: dict[int, int] | None = None
    for start in reversed([m.end() for m in _BOX_COMMAND.finditer(text)]):
        found = _box_content(text, start, closing)
        if found is not None:
            return found
        if closing is None:  # "\boxedx" or an unclosed box: earlier ones are looked up in one matching
            closing = _matching_braces(text)
    return None


_BOX_COMMAND = re.compile("|".join(re.escape(cmd) for cmd in _BOX_COMMANDS))
_BRACE = re.compile(r"(?<!\\)[{}]")  # "\{" is a literal brace inside sets
_BARE_ARGUMENT = re.compile(r"[^\s$]+")


def _matching_braces(text: str) -> dict[int, int]:
    """Position of each opening brace -> position of the brace closing it (unclosed ones absent)."""
    stack: list[int] = []
    closing: dict[int, int] = {}
    for m in _BRACE.finditer(text):
        if m.group() == "{":
            stack.append(m.start())
        elif stack:
            closing[stack.pop()] = m.start()
    return closing


def _box_content(text: str, i: int, closing: dict[int, int] | None = None) -> str | None:
    n = len(text)
    while i < n and text[i] == " ":
        i += 1
    if i >= n:
        return None
    if text[i] != "{":
        # "\boxed 5" (TeX allows a single-token argument): take up to whitespace / "$".
        if text[i - 1] != " ":
            return None
        m = _BARE_ARGUMENT.match(text, i)
        return m.group(0) if m else None
    if closing is not None:
        end = closing.get(i)
        return text[i + 1:end] if end is not None else None
    depth = 0
    for m in _BRACE.finditer(text, i):
        depth += 1 if m.group() == "{" else -1
        if depth == 0:
            return text[i + 1:m.start()]
    return None


def answer_line(text: str) -> str | None:
    """The answer of the last ``Answer: ...`` style line, trailing period and ``$`` removed."""
    matches = list(_ANSWER_LINE.finditer(text))
    if not matches:
        return None
    m = matches[-1]
    value = (m.group(1) or m.group(2) or "").strip()
    value = value.rstrip(".").strip()
    if len(value) >= 2 and value[0] == "$" and value[-1] == "$":
        value = value.strip("$").strip()
    return value or None


def last_plain_number(text: str) -> str | None:
    matches = _PLAIN_NUMBER.findall(text)
    return matches[-1].replace(" ", "") if matches else None


RULES = {"boxed": last_boxed, "answer_line": answer_line, "last_number": last_plain_number}


DEFAULT_RULES = ("boxed", "answer_line")


def is_incomplete(response: Any) -> bool:
    """The generator stopped before the response was finished (Responses API ``status``)."""
    return (getattr(response, "model_extra", None) or {}).get("status") == "incomplete"


def extract_answer(text: str, rules: list[str] | tuple[str, ...] = DEFAULT_RULES, *,
                   incomplete: bool = False) -> tuple[str | None, str]:
    """``(answer, rule)``: the first rule in ``rules`` that finds a non-empty answer, or ``(None, "none")``.

    ``incomplete``: the text was cut off; ``last_number`` is skipped and ``answer_line`` only
    reads finished lines (see the module docstring).
    """
    finished_lines = text[:text.rfind("\n") + 1] if incomplete else text
    for rule in rules:
        if incomplete and rule == "last_number":
            continue
        found = RULES[rule](finished_lines if rule == "answer_line" else text)
        if rule == "answer_line" and found is not None:
            found = last_boxed(found) or found  # "Answer: \\boxed{5}"
        if found is not None and found.strip():
            return found.strip(), rule
    return None, "none"
