"""What a response says, as every verifier reads it: reasoning removed, invisible characters known.

One shared reading, so that rule-based and judged environments agree on what "the answer" is:

* :func:`strip_think` drops ``<think>``/``<thinking>`` reasoning. A reply whose reasoning never
  closes has no answer from the line opening it on (a leading unclosed block: the result is
  empty), so a policy cannot get an unfinished thought scored as its answer.
* :data:`INVISIBLE` matches characters that render as nothing (zero-width spaces and joiners,
  the byte-order mark, bidi controls, variation selectors, tag characters, the soft hyphen,
  blank fillers); :func:`visible` removes them and :func:`is_blank` says whether anything
  visible is left, so "empty" means empty to the reader, not to ``str.strip``.
"""

from __future__ import annotations

import re

_ANY_THINK_TAG = re.compile(r"</?think", re.IGNORECASE)  # <thinking> too
_THINK_BLOCK = re.compile(r"<(think|thinking)>.*?</\1>", re.DOTALL | re.IGNORECASE)
_UNOPENED_THINK = re.compile(r"^.*?</(think|thinking)>", re.DOTALL | re.IGNORECASE)
# An opening tag that starts a line: reasoning; one inside a line is text (code handling the tags).
_UNCLOSED_THINK = re.compile(r"^[ \t]*<(think|thinking)>", re.IGNORECASE | re.MULTILINE)

# Format characters and fillers that display as nothing. Whitespace is left to str.strip.
INVISIBLE = re.compile(
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u2064"
    "\u2066-\u206f\u2800\u3164\ufe00-\ufe0f\ufeff\uffa0\U0001d173-\U0001d17a\U000e0000-\U000e007f"
    "\U000e0100-\U000e01ef]")


def strip_think(text: str) -> str:
    """Drop reasoning: ``<think>...</think>`` blocks; a leading block whose opening tag was in
    the chat template (the text starts inside it and has only the closing tag); and everything
    from a line that opens a block never closed (unfinished reasoning is not an answer; a reply
    that is only such a block gives ""). A tag inside a line of text or code stays."""
    if not _ANY_THINK_TAG.search(text):  # the common case: one scan, no rewrites
        return text.strip()
    text = _THINK_BLOCK.sub("", text)
    text = _UNOPENED_THINK.sub("", text, count=1)
    unclosed = _UNCLOSED_THINK.search(text)
    if unclosed is not None:
        text = text[:unclosed.start()]
    return text.strip()


def visible(text: str) -> str:
    """``text`` without the characters that render as nothing (:data:`INVISIBLE`)."""
    return INVISIBLE.sub("", text) if not text.isascii() else text


def is_blank(text: str) -> bool:
    """Nothing visible: empty, whitespace, or invisible characters only."""
    return not visible(text).strip()
