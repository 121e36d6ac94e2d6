"""A SCRIPTED stand-in for ``lean FILE``. It is NOT a Lean checker and proves nothing.

There is no Lean toolchain on the machines this project is developed and tested on (it
cannot be downloaded there), so the compile step of ``math_formal_lean`` is exercised
against this script at the process boundary (run as the ``lean_command`` inside the
sandbox, see ``example_config.yaml``) and, through :func:`check`, by the scripted Kimina
server in the tests. Everything around the compile (extraction, assembly, the forbidden-token
scan, message parsing, feedback, timeouts, failure classes) runs for real.

Rules, applied to the file (standard library only; it runs inside the sandbox):
* ``-- scripted-lean: error TEXT`` on a line: an error with TEXT at that line (exit 1);
* ``-- scripted-lean: sleep S``: sleep S seconds first (a slow proof, or a starved checker);
* ``-- scripted-lean: spin S``: compute for S seconds of CPU first (an expensive proof);
* ``-- scripted-lean: crash``: exit 134 with no message (a crashed Lean);
* ``sorry`` in the code (outside comments and strings): ``declaration uses 'sorry'``;
* ``#print axioms NAME``: ``'NAME' depends on axioms: [propext, Classical.choice, Quot.sound]``
  plus ``sorryAx`` if the code has ``sorry``, ``Lean.ofReduceBool`` if it has
  ``native_decide``, and every ``axiom X`` the file declares; an undeclared NAME is an
  ``unknown constant`` error;
* anything else "compiles" with no message (exit 0).
Messages are printed as Lean prints them: ``FILE:LINE:COL: severity: text``, information
messages without a position.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import time

DIRECTIVE = re.compile(r"--\s*scripted-lean:\s*(error|sleep|spin|crash)\b\s*(.*)$")
STANDARD_AXIOMS = ["propext", "Classical.choice", "Quot.sound"]


def _load_blanker():
    """The environment's own comment/string blanker (proof.py, standard library only), loaded by
    path: this script runs as a plain program inside the sandbox, outside the package."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "proof.py")
    spec = importlib.util.spec_from_file_location("math_formal_lean_proof", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module.blank_comments_and_strings


_code_only = _load_blanker()


def check(text: str) -> dict:
    """The scripted outcome of compiling ``text``: {"messages": [{severity, line, column, text}],
    "sleep": seconds, "spin": seconds, "crash": bool}."""
    messages: list[dict] = []
    sleep, spin, crash = 0.0, 0.0, False
    lines = text.split("\n")
    for number, line in enumerate(lines, start=1):
        found = DIRECTIVE.search(line)
        if not found:
            continue
        kind, arg = found.group(1), found.group(2).strip()
        if kind == "error":
            column = len(line) - len(line.lstrip())
            messages.append({"severity": "error", "line": number, "column": column, "text": arg or "scripted error"})
        elif kind == "sleep":
            sleep = float(arg or 1)
        elif kind == "spin":
            spin = float(arg or 1)
        else:
            crash = True
    code = _code_only(text)
    code_lines = code.split("\n")
    declared: dict[str, int] = {}
    for number, line in enumerate(code_lines, start=1):
        hit = re.match(r"\s*(?:theorem|lemma)\s+([^\s(:{\[]+)", line)
        if hit:
            declared[hit.group(1)] = number
    has_sorry = re.search(r"(?<![\w.'])sorry(?![\w'])", code) is not None
    if has_sorry:
        first_sorry = next(i for i, line in enumerate(code_lines, 1) if re.search(r"(?<![\w.'])sorry(?![\w'])", line))
        owner = max((n for n in declared.values() if n <= first_sorry), default=1)
        messages.append({"severity": "warning", "line": owner, "column": 0, "text": "declaration uses 'sorry'"})
    axioms = list(STANDARD_AXIOMS)
    if has_sorry:
        axioms.append("sorryAx")
    if re.search(r"(?<![\w.'])native_decide(?![\w'])", code):
        axioms.append("Lean.ofReduceBool")
    axioms += re.findall(r"(?m)^\s*axiom\s+([^\s(:{\[]+)", code)
    for number, line in enumerate(code_lines, start=1):
        hit = re.match(r"\s*#print\s+axioms\s+(\S+)", line)
        if not hit:
            continue
        name = hit.group(1)
        if name in declared:
            messages.append({"severity": "info", "line": number, "column": 0,
                             "text": f"'{name}' depends on axioms: [{', '.join(axioms)}]"})
        else:
            messages.append({"severity": "error", "line": number, "column": 15, "text": f"unknown constant '{name}'"})
    messages.sort(key=lambda m: m["line"])
    return {"messages": messages, "sleep": sleep, "spin": spin, "crash": crash}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: scripted_lean.py FILE.lean", file=sys.stderr)
        return 2
    path = argv[1]
    with open(path, encoding="utf-8") as handle:
        outcome = check(handle.read())
    if outcome["sleep"]:
        time.sleep(outcome["sleep"])
    if outcome["spin"]:
        until = time.process_time() + outcome["spin"]
        while time.process_time() < until:
            pass
    if outcome["crash"]:
        print("INTERNAL PANIC: scripted crash", file=sys.stderr)
        return 134
    for m in outcome["messages"]:
        if m["severity"] == "info":
            print(m["text"])
        else:
            print(f"{path}:{m['line']}:{m['column']}: {m['severity']}: {m['text']}")
    return 1 if any(m["severity"] == "error" for m in outcome["messages"]) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
