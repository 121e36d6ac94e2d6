"""Tool calls a model printed in its message text instead of emitting ``function_call`` items.

Hermes / Qwen chat templates render a call as ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``;
a policy served without a tool-call parser returns exactly that text. Both ``swe_pivot`` and
``next_action`` accept such blocks (when configured to) so the reward does not depend on how
the inference server was started.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from servers import json_values

_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


@dataclass(frozen=True)
class TextCall:
    name: str
    arguments: Any  # the object (or JSON string) the block gave; None when the block did not parse
    error: str | None = None  # why the block is not a call


def text_tool_calls(text: str) -> list[TextCall]:
    """Every ``<tool_call>`` block in ``text``, in order; a block that is not a JSON object with a
    ``name`` is kept with ``error`` set (a malformed call is still an attempted call)."""
    calls: list[TextCall] = []
    for body in _BLOCK.findall(text):
        try:
            value = json_values.loads(body)  # NaN / Infinity are not JSON
        except (ValueError, RecursionError):
            calls.append(TextCall("", None, f"the <tool_call> block is not JSON: {body[:100]!r}"))
            continue
        if not isinstance(value, dict) or not isinstance(value.get("name"), str):
            calls.append(TextCall("", None, "the <tool_call> block is not an object with a 'name'"))
            continue
        calls.append(TextCall(value["name"], value.get("arguments", value.get("parameters", {}))))
    return calls
