"""Notations math-verify misreads, rewritten into ones it reads (pure, cheap, no sympy).

math-verify decides most equivalences, but a few common ways of *writing* an answer make it
miss a right one (or fail to parse a gold): repeating decimals, the Unicode degree sign,
compound plain-text units, and a solution set written as an inequality when the gold is an
interval (it accepts the other direction). :func:`rewrite_pair` turns both the gold and the
prediction into the form math-verify understands, so the two directions agree:

* repeating decimals -> an exact fraction: ``0.\\overline{3}``, ``0.\\bar{3}``, ``0.(3)``,
  ``0.1\\overline{6}``, ``0.333...`` (at least two repetitions of the period before the
  dots; ``0.3...`` alone is ambiguous and left as it is);
* degree signs -> ``^\\circ``: ``90°``, ``90 °C``, ``90\\degree``, ``90\\textdegree``, ``90^o``;
* a plain-text unit after a number is dropped (``5 m/s``, ``3 km/h``, ``12 dollars``,
  ``5 cm.``) -- unless both sides carry *different* units, which then stay for math-verify
  to compare (``5 m/s`` vs ``5 km/h`` is not made equal here);
* a one-variable inequality or chain -> an interval, ``or`` -> union: ``x>2`` ->
  ``(2,\\infty)``, ``1\\le x<3`` -> ``[1,3)``, ``x<-1 \\text{ or } x>2`` ->
  ``(-\\infty,-1)\\cup(2,\\infty)``.

Each rule only fires on a whole answer of exactly that shape; anything else passes through
unchanged, so a rewrite can make a right answer readable but never turns text into a
different value. Complex numbers are compared in ``scoring.library_score`` (needs sympy).
"""

from __future__ import annotations

import re
from fractions import Fraction

from environments.math.scoring import strip_math_delimiters

# ---- repeating decimals -----------------------------------------------------------------
_REPEAT_MARKED = re.compile(
    r"^([+-]?)(\d*)\.(\d*)(?:\\(?:overline|bar|dot)\s*(?:\{(\d+)\}|(\d))|\((\d+)\))$")
_REPEAT_DOTS = re.compile(r"^([+-]?)(\d*)\.(\d+)\s*(?:\.\.\.|…|\\ldots|\\cdots|\\dots)$")


def _fraction_latex(value: Fraction) -> str:
    sign = "-" if value < 0 else ""
    value = abs(value)
    if value.denominator == 1:
        return f"{sign}{value.numerator}"
    return f"{sign}\\frac{{{value.numerator}}}{{{value.denominator}}}"


def _repeating_value(sign: str, whole: str, prefix: str, period: str) -> Fraction:
    # x = whole.prefix(period)(period)... = (N(whole prefix period) - N(whole prefix)) / (10^|prefix| (10^|period| - 1))
    head = int((whole or "0") + prefix)
    full = int((whole or "0") + prefix + period)
    value = Fraction(full - head, 10 ** len(prefix) * (10 ** len(period) - 1))
    return -value if sign == "-" else value


def repeating_decimal(s: str) -> str | None:
    """``\\frac{a}{b}`` for a whole answer written as a repeating decimal; else None."""
    m = _REPEAT_MARKED.match(s)
    if m:
        sign, whole, prefix, braced, single, paren = m.groups()
        if not (whole or prefix or braced or single or paren):
            return None
        return _fraction_latex(_repeating_value(sign, whole, prefix, braced or single or paren))
    m = _REPEAT_DOTS.match(s)
    if m:
        sign, whole, digits = m.groups()
        # The shortest period whose last two copies end the digits: 0.333 -> 3, 0.1212 -> 12, 0.1666 -> 6.
        for size in range(1, len(digits) // 2 + 1):
            period = digits[-size:]
            if digits[-2 * size:-size] == period:
                return _fraction_latex(_repeating_value(sign, whole, digits[:-size], period))
    return None


# ---- degrees -----------------------------------------------------------------------------
_DEGREE = re.compile(r"(?<=[\d}.])\s*(?:°\s*[CF]?(?![A-Za-z])|\\degree\b|\\textdegree\b|\^\s*\{?\s*o\s*\}?(?![A-Za-z]))")


def degrees(s: str) -> str:
    """``90°``, ``90 °C``, ``90\\degree``, ``90^o`` -> ``90^\\circ`` (math-verify reads only ``^\\circ``)."""
    return _DEGREE.sub(r"^\\circ", s) if ("°" in s or "degree" in s or "^" in s) else s


# ---- plain-text units ----------------------------------------------------------------------
_UNIT_WORDS = (
    # length, area, volume
    "mm", "cm", "dm", "m", "km", "in", "inch", "inches", "ft", "feet", "foot", "yd", "yard", "yards", "mi",
    "mile", "miles", "meter", "meters", "metre", "metres", "centimeter", "centimeters", "millimeter",
    "millimeters", "kilometer", "kilometers", "ml", "mL", "l", "L", "liter", "liters", "litre", "litres",
    "gal", "gallon", "gallons", "cc",
    # mass
    "mg", "g", "kg", "gram", "grams", "kilogram", "kilograms", "lb", "lbs", "pound", "pounds", "oz",
    "ounce", "ounces", "ton", "tons", "tonne", "tonnes",
    # time, speed
    "ms", "s", "sec", "secs", "second", "seconds", "min", "mins", "minute", "minutes", "h", "hr", "hrs",
    "hour", "hours", "day", "days", "week", "weeks", "month", "months", "year", "years", "mph", "kph", "kmh",
    # money, angles, generic
    "dollar", "dollars", "cent", "cents", "euro", "euros", "rupee", "rupees", "deg", "degree", "degrees",
    "rad", "radian", "radians", "unit", "units",
)
_UNIT = r"(?:sq(?:uare)?\s+|cubic\s+|cu\s+)?(?:" + "|".join(sorted(map(re.escape, _UNIT_WORDS), key=len, reverse=True)) + \
    r")(?:\^\{?[23]\}?|[²³])?"
# "<number> <unit>[/<unit> | per <unit>][.]": the value must be a plain number or fraction.
_NUMBER = r"[+-]?\$?(?:\d+(?:,\d{3})*(?:\.\d+)?|\.\d+|\\frac\{\d+\}\{\d+\}|\d+/\d+)"
# (one \s* run on each side of the optional spacing macro: two adjacent \s* backtrack quadratically on spaces)
_WITH_UNIT = re.compile(rf"^({_NUMBER})\s*(?:(?:\\[,;: ]|~)\s*)?({_UNIT}(?:\s*(?:/|\bper\b)\s*{_UNIT})?)\s*\.?$")


def split_plain_unit(s: str) -> tuple[str, str | None]:
    """``("5", "m/s")`` for ``"5 m/s"``; ``(s, None)`` when ``s`` is not a number + plain unit."""
    m = _WITH_UNIT.match(s)
    if not m:
        return s, None
    return m.group(1), re.sub(r"\s+", " ", m.group(2))


# ---- inequalities -> intervals ---------------------------------------------------------------
_CANONICAL_OP = {"<": "<", "\\lt": "<", "\\le": "<=", "\\leq": "<=", "\\leqslant": "<=", "≤": "<=", "<=": "<=",
                 ">": ">", "\\gt": ">", "\\ge": ">=", "\\geq": ">=", "\\geqslant": ">=", "≥": ">=", ">=": ">="}
_MIRROR = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}
_OPERATOR = re.compile(r"(\\(?:leqslant|geqslant|leq|geq|le|ge|lt|gt)(?![a-zA-Z])|<=|>=|≤|≥|<|>)")
_OR = re.compile(r"\\text\s*\{\s*or\s*\}|\\(?:lor|vee)\b|\bor\b")
_VARIABLE = re.compile(r"^[a-zA-Z]$")


def _is_bound(expr: str) -> bool:
    return bool(expr) and not _VARIABLE.match(expr) and "=" not in expr


def _interval(condition: str) -> str | None:
    parts = [p.strip() for p in _OPERATOR.split(condition)]
    ops = [_CANONICAL_OP[op] for op in parts[1::2]]
    if len(parts) == 3:
        left, _, right = parts
        if _VARIABLE.match(left) and _is_bound(right):  # x OP a
            bound, op = right, ops[0]
        elif _VARIABLE.match(right) and _is_bound(left):  # a OP x  ==  x (mirrored OP) a
            bound, op = left, _MIRROR[ops[0]]
        else:
            return None
        return {"<": f"(-\\infty,{bound})", "<=": f"(-\\infty,{bound}]",
                ">": f"({bound},\\infty)", ">=": f"[{bound},\\infty)"}[op]
    if len(parts) == 5:
        low, _, var, _, high = parts
        if not (_VARIABLE.match(var) and _is_bound(low) and _is_bound(high)):
            return None
        if ops[0][0] == ">" and ops[1][0] == ">":  # a > x >= b  ==  b <= x < a
            low, high, ops = high, low, [_MIRROR[ops[1]], _MIRROR[ops[0]]]
        elif not (ops[0][0] == "<" and ops[1][0] == "<"):
            return None  # a < x > b is no interval
        return ("[" if ops[0] == "<=" else "(") + f"{low},{high}" + ("]" if ops[1] == "<=" else ")")
    return None


def inequality_to_interval(s: str) -> str | None:
    """The interval (or union) a whole answer like ``1\\le x<3`` or ``x<0 or x>2`` denotes; else None."""
    if not _OPERATOR.search(s):
        return None
    pieces = _OR.split(s)
    intervals = [_interval(piece) for piece in pieces]
    if not all(intervals):
        return None
    return "\\cup".join(intervals)  # type: ignore[arg-type]


# ---- the pair --------------------------------------------------------------------------------
def rewrite(s: str) -> str:
    """One answer's notation rewrites that do not depend on the other side."""
    out = degrees(strip_math_delimiters(s))
    return repeating_decimal(out) or inequality_to_interval(out) or out


def rewrite_pair(gold: str, answer: str) -> tuple[str, str]:
    """``(gold, answer)`` in notations math-verify reads; see the module docstring."""
    gold, answer = rewrite(gold), rewrite(answer)
    gold_value, gold_unit = split_plain_unit(gold)
    answer_value, answer_unit = split_plain_unit(answer)
    if gold_unit is None or answer_unit is None or gold_unit == answer_unit:
        gold = rewrite(gold_value) if gold_unit else gold
        answer = rewrite(answer_value) if answer_unit else answer
    return gold, answer
