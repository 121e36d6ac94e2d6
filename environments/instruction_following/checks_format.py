"""IFEval families ``detectable_content:*``, ``detectable_format:*``, ``combination:*``,
``startend:*`` and ``punctuation:no_comma``."""

from __future__ import annotations

import json
import re

from environments.instruction_following.registry import instruction

_CONSTRAINED_OPTIONS = ("My answer is yes.", "My answer is no.", "My answer is maybe.")


def count_placeholders(text: str) -> int:
    """``len(re.findall(r"\\[.*?\\]", text))`` (IFEval's count) in linear time: the regex retries
    every "[" of a line without a "]", quadratic on "[[[[..."."""
    count, pos = 0, 0
    while (start := text.find("[", pos)) >= 0:
        line_end = text.find("\n", start)
        close = text.find("]", start + 1, line_end if line_end >= 0 else len(text))
        if close >= 0:
            count, pos = count + 1, close + 1
        elif line_end >= 0:
            pos = line_end + 1  # no later "[" on this line can close either
        else:
            break
    return count


def count_bullets(text: str, mark: str) -> int:
    """IFEval's bullet counts in linear time: ``mark == "*"`` counts
    ``re.findall(r"^\\s*\\*[^\\*].*$", text, re.M)``, ``"-"`` counts ``r"^\\s*-.*$"``. The regexes'
    ``\\s*`` runs over blank lines, so every line start of a long blank run rescans it (quadratic on
    "\\n" * n); here each run is scanned once and shared by the line starts inside it."""
    count, n, start = 0, len(text), 0
    while start <= n:
        end = start
        while end < n and text[end].isspace():
            end += 1
        hit = end < n and text[end] == mark
        if hit and mark == "*":
            hit = end + 1 < n and text[end + 1] != "*"
        if hit:
            count += 1
            newline = text.find("\n", end + (2 if mark == "*" else 1))
        else:
            newline = text.find("\n", end)  # every line start up to ``end`` fails the same way
        if newline < 0:
            break
        start = newline + 1
    return count


@instruction("detectable_content:number_placeholders")
def number_placeholders(response: str, *, num_placeholders: int) -> bool:
    return count_placeholders(response) >= num_placeholders


@instruction("detectable_content:postscript")
def postscript(response: str, *, postscript_marker: str) -> bool:
    # IFEval's bool(re.findall(r"\s*<marker>.*$", ..., re.M)): the marker anywhere. Its leading \s* and
    # trailing .*$ always match, so they are left out (with them the search is quadratic on whitespace).
    marker = postscript_marker.strip()
    if marker == "P.P.S":
        pattern = r"p\.\s?p\.\s?s"
    elif marker == "P.S.":
        pattern = r"p\.\s?s\."
    else:
        pattern = re.escape(marker.lower())
    return re.search(pattern, response.lower()) is not None


@instruction("detectable_format:number_bullet_lists")
def number_bullet_lists(response: str, *, num_bullets: int) -> bool:
    return count_bullets(response, "*") + count_bullets(response, "-") == num_bullets


@instruction("detectable_format:constrained_response")
def constrained_response(response: str) -> bool:
    text = response.strip()
    return any(option in text for option in _CONSTRAINED_OPTIONS)


@instruction("detectable_format:number_highlighted_sections")
def number_highlighted_sections(response: str, *, num_highlights: int) -> bool:
    count = sum(1 for h in re.findall(r"\*[^\n\*]*\*", response) if h.strip("*").strip())
    count += sum(1 for h in re.findall(r"\*\*[^\n\*]*\*\*", response)
                 if h.removeprefix("**").removesuffix("**").strip())
    return count >= num_highlights


@instruction("detectable_format:multiple_sections")
def multiple_sections(response: str, *, section_spliter: str, num_sections: int) -> bool:
    pattern = r"\s?" + re.escape(section_spliter.strip()) + r"\s?\d+\s?"
    return len(re.split(pattern, response)) - 1 >= num_sections


@instruction("detectable_format:json_format")
def json_format(response: str) -> bool:
    text = response.strip()
    for prefix in ("```json", "```Json", "```JSON", "```"):
        text = text.removeprefix(prefix)
    text = text.removesuffix("```").strip()
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


@instruction("detectable_format:title")
def title(response: str) -> bool:
    # IFEval's re.findall(r"<<[^\n]+>>") matches, per line, from the first "<<" to the last ">>";
    # found here without the regex, which backtracks quadratically on a line of "<<" with no ">>".
    for line in response.split("\n"):
        start, end = line.find("<<"), line.rfind(">>")
        if start >= 0 and end >= start + 3 and line[start:end + 2].lstrip("<").rstrip(">").strip():
            return True
    return False


@instruction("combination:two_responses")
def two_responses(response: str) -> bool:
    parts = response.split("******")
    valid = []
    for index, part in enumerate(parts):
        if not part.strip():
            if index not in (0, len(parts) - 1):
                return False
        else:
            valid.append(part)
    return len(valid) == 2 and valid[0].strip() != valid[1].strip()


@instruction("combination:repeat_prompt")
def repeat_prompt(response: str, *, prompt_to_repeat: str) -> bool:
    return response.strip().lower().startswith(prompt_to_repeat.strip().lower())


@instruction("startend:end_checker")
def end_checker(response: str, *, end_phrase: str) -> bool:
    return response.strip().strip('"').lower().endswith(end_phrase.strip().lower())


@instruction("startend:quotation")
def quotation(response: str) -> bool:
    text = response.strip()
    return len(text) > 1 and text[0] == '"' and text[-1] == '"'


@instruction("punctuation:no_comma")
def no_comma(response: str) -> bool:
    return "," not in response
