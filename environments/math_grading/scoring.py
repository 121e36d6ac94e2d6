"""Answer equivalence: a fast exact path, then math-verify (HF ``math_verify``).

Two layers, both pure functions of ``(gold, extracted)``:

* :func:`fast_equivalence` runs in the server's event loop. It decides only the cases it
  can decide *exactly*: the two answers normalise to the same string, or both are plain
  rational numbers (``32``, ``-3``, ``1,000``, ``2.50``, ``\\frac{333}{1997}``, ``3/4``). It
  answers ``None`` ("ask math-verify") for everything else, so it can never disagree with
  math-verify on what math-verify would accept -- it only skips sympy where the answer is
  obvious.
* :func:`library_score` runs in a CPU-pool worker (top-level, picklable). It calls
  math-verify with its signal-based timeouts *disabled* (``parsing_timeout=None``,
  ``timeout_seconds=None``): the pool enforces the deadline from the parent by killing
  the worker, which also works when sympy is stuck in C code. Parsed golds are cached
  per worker (LRU keyed by the gold string).

The gold is wrapped as ``\\boxed{gold}`` after stripping ``\\(..\\)`` / ``$..$``, exactly
as NeMo-Gym's math_with_judge does, so the same rows give the same rewards.
"""

from __future__ import annotations

import functools
import logging
import re
from fractions import Fraction
from typing import Any

# ---------------------------------------------------------------------------------------
# fast path (event loop; no sympy import)
# ---------------------------------------------------------------------------------------
_SPACING = re.compile(r"\\[,;:! ]|\\quad|\\qquad|~|\s+")
_WRAPPERS = re.compile(r"\\(?:left|right|displaystyle|mathrm|textstyle)\b")
_DFRAC = re.compile(r"\\[dt]frac")
_DECIMAL = re.compile(r"^([+-]?)(\d+)(?:\.(\d+))?$")
_FRAC = re.compile(r"^([+-]?)\\frac\{(\d+)\}\{(\d+)\}$|^([+-]?)(\d+)/(\d+)$")
_THOUSANDS = re.compile(r"^[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")


def strip_math_delimiters(s: str) -> str:
    """``\\( x \\)``, ``\\[ x \\]``, ``$x$``, ``$$x$$`` -> ``x`` (as NeMo-Gym does for golds)."""
    s = s.strip()
    changed = True
    while changed and s:
        changed = False
        for left, right in (("\\(", "\\)"), ("\\[", "\\]"), ("$$", "$$"), ("$", "$")):
            if len(s) > len(left) + len(right) - 1 and s.startswith(left) and s.endswith(right):
                s = s[len(left):len(s) - len(right)].strip()
                changed = True
                break
    return s


def normalize(s: str) -> str:
    """A conservative textual normal form: delimiters, spacing macros, ``\\left``/``\\right``,
    ``\\dfrac`` and a trailing period go; nothing that changes meaning."""
    s = strip_math_delimiters(s)
    s = _WRAPPERS.sub("", s)
    s = _DFRAC.sub(r"\\frac", s)
    s = _SPACING.sub("", s)
    return s.rstrip(".")


def as_rational(s: str) -> Fraction | None:
    """A plain rational written as an integer, decimal, ``a/b`` or ``\\frac{a}{b}``; else None."""
    if _THOUSANDS.match(s):
        s = s.replace(",", "")
    m = _DECIMAL.match(s)
    if m:
        sign, whole, frac = m.groups()
        value = Fraction(int(whole + (frac or "")), 10 ** len(frac or ""))
        return -value if sign == "-" else value
    m = _FRAC.match(s)
    if m:
        sign, num, den = (m.group(1), m.group(2), m.group(3)) if m.group(2) else (m.group(4), m.group(5), m.group(6))
        if int(den) == 0:
            return None
        value = Fraction(int(num), int(den))
        return -value if sign == "-" else value
    return None


def _is_integer_literal(s: str) -> bool:
    return bool(re.fullmatch(r"[+-]?\d+", s.replace(",", "") if _THOUSANDS.match(s) else s))


def fast_equivalence(gold: str, extracted: str) -> bool | None:
    """True/False when the answer is decidable without sympy; None to defer to math-verify."""
    g, p = normalize(gold), normalize(extracted)
    if not p:
        return None
    if g == p:
        return True
    g_num, p_num = as_rational(g), as_rational(p)
    if g_num is not None and p_num is not None:
        if g_num == p_num:
            return True
        # Two different integers are different for math-verify too; two different
        # decimals may still be "equal" under its rounding rules (0.3333 vs 1/3), so defer.
        if _is_integer_literal(g) and _is_integer_literal(p):
            return False
    return None


# ---------------------------------------------------------------------------------------
# math-verify path (CPU-pool worker)
# ---------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def _configs() -> tuple[Any, Any]:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig

    logging.getLogger("math_verify").setLevel(logging.CRITICAL)  # it logs every unparsable answer
    # Same targets as NeMo-Gym's math_with_judge: golds as LaTeX, predictions as LaTeX or plain expressions.
    return (LatexExtractionConfig(),), (LatexExtractionConfig(), ExprExtractionConfig())


@functools.lru_cache(maxsize=4096)
def parse_gold(gold: str) -> tuple[Any, ...]:
    """math-verify's parse of ``\\boxed{gold}``, cached: a GRPO group scores one gold many times."""
    from math_verify import parse

    gold_cfg, _ = _configs()
    return tuple(parse("\\boxed{" + strip_math_delimiters(gold) + "}", extraction_config=gold_cfg,
                       parsing_timeout=None))


def parse_prediction(extracted: str) -> list[Any]:
    from math_verify import parse

    _, pred_cfg = _configs()
    return parse("\\boxed{" + extracted + "}", extraction_config=pred_cfg, parsing_timeout=None)


def library_score(gold: str, extracted: str) -> tuple[float, str | None]:
    """``(reward, error)``: math-verify's verdict; ``error`` set when the gold cannot be parsed
    (a data problem, reported as a failure class rather than a silent 0)."""
    from math_verify import verify

    gold_parsed = parse_gold(gold)
    if not gold_parsed:
        return 0.0, f"math-verify could not parse expected_answer {gold[:200]!r}"
    pred_parsed = parse_prediction(extracted)
    if not pred_parsed:
        return 0.0, None  # an unparsable prediction is a wrong answer
    ok = verify(list(gold_parsed), pred_parsed, timeout_seconds=None) or \
        same_complex_number(gold_parsed[0], pred_parsed[0])
    return (1.0 if ok else 0.0), None


def same_complex_number(gold: Any, pred: Any) -> bool:
    """Both sides are complex numbers written with ``i`` and are equal: ``\\frac{1+i}{2}`` =
    ``\\frac12 + \\frac{i}{2}`` = ``0.5+0.5i`` = ``\\frac{1}{1-i}``.

    math-verify reads ``i`` as a plain symbol (and two parses of it as two different symbols),
    so it misses these unless both sides happen to expand alike. Only when ``i`` is the one
    free symbol on *both* sides is it taken as the imaginary unit; the difference must then
    vanish numerically (30 digits, relative 1e-12), as math-verify's own numeric compare does.
    """
    import sympy

    values = []
    for expr in (gold, pred):
        if not isinstance(expr, sympy.Expr):
            return False
        symbols = expr.free_symbols
        if not symbols or any(getattr(sym, "name", None) != "i" for sym in symbols):
            return False
        value = complex(sympy.N(expr.subs({sym: sympy.I for sym in symbols}), 30))
        values.append(value)
    gold_value, pred_value = values
    return abs(gold_value - pred_value) <= 1e-12 * max(1.0, abs(gold_value))


def plain_math_verify(gold: str, extracted: str) -> float:
    """math-verify as NeMo-Gym calls it, no caches or fast path (the benchmark's baseline)."""
    from math_verify import parse, verify

    gold_cfg, pred_cfg = _configs()
    g = parse("\\boxed{" + strip_math_delimiters(gold) + "}", extraction_config=gold_cfg, parsing_timeout=None)
    p = parse("\\boxed{" + extracted + "}", extraction_config=pred_cfg, parsing_timeout=None)
    return 1.0 if verify(g, p, timeout_seconds=None) else 0.0
