"""Lean's messages, read from either checker, and the feedback the model gets from them.

Two sources, one shape (:class:`LeanMessage`):
* the ``lean`` command line prints ``FILE:LINE:COL: error: text`` (and ``warning:``); an
  information message (``#print axioms`` output, ``trace``) is printed without a position;
* a Lean REPL (the Kimina server) returns ``{"severity", "pos": {"line", "column"},
  "endPos", "data"}`` objects.

``#print axioms NAME`` prints ``'NAME' depends on axioms: [a, b]`` or ``'NAME' does not
depend on any axioms``; :func:`axioms_of` reads the last such line for the name, which is the
one the checker's own appended command produced (it comes last in the file; a proof that
prints a look-alike line earlier, e.g. with ``trace``, is not believed).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

_CLI_MESSAGE = re.compile(r"^(?P<file>[^\n:]*\.lean):(?P<line>\d+):(?P<col>\d+):\s*(?P<sev>error|warning|info)"
                          r"(?:\([^)]*\))?:\s?(?P<text>.*)$")
SORRY_WARNING = "declaration uses 'sorry'"
# '#print axioms' output is position-less; seen after an error it would read as that error's
# continuation, so such lines always start their own information message.
_AXIOMS_REPORT = re.compile(r"^'[^']+' (?:depends on axioms: \[|does not depend on any axioms)")


@dataclass
class LeanMessage:
    severity: str  # error | warning | info
    text: str
    line: int | None = None  # 1-based
    column: int | None = None  # 0-based, as Lean reports it
    end_line: int | None = None
    end_column: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


def parse_cli_output(output: str) -> list[LeanMessage]:
    """Messages of ``lean FILE`` output. A positioned line starts a message; the lines after
    it (until the next positioned line) are its continuation; lines before any positioned
    message, or after a blank line that ends one, are position-less information."""
    messages: list[LeanMessage] = []
    current: LeanMessage | None = None
    for raw in output.splitlines():
        match = _CLI_MESSAGE.match(raw)
        if match:
            current = LeanMessage(match["sev"], match["text"], int(match["line"]), int(match["col"]))
            messages.append(current)
        elif _AXIOMS_REPORT.match(raw):
            messages.append(LeanMessage("info", raw))
            current = None
        elif current is not None and raw.strip():
            current.text += "\n" + raw
        elif raw.strip():
            messages.append(LeanMessage("info", raw))
            current = None
        else:
            current = None
    return messages


def parse_repl_messages(items: list[dict[str, Any]]) -> list[LeanMessage]:
    out = []
    for item in items:
        pos, end = item.get("pos") or {}, item.get("endPos") or {}
        severity = {"information": "info", "trace": "info"}.get(item.get("severity", "info"), item.get("severity", "info"))
        out.append(LeanMessage(severity, str(item.get("data", "")), pos.get("line"), pos.get("column"),
                               end.get("line"), end.get("column")))
    return out


def errors(messages: list[LeanMessage]) -> list[LeanMessage]:
    return [m for m in messages if m.severity == "error"]


def uses_sorry(messages: list[LeanMessage]) -> bool:
    return any(m.severity == "warning" and SORRY_WARNING in m.text for m in messages)


def axioms_of(messages: list[LeanMessage], name: str) -> list[str] | None:
    """The axioms ``#print axioms name`` reported (last report wins), or None if none was found."""
    found: list[str] | None = None
    depends = re.compile(rf"'{re.escape(name)}' depends on axioms: \[(?P<list>[^\]]*)\]")
    independent = f"'{name}' does not depend on any axioms"
    for message in messages:
        if message.severity != "info":
            continue
        for line in message.text.splitlines():
            hit = depends.search(line)
            if hit:
                found = [a.strip() for a in hit["list"].split(",") if a.strip()]
            elif independent in line:
                found = []
    return found


def feedback(file: str, messages: list[LeanMessage], *, max_errors: int = 8, context_lines: int = 3) -> str:
    """Compiler errors as the model should read them: each error's position, the code around
    it with the error line marked, and Lean's message. The file lines are the compiled file's
    (header and statement included), so positions match Lean's."""
    errs = errors(messages)
    if not errs:
        return ""
    lines = file.split("\n")
    parts = []
    for number, err in enumerate(errs[:max_errors], start=1):
        where = f"line {err.line}, column {err.column}" if err.line else "position unknown"
        part = [f"Error {number} ({where}):"]
        if err.line and 1 <= err.line <= len(lines):
            first = max(1, err.line - context_lines)
            snippet = []
            for i in range(first, min(len(lines), err.line + 1) + 1):
                text = lines[i - 1]
                if i == err.line and err.column is not None and err.column <= len(text):
                    text = f"{text[:err.column]}<error>{text[err.column:]}"
                snippet.append(text)
            part.append("```lean4\n" + "\n".join(snippet) + "\n```")
        part.append(f"Message: {err.text.strip()}")
        parts.append("\n".join(part))
    if len(errs) > max_errors:
        parts.append(f"... {len(errs) - max_errors} more errors not shown")
    return "\n\n".join(parts)
