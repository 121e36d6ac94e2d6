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
    r"(?:final\s+answer|answer)\s*(?:is)?\s*[:：]\s*(.+?)\s*$|the\s+final\s+answer\s+is\s*(.+?)\s*$",
    re.IGNORECASE | re.MULTILINE,
)
# A number as written in prose: optional sign, thousands groups or digits, decimals, or a/b.
_PLAIN_NUMBER = re.compile(r"(?<![\w.])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s*/\s*\d+)?(?![\w])")


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}``/``\\fbox{...}``; None if there is none or it is unclosed."""
    best_start = -1
    best_cmd = ""
    for cmd in _BOX_COMMANDS:
        pos = text.rfind(cmd)
        if pos > best_start:
            best_start, best_cmd = pos, cmd
    while best_start >= 0:
        found = _box_content(text, best_start + len(best_cmd))
        if found is not None:
            return found
        # "\boxedx" or an unclosed box: look for an earlier one
        earlier = [(text.rfind(cmd, 0, best_start), cmd) for cmd in _BOX_COMMANDS]
        best_start, best_cmd = max(earlier)
    return None


def _box_content(text: str, i: int) -> str | None:
    n = len(text)
    while i < n and text[i] == " ":
        i += 1
    if i >= n:
        return None
    if text[i] != "{":
        # "\boxed 5" (TeX allows a single-token argument): take up to whitespace / "$".
        if text[i - 1] != " ":
            return None
        m = re.match(r"[^\s$]+", text[i:])
        return m.group(0) if m else None
    depth = 0
    for j in range(i, n):
        ch = text[j]
        if ch == "\\" and j + 1 < n and text[j + 1] in "{}":
            continue  # "\{" is a literal brace inside sets; the next char is skipped by depth logic below
        if ch == "{" and (j == 0 or text[j - 1] != "\\"):
            depth += 1
        elif ch == "}" and (j == 0 or text[j - 1] != "\\"):
            depth -= 1
            if depth == 0:
                return text[i + 1:j]
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
