"""Compare one predicted coding-agent tool call with the expected one.

Pure functions (no I/O), so they are tested alone and cheap enough for the event loop.
Arguments are normalised per tool family:

* shell tools (``execute_bash``, ``bash``...): ``command`` compared with
  :func:`environments.agent_actions.shell.canonical_command`;
* editor tools (``str_replace_editor``, ``file_editor``...): ``path`` normalised,
  ``view_range``/``insert_line`` coerced to integers, text fields compared with line
  endings and trailing spaces normalised (``old_str`` must match a file, but trailing
  whitespace differences are what tokenisers and chat templates introduce, not intent);
* anything else: ``environments.agent_actions.calls.value_problems`` (the shared
  rules: numbers with a tolerance, numeric strings equal numbers, whitespace collapsed),
  after dropping ``null`` values (optional arguments left at their default).
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass, field
from typing import Any

from environments.agent_actions.calls import MatchOptions, value_problems
from environments.agent_actions.shell import canonical_command

GENERIC_OPTIONS = MatchOptions(whitespace="collapse")

EDITOR_TEXT_KEYS = ("old_str", "new_str", "file_text")
EDITOR_INT_KEYS = ("insert_line",)


@dataclass
class ArgumentComparison:
    matched: list[str] = field(default_factory=list)
    mismatched: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # expected but absent in the prediction
    extra: list[str] = field(default_factory=list)    # predicted but not expected

    @property
    def exact(self) -> bool:
        return not (self.mismatched or self.missing or self.extra)

    @property
    def fraction(self) -> float:
        """Matched keys over the union of keys: extra and missing keys both cost."""
        total = len(self.matched) + len(self.mismatched) + len(self.missing) + len(self.extra)
        return 1.0 if total == 0 else len(self.matched) / total


def parse_arguments(arguments: str | dict[str, Any] | None) -> dict[str, Any]:
    """Function-call ``arguments`` (a JSON string on the wire) -> dict. ValueError if not an object."""
    if arguments is None or arguments == "":
        return {}
    if isinstance(arguments, dict):
        return arguments
    value = json.loads(arguments)
    if not isinstance(value, dict):
        raise ValueError(f"arguments must be a JSON object, got {type(value).__name__}")
    return value


def _path(value: Any) -> Any:
    if not isinstance(value, str) or not value.strip():
        return value
    return posixpath.normpath(value.strip())


def _int(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return value


def _text(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    lines = value.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return "\n".join(line.rstrip() for line in lines).rstrip("\n")


def _shell(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return canonical_command(value)
    except ValueError:  # unbalanced quotes: compare the raw text
        return value.strip()


def normalize_arguments(family: str, arguments: dict[str, Any], ignored: frozenset[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in arguments.items():
        if value is None or key in ignored:
            continue
        if family == "shell" and key == "command":
            out[key] = _shell(value)
        elif family == "editor" and key == "path":
            out[key] = _path(value)
        elif family == "editor" and key == "command" and isinstance(value, str):
            out[key] = value.strip().lower()
        elif family == "editor" and key == "view_range" and isinstance(value, list):
            out[key] = [_int(v) for v in value]
        elif family == "editor" and key in EDITOR_INT_KEYS:
            out[key] = _int(value)
        elif family == "editor" and key in EDITOR_TEXT_KEYS:
            out[key] = _text(value)
        else:
            out[key] = value  # compared by tool_call's value rules in compare_arguments
    return out


def _special(family: str, key: str) -> bool:
    """Keys normalised above compare by equality only (no whitespace collapsing of code)."""
    if family == "shell":
        return key == "command"
    if family == "editor":
        return key in ("path", "command", "view_range", *EDITOR_INT_KEYS, *EDITOR_TEXT_KEYS)
    return False


def compare_arguments(family: str, expected: dict[str, Any], predicted: dict[str, Any],
                      ignored: frozenset[str] = frozenset()) -> ArgumentComparison:
    want = normalize_arguments(family, expected, ignored)
    got = normalize_arguments(family, predicted, ignored)
    result = ArgumentComparison()
    for key, value in want.items():
        if key not in got:
            result.missing.append(key)
        elif got[key] == value or (
                not _special(family, key) and not value_problems(value, got[key], GENERIC_OPTIONS, key)):
            result.matched.append(key)
        else:
            result.mismatched.append(key)
    result.extra = sorted(set(got) - set(want))
    return result
