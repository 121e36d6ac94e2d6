"""Pull the solution program out of a model's reply.

Rule (LiveCodeBench / NeMo-Gym ``code_gen`` take the last fenced block; we add a language
preference so a trailing example in another language does not shadow the solution):

1. Only text after the last ``</think>`` counts (reasoning may hold draft code).
2. The LAST complete block fenced as ```python / ```py / ```python3 wins.
3. Else the last complete block with no language tag.
4. Else an unterminated final ```python block (reply cut off at the length limit).
5. Else no code: a scored zero, not a failure of the verifier.
"""

from __future__ import annotations

import re

PYTHON_TAGS = frozenset({"python", "py", "python3"})

# A fence line: ``` optionally followed by an info string. Matched per line, so a fence
# inside a longer line (```` `x` ````) is not mistaken for a block boundary.
_FENCE = re.compile(r"^\s*```+\s*([A-Za-z0-9_+.-]*)[^\n]*$")


def _blocks(text: str) -> tuple[list[tuple[str, str]], tuple[str, str] | None]:
    """(complete blocks as (tag, body), unterminated trailing block or None)."""
    blocks: list[tuple[str, str]] = []
    tag: str | None = None
    body: list[str] = []
    for line in text.split("\n"):
        match = _FENCE.match(line)
        if tag is None:
            if match:
                tag, body = match.group(1).lower(), []
        elif match and not match.group(1):
            blocks.append((tag, "\n".join(body)))
            tag = None
        else:
            body.append(line)
    return blocks, ((tag, "\n".join(body)) if tag is not None else None)


def extract_code(text: str) -> str | None:
    """The solution code, or None when the reply holds no usable block."""
    if "</think>" in text:
        text = text.rsplit("</think>", 1)[1]
    blocks, open_block = _blocks(text)
    for wanted in (PYTHON_TAGS, {""}):
        for tag, body in reversed(blocks):
            if tag in wanted and body.strip():
                return body
    if open_block and open_block[0] in PYTHON_TAGS and open_block[1].strip():
        return open_block[1].rstrip()
    return None
