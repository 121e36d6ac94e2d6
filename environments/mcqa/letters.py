"""Choice-letter extraction for multiple-choice answers (pure regex, no state).

The three NeMo-Gym ``mcqa`` grading modes plus the row's own ``output_regex``:

* ``strict_single_letter_boxed`` -- ``\\boxed{B}`` (non-letters around the letter allowed:
  ``\\boxed{ [C] }``, ``\\boxed{(B)}``); uppercase only.
* ``lenient_boxed`` -- strict first, else the boxed content matched against the option
  texts (exactly one option's text contained in it).
* ``lenient_answer_colon`` -- ``Answer: c`` (any case) or ``Answer: <exact option text>``.
* ``template_metadata.output_regex`` -- case-insensitive, the rightmost match's first group;
  takes priority over the grading mode when present and valid.

One deliberate difference from NeMo-Gym: where it takes the *first* ``\\boxed{}`` /
``Answer:`` we take the *last*, since a reasoning model's final statement is its answer
("Answer: A? No, wait... Answer: B").
"""

from __future__ import annotations

import functools
import re

# also \boxed{\text{B}} and \boxed{\textbf{B}}, which models emit often
STRICT_BOXED = re.compile(r"\\boxed\{\s*(?:\\text(?:bf)?\{)?[^A-Za-z{}]*([A-Z])[^A-Za-z{}]*\}?\s*\}")
BOXED_CONTENT = re.compile(r"\\boxed\{\s*(.*?)\s*\}", re.S)
TEXT_WRAP = re.compile(r"\\text(?:bf)?\{\s*(.*?)\s*\}", re.S)
# the rest of the line, up to a later "answer:" on the same line ("Answer: A? No. Answer: B" -> B)
ANSWER_COLON = re.compile(r"answer\s*:\s*((?:(?!answer\s*:).)+)", re.IGNORECASE)

GRADING_MODES = ("strict_single_letter_boxed", "lenient_boxed", "lenient_answer_colon")


def _last(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    match = None
    for match in pattern.finditer(text):
        pass
    return match


def strip_latex_wrappers(s: str) -> str:
    """``\\text{\\text{B}}`` -> ``B``."""
    while True:
        m = TEXT_WRAP.fullmatch(s)
        if not m:
            return s
        s = m.group(1)


def normalize(s: str) -> str:
    return " ".join(s.lower().split())


def strict_boxed(text: str, allowed: frozenset[str]) -> str | None:
    m = _last(STRICT_BOXED, text)
    if m is None:
        return None
    letter = m.group(1)
    return letter if letter in allowed else None


def boxed_option_text(text: str, options: tuple[tuple[str, str], ...]) -> str | None:
    """Letter of the one option whose text appears inside the last box; None if zero or several do."""
    m = _last(BOXED_CONTENT, text)
    if m is None:
        return None
    inner = m.group(1)
    candidates = {normalize(inner), normalize(strip_latex_wrappers(inner))}
    matched = {letter for letter, option in options if option and any(option in c for c in candidates)}
    return matched.pop() if len(matched) == 1 else None


def answer_colon(text: str, allowed: frozenset[str], options: tuple[tuple[str, str], ...]) -> str | None:
    m = _last(ANSWER_COLON, text)
    if m is None:
        return None
    candidate = strip_latex_wrappers(m.group(1).strip()).strip().rstrip(".").strip()
    inner = strip_latex_wrappers(candidate.strip("*()[] "))  # "**B**", "(B)", "[B]"
    if len(inner) == 1 and inner.isalpha() and inner.upper() in allowed:
        return inner.upper()
    wanted = normalize(candidate)
    for letter, option in options:
        if option == wanted:
            return letter
    return None


@functools.lru_cache(maxsize=1024)
def compile_output_regex(pattern: str) -> re.Pattern[str] | str:
    """The compiled row regex, or the error message (rows repeat one template many times)."""
    try:
        compiled = re.compile(pattern, re.IGNORECASE | re.S)
    except re.error as exc:
        return f"invalid output_regex {pattern!r}: {exc}"
    if compiled.groups < 1:
        return f"output_regex {pattern!r} has no capture group for the letter"
    return compiled


def by_output_regex(text: str, regex: re.Pattern[str], allowed: frozenset[str]) -> str | None:
    m = _last(regex, text)
    if m is None or m.group(1) is None:
        return None
    letter = m.group(1).strip().upper()
    if len(letter) != 1 or not letter.isalpha():
        return None
    # Rows without options (NeMo-Gym allows them with a template) accept any letter.
    return letter if not allowed or letter in allowed else None


def extract_letter(text: str, mode: str, allowed: frozenset[str], options: tuple[tuple[str, str], ...]) -> str | None:
    if mode == "strict_single_letter_boxed":
        return strict_boxed(text, allowed)
    if mode == "lenient_boxed":
        return strict_boxed(text, allowed) or boxed_option_text(text, options)
    if mode == "lenient_answer_colon":
        return answer_colon(text, allowed, options)
    raise ValueError(f"unknown grading_mode {mode!r}; expected one of {', '.join(GRADING_MODES)}")
