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


_CHAR_LITERAL = re.compile(r"'(?:\\(?:x[0-9A-Fa-f]{2}|u\{[0-9A-Fa-f]+\}|.)|[^\\'\n])'")
_RAW_STRING_OPEN = re.compile(r'r(#*)"')
_WORD = re.compile(rf"[{_IDENT_CHAR}]")


def blank_comments_and_strings(code: str) -> str:
    return _lex(code)[0]


def leaves_open(code: str) -> bool:
    """The code ends inside a comment or a literal (a cut-off answer, or one that would swallow
    whatever the verifier appends, its own ``#print axioms`` included)."""
    return _lex(code)[1]


def _lex(code: str) -> tuple[str, bool]:
    """(``code`` with comment and literal contents replaced by spaces (newlines kept, so offsets
    and line numbers do not move), read the way Lean's lexer reads it, so that nothing Lean runs
    as code can pass here for a comment or a string (a scan that disagrees with Lean is a way
    past it). Block comments nest (doc comments are block comments); ``\\"`` does not end a
    string; a character literal (``'"'``, ``'\\''``) is not a string's start; raw strings
    (``r"\\"``, ``r#"..."#``) have no escapes; ``{...}`` inside an interpolated string
    (``s!"{x}"``) is code; a ``«...»`` identifier is code with its quote characters blanked."""
    out: list[str] = []
    i, n = 0, len(code)
    # Open literals, innermost last: "s" a string, "i" an interpolated string's text, an int the
    # brace depth of the code inside an interpolation.
    stack: list[str | int] = []

    def blank(text: str) -> None:
        out.append("".join(c if c == "\n" else " " for c in text))

    while i < n:
        ch, two = code[i], code[i:i + 2]
        if stack and isinstance(stack[-1], str):  # inside a string's text
            if ch == "\\" and i + 1 < n:
                blank(code[i:i + 2])
                i += 2
            elif ch == '"':
                stack.pop()
                out.append(" ")
                i += 1
            elif ch == "{" and stack[-1] == "i":
                stack.append(1)
                out.append(" ")
                i += 1
            else:
                blank(ch)
                i += 1
            continue
        word_before = i > 0 and _WORD.match(code[i - 1]) is not None
        if two == "/-":
            depth, j = 1, i + 2
            while j < n and depth:
                step = code[j:j + 2]
                if step in ("/-", "-/"):
                    depth += 1 if step == "/-" else -1
                    j += 2
                else:
                    j += 1
            blank(code[i:j])
            if depth:
                return "".join(out), True
            i = j
        elif two == "--":
            j = code.find("\n", i)
            j = n if j < 0 else j
            blank(code[i:j])
            i = j
        elif ch == "'" and not word_before and _CHAR_LITERAL.match(code, i):
            literal = _CHAR_LITERAL.match(code, i).group(0)  # type: ignore[union-attr]
            blank(literal)
            i += len(literal)
        elif ch == "r" and not word_before and _RAW_STRING_OPEN.match(code, i):
            hashes = _RAW_STRING_OPEN.match(code, i).group(1)  # type: ignore[union-attr]
            close = code.find('"' + hashes, i + 2 + len(hashes))
            if close < 0:
                blank(code[i:])
                return "".join(out), True
            stop = close + 1 + len(hashes)
            blank(code[i:stop])
            i = stop
        elif ch == "«":
            close = code.find("»", i + 1)
            stop = n if close < 0 else close + 1
            out.append("".join(c if _WORD.match(c) or c == "\n" else " " for c in code[i:stop]))
            i = stop
        elif ch == '"':
            stack.append("i" if i > 0 and code[i - 1] == "!" else "s")
            out.append(" ")
            i += 1
        elif stack and ch in "{}":  # braces of the code inside an interpolation
            stack[-1] += 1 if ch == "{" else -1  # type: ignore[operator]
            if stack[-1] == 0:
                stack.pop()  # back to the string's text
                out.append(" ")
            else:
                out.append(ch)
            i += 1
        else:
            out.append(ch)
            i += 1
    return "".join(out), bool(stack)


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


_LIMIT_OPTION = re.compile(r"\bset_option\s+(?:maxHeartbeats|synthInstance\.maxHeartbeats|maxRecDepth|maxSize)\b")


def raises_lean_limits(proof: str) -> bool:
    """The proof changes one of Lean's own deterministic limits (heartbeats, recursion depth):
    what stops a runaway elaboration in time, so a timeout after it is the proof's doing."""
    return _LIMIT_OPTION.search(blank_comments_and_strings(proof)) is not None


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
