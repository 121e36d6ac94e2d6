"""From a model's answer to the Lean file that gets compiled, and the checks made before compiling.

Pure functions. The extraction and assembly follow NeMo-Gym's ``math_formal_lean`` (and
NeMo-Skills' ``proof_utils``) so a row scores the same here and there:

1. drop a reasoning model's thinking (``<think>...</think>``, a bare ``</think>``, an
   unclosed ``<think>``);
2. optionally keep only what follows ``final_answer_key``;
3. take the last (or first) fenced block tagged ``lean4``, then ``lean3``, ``lean``, then
   untagged; without any fence, the text itself with stray backticks removed;
4. when the code restates the theorem, keep only the proof: everything after the first
   ``:=`` of the first ``theorem``/``lemma``/``example``, without a leading ``by``;
5. the compiled file is ``header + formal_statement + proof`` (the row's header and statement
   are trusted; only the proof comes from the model).

The forbidden-token scan runs on the proof only, with comments and string literals blanked
out, so ``-- no sorry here`` is not a hit and ``"sorry"`` in a string is not either.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)
_FENCE_LANGUAGES = ("lean4", "lean3", "lean", "")
_STRAY_FENCE = re.compile(r"^\s*```(?:lean4|lean3|lean)?\s*|\s*```\s*$")
_DECLARATION = re.compile(r"^\s*(?:@\[[^\]]*\]\s*)?(?:private\s+|protected\s+)?(theorem|lemma|example)\b")
_THEOREM_NAME = re.compile(r"^\s*(?:@\[[^\]]*\]\s*)?(?:private\s+|protected\s+)?(?:theorem|lemma)\s+([^\s(:{\[⦃]+)",
                           re.MULTILINE)
_IDENT_CHAR = r"A-Za-z0-9_'!?.\u03b1-\u03c9\u0391-\u03a9\u2080-\u2089"


def strip_thinking(text: str) -> str:
    """The answer part of a reasoning model's output (see module docstring, step 1)."""
    text = _THINK_BLOCK.sub("", text)
    closes = list(_THINK_CLOSE.finditer(text))
    if closes:
        text = text[closes[-1].end():]
    opener = _THINK_OPEN.search(text)
    return text[: opener.start()] if opener else text


def fenced_blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\s*\n?(.*?)\n?```", text, re.DOTALL)


def extract_lean_code(text: str, *, mode: str = "last", final_answer_key: str | None = None) -> tuple[str, bool]:
    """(code, whether it came from a fenced block). ``mode``: ``last`` or ``first`` block."""
    text = strip_thinking(text)
    if final_answer_key and final_answer_key in text:
        text = text.split(final_answer_key, 1)[1]
    for language in _FENCE_LANGUAGES:
        blocks = fenced_blocks(text, language)
        if blocks:
            return (blocks[0] if mode == "first" else blocks[-1]).strip(), True
    return _STRAY_FENCE.sub("", text).strip(), False


def proof_body(code: str) -> str:
    """The proof part of ``code`` (module docstring, step 4); ``code`` itself when it states no theorem."""
    lines = code.strip().splitlines()
    start = next((i for i, line in enumerate(lines) if _DECLARATION.match(line)), None)
    if start is None:
        return code.strip()
    end = next((i for i in range(start, len(lines)) if ":=" in lines[i]), None)
    if end is None:
        return code.strip()
    after = lines[end].split(":=", 1)[1].strip()
    body = ([after] if after else []) + lines[end + 1:]
    if body:
        first = body[0].lstrip()
        if first == "by":
            body = body[1:]
        elif first.startswith("by "):
            body[0] = first[3:]
    return "\n".join(body).rstrip()


def assemble(header: str, formal_statement: str, proof: str, *, restate_statement: bool = True) -> str:
    """The file to compile: the row's header and statement, then the model's proof."""
    return header + (formal_statement if restate_statement else "") + proof


def theorem_name(formal_statement: str) -> str | None:
    """Name of the theorem the statement declares (None for ``example`` or an unparsable one)."""
    match = _THEOREM_NAME.search(formal_statement)
    return match.group(1) if match else None


def blank_comments_and_strings(code: str) -> str:
    """``code`` with comment and string-literal contents replaced by spaces (newlines kept, so
    offsets and line numbers do not move). Block comments nest in Lean; doc comments are
    block comments; ``\\"`` does not end a string."""
    out: list[str] = []
    i, n, depth = 0, len(code), 0
    in_line_comment = in_string = False
    while i < n:
        ch, two = code[i], code[i:i + 2]
        if in_line_comment:
            in_line_comment = ch != "\n"
            out.append(ch if ch == "\n" else " ")
            i += 1
        elif depth:
            if two in ("/-", "-/"):
                depth += 1 if two == "/-" else -1
                out.append("  ")
                i += 2
            else:
                out.append(ch if ch == "\n" else " ")
                i += 1
        elif in_string:
            if ch == "\\" and i + 1 < n:
                out.append("  ")
                i += 2
            else:
                in_string = ch != '"'
                out.append(ch if ch == "\n" else " ")
                i += 1
        elif two == "/-":
            depth = 1
            out.append("  ")
            i += 2
        elif two == "--":
            in_line_comment = True
            out.append("  ")
            i += 2
        else:
            in_string = ch == '"'
            out.append(" " if in_string else ch)
            i += 1
    return "".join(out)


def forbidden_tokens(proof: str, forbidden: list[str]) -> list[str]:
    """The entries of ``forbidden`` that occur in the proof's code (not in comments or strings).
    Word-like entries match whole identifiers (``sorry`` but not ``sorry_lemma``); entries
    with other characters (``#exit``, ``debug.skipKernelTC``) match as text."""
    code = blank_comments_and_strings(proof)
    found = []
    for token in forbidden:
        if re.fullmatch(r"[#@]?[\w.]+", token):
            pattern = rf"(?<![{_IDENT_CHAR}]){re.escape(token)}(?![{_IDENT_CHAR}])"
            if re.search(pattern, code):
                found.append(token)
        elif token in code:
            found.append(token)
    return found


@dataclass
class BuiltProof:
    """What the model's answer became: the code it gave, the proof part, the file to compile."""

    code: str
    fenced: bool
    proof: str
    file: str


def build(text: str, header: str, formal_statement: str, *, mode: str = "last", final_answer_key: str | None = None,
          strip_theorem: bool = True, restate_statement: bool = True) -> BuiltProof:
    code, fenced = extract_lean_code(text, mode=mode, final_answer_key=final_answer_key)
    proof = proof_body(code) if strip_theorem else code
    return BuiltProof(code, fenced, proof, assemble(header, formal_statement, proof, restate_statement=restate_statement))
