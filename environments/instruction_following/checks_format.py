"""IFEval families ``detectable_content:*``, ``detectable_format:*``, ``combination:*``,
``startend:*`` and ``punctuation:no_comma``."""

from __future__ import annotations

import json
import re

from environments.instruction_following.registry import instruction

_CONSTRAINED_OPTIONS = ("My answer is yes.", "My answer is no.", "My answer is maybe.")


@instruction("detectable_content:number_placeholders")
def number_placeholders(response: str, *, num_placeholders: int) -> bool:
    return len(re.findall(r"\[.*?\]", response)) >= num_placeholders


@instruction("detectable_content:postscript")
def postscript(response: str, *, postscript_marker: str) -> bool:
    marker = postscript_marker.strip()
    if marker == "P.P.S":
        pattern = r"\s*p\.\s?p\.\s?s.*$"
    elif marker == "P.S.":
        pattern = r"\s*p\.\s?s\..*$"
    else:
        pattern = r"\s*" + re.escape(marker.lower()) + r".*$"
    return bool(re.findall(pattern, response.lower(), flags=re.MULTILINE))


@instruction("detectable_format:number_bullet_lists")
def number_bullet_lists(response: str, *, num_bullets: int) -> bool:
    stars = re.findall(r"^\s*\*[^\*].*$", response, flags=re.MULTILINE)
    dashes = re.findall(r"^\s*-.*$", response, flags=re.MULTILINE)
    return len(stars) + len(dashes) == num_bullets


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
    return any(t.lstrip("<").rstrip(">").strip() for t in re.findall(r"<<[^\n]+>>", response))


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
