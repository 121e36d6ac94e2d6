"""Finding the model's patch in a response, and reading file lists out of patches.

Pure functions. The patch comes from (first match wins):
1. the last ``submit``-style function call whose arguments carry a patch;
2. the last fenced ```diff / ```patch block of the final message;
3. unfenced diff text in the final message (from the first ``diff --git`` or ``--- a/``).
"""

from __future__ import annotations

import json
import re
from typing import Any

from servers.wire import ResponseObject

PATCH_ARGUMENT_KEYS = ("patch", "diff", "model_patch")
_FENCE = re.compile(r"```(?:diff|patch|git)[^\n]*\n(.*?)```", re.DOTALL)
_ANY_FENCE = re.compile(r"```[^\n]*\n(.*?)```", re.DOTALL)
_DIFF_START = re.compile(r"^(diff --git |--- a/|--- /dev/null)", re.MULTILINE)
_GIT_HEADER = re.compile(r"^diff --git a/(\S+) b/(\S+)", re.MULTILINE)
_PLUS_HEADER = re.compile(r"^\+\+\+ (?:b/)?(\S+)", re.MULTILINE)
_MINUS_HEADER = re.compile(r"^--- (?:a/)?(\S+)", re.MULTILINE)


def looks_like_patch(text: str) -> bool:
    return bool(_DIFF_START.search(text)) and ("\n@@" in text or "\nBinary files" in text
                                              or "GIT binary patch" in text or "rename from" in text)


def normalize_patch(text: str) -> str:
    """Line endings to LF and a final newline (git apply rejects a patch cut mid-line)."""
    text = text.replace("\r\n", "\n")
    return text if text.endswith("\n") else text + "\n"


def patch_from_arguments(arguments: Any) -> str | None:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            return arguments if looks_like_patch(arguments) else None
    if not isinstance(arguments, dict):
        return None
    for key in PATCH_ARGUMENT_KEYS:
        value = arguments.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return None


def patch_from_text(text: str) -> str | None:
    blocks = [b for b in _FENCE.findall(text) if looks_like_patch(b)]
    if not blocks:
        blocks = [b for b in _ANY_FENCE.findall(text) if looks_like_patch(b)]
    if blocks:
        return blocks[-1]
    start = _DIFF_START.search(text)
    if start and looks_like_patch(text[start.start():]):
        return text[start.start():].split("\n```", 1)[0]
    return None


def extract_patch(response: ResponseObject, submit_tools: tuple[str, ...]) -> tuple[str | None, str]:
    """(patch or None, where it came from: 'submit' | 'message' | 'none')."""
    for call in reversed(response.function_calls):
        if call.name in submit_tools:
            found = patch_from_arguments(call.arguments)
            if found:
                return normalize_patch(found), "submit"
    found = patch_from_text(response.last_message_text) or patch_from_text(response.output_text)
    if found:
        return normalize_patch(found), "message"
    return None, "none"


def files_in_patch(patch: str) -> list[str]:
    """Paths a patch touches (old and new names), in order, without duplicates."""
    seen: dict[str, None] = {}
    headers = _GIT_HEADER.findall(patch)
    if headers:
        for a, b in headers:
            seen.setdefault(a)
            seen.setdefault(b)
    else:
        for path in _MINUS_HEADER.findall(patch) + _PLUS_HEADER.findall(patch):
            if path != "/dev/null":
                seen.setdefault(path)
    return list(seen)
