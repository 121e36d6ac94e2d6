"""Canonical form of a shell command line, so that equivalent spellings compare equal.

Two commands are treated as the same action when they differ only in

* whitespace and quoting (``grep -rn 'a b' x`` == ``grep  -rn "a b" x``): shlex does it;
* the order and grouping of boolean short flags of commands whose flags we know are
  order-independent (``grep -rn`` == ``grep -nr`` == ``grep -r -n`` == ``grep --recursive -n``);
* how a flag value is attached (``head -n 5`` == ``head -n5`` == ``head --lines=5``);
* path spelling (``/a/b/`` == ``/a/b`` == ``/a/./b``; ``./x`` == ``x``).

Deliberately NOT merged, because they can change behaviour: ``python`` vs ``pytest`` entry
points, ``cd X && cmd`` vs ``cmd X``, flags of commands not in :data:`COMMANDS` (their order
is kept), ``find`` expressions (order is semantics), ``-r`` vs ``-R`` in grep (symlinks).
"""

from __future__ import annotations

import posixpath
import re
import shlex
from dataclasses import dataclass, field

# Tokens shlex(punctuation_chars=True) yields for control operators and redirections.
OPERATORS = frozenset({"|", "||", "&&", ";", "&", "|&", ">", ">>", "<", "<<", ">&", "&>", "<&", ";;", "(", ")"})
SEPARATORS = frozenset({"|", "||", "&&", ";", "&", "|&"})
_PATHLIKE = re.compile(r"^[\w.\-+@~/]+$")


@dataclass(frozen=True)
class CommandSpec:
    """What we know of one program's options (only what is needed to compare safely)."""

    flags: frozenset[str] = frozenset()            # boolean short flags, combinable (-rn)
    valued: frozenset[str] = frozenset()           # short flags taking a value (-n 5, -n5)
    long_alias: dict[str, str] = field(default_factory=dict)  # --recursive -> -r, --lines -> -n
    non_path_positionals: int = 0                  # leading positionals that are not paths (grep pattern)
    numeric_shorthand: str | None = None           # head -5 == head -n 5


def _spec(flags: str = "", valued: str = "", aliases: dict[str, str] | None = None, **kw) -> CommandSpec:
    return CommandSpec(frozenset(f"-{c}" for c in flags), frozenset(f"-{c}" for c in valued),
                       aliases or {}, **kw)


COMMANDS: dict[str, CommandSpec] = {
    "grep": _spec("rRnilwvcxHhoqsLEFIPz", "efmABC", {
        "--recursive": "-r", "--line-number": "-n", "--ignore-case": "-i", "--files-with-matches": "-l",
        "--word-regexp": "-w", "--invert-match": "-v", "--count": "-c", "--extended-regexp": "-E",
        "--fixed-strings": "-F", "--with-filename": "-H", "--no-filename": "-h", "--only-matching": "-o",
        "--quiet": "-q", "--silent": "-q", "--no-messages": "-s", "--regexp": "-e", "--max-count": "-m",
        "--after-context": "-A", "--before-context": "-B", "--context": "-C", "--perl-regexp": "-P"},
        non_path_positionals=1),
    "ls": _spec("laAhRt1rSdF", "", {"--all": "-a", "--almost-all": "-A", "--human-readable": "-h",
                                    "--recursive": "-R", "--directory": "-d"}),
    "cat": _spec("nAbsE", "", {"--number": "-n", "--show-all": "-A"}),
    "head": _spec("qv", "nc", {"--lines": "-n", "--bytes": "-c"}, numeric_shorthand="-n"),
    "tail": _spec("qvfF", "nc", {"--lines": "-n", "--bytes": "-c", "--follow": "-f"}, numeric_shorthand="-n"),
    "wc": _spec("lwcmL", "", {"--lines": "-l", "--words": "-w", "--bytes": "-c", "--chars": "-m"}),
    "rm": _spec("rRfvid", "", {"--recursive": "-r", "--force": "-f"}),
    "cp": _spec("rRfpavn", "", {"--recursive": "-r", "--force": "-f", "--archive": "-a"}),
    "mkdir": _spec("pv", "m", {"--parents": "-p"}),
    "sed": _spec("nErsuz", "ef", {"--quiet": "-n", "--silent": "-n", "--regexp-extended": "-E",
                                  "--expression": "-e", "--file": "-f"}, non_path_positionals=1),
    "pytest": _spec("qvxsl", "kmprc", {"--quiet": "-q", "--verbose": "-v", "--exitfirst": "-x",
                                         "--capture=no": "-s", "--showlocals": "-l"}),
    "diff": _spec("uNraqwbB", "", {"--unified": "-u", "--recursive": "-r", "--new-file": "-N"}),
    "nl": _spec("", "bsw", {}),
}
PROGRAM_ALIASES = {"python3": "python", "egrep": "grep -E", "fgrep": "grep -F"}


def tokenize(command: str) -> list[str]:
    """shlex with operators split out; raises ValueError on unbalanced quotes."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""  # a '#' inside an unquoted regex must not start a comment
    return list(lexer)


def normalize_path(token: str) -> str:
    """``/a/./b/`` -> ``/a/b``; ``./x`` -> ``x``. Only for tokens that look like paths."""
    if not token or not _PATHLIKE.match(token) or token in (".", ".."):
        return token
    if "/" not in token:
        return token
    return posixpath.normpath(token)


def _program(argv: list[str]) -> tuple[str, list[str]]:
    program = posixpath.basename(argv[0]) if "/" in argv[0] and argv[0].startswith("/usr/") else argv[0]
    alias = PROGRAM_ALIASES.get(program)
    if alias:
        head, *extra = alias.split()
        program, argv = head, [head, *extra, *argv[1:]]
    if program == "python" and len(argv) >= 3 and argv[1] == "-m" and argv[2] in COMMANDS:
        # `python -m pytest` keeps its "python -m" prefix (different sys.path than `pytest`)
        # but its options are the module's, so they are normalised with the module's spec.
        return f"python -m {argv[2]}", argv[3:]
    return program, argv[1:]


def _canonical_simple(argv: list[str]) -> tuple:
    """One simple command (no operators) -> a hashable canonical form."""
    program, args = _program(argv)
    spec = COMMANDS.get(program.removeprefix("python -m "))
    if spec is None:
        return (program, tuple(normalize_path(a) for a in args))
    flags: set[str] = set()
    valued: list[tuple[str, str]] = []
    positionals: list[str] = []
    i = 0
    only_positionals = False
    while i < len(args):
        tok = args[i]
        i += 1
        if only_positionals or tok == "-" or not tok.startswith("-"):
            positionals.append(tok)
            continue
        if tok == "--":
            only_positionals = True
            continue
        if tok.startswith("--"):
            name, eq, value = tok.partition("=")
            short = spec.long_alias.get(tok) or spec.long_alias.get(name)
            if short in spec.flags and not eq:
                flags.add(short)
            elif short in spec.valued:
                if not eq and i < len(args):
                    value, i = args[i], i + 1
                valued.append((short, value))
            else:
                valued.append((tok, ""))  # unknown long option: kept verbatim
            continue
        if spec.numeric_shorthand and tok[1:].isdigit():
            valued.append((spec.numeric_shorthand, tok[1:]))
            continue
        # A cluster of short flags, possibly ending in a valued flag: -rn, -n5, -rnA 3
        for j, ch in enumerate(tok[1:], start=1):
            short = f"-{ch}"
            if short in spec.valued:
                value = tok[j + 1:]
                if not value and i < len(args):
                    value, i = args[i], i + 1
                valued.append((short, value))
                break
            flags.add(short)  # unknown letters are kept as flags too: still order-free
    # grep/sed: -e/-f supplies the pattern/script, so no positional is a pattern then.
    skip = 0 if any(f in ("-e", "-f") for f, _ in valued) else spec.non_path_positionals
    positionals = positionals[:skip] + [normalize_path(p) for p in positionals[skip:]]
    # Order of valued options matters for repeatable ones (-e a -e b), so keep their order
    # but group them after the boolean flags.
    return (program, tuple(sorted(flags)), tuple(valued), tuple(positionals))


def canonical_command(command: str) -> tuple:
    """A whole command line -> tuple of simple-command forms and operators.

    Trailing ``;`` and surrounding whitespace are dropped; everything else is kept.
    Raises ValueError when the command cannot be tokenised (unbalanced quotes).
    """
    tokens = tokenize(command.strip())
    while tokens and tokens[-1] == ";":
        tokens.pop()
    parts: list = []
    current: list[str] = []
    redirect_next = False
    for tok in tokens:
        if tok in OPERATORS:
            if tok in SEPARATORS:
                if current:
                    parts.append(_canonical_simple(current))
                current = []
            parts.append(tok)
            redirect_next = tok not in SEPARATORS
            continue
        if redirect_next:
            parts.append(normalize_path(tok))  # redirection target: a path
            redirect_next = False
            continue
        current.append(tok)
    if current:
        parts.append(_canonical_simple(current))
    return tuple(parts)


def commands_equivalent(a: str, b: str) -> bool:
    try:
        return canonical_command(a) == canonical_command(b)
    except ValueError:
        return a.strip() == b.strip()
