"""Symbolic answers decided without sympy: a small LaTeX expression parser plus evaluation at
fixed random points (pure, event loop; mpmath only, no sympy import).

A profile of ``math`` on unique traffic put ~12 ms of CPU per symbolic answer in math-verify:
latex2sympy's ANTLR parse of the prediction (~1/3) and ``sympy.simplify(gold - pred)`` (~2/3).
Most model answers are small expressions -- integers, ``\\frac``, ``\\sqrt``, ``\\pi``,
powers, one-letter variables -- whose equality is a question about *values*:

* two such expressions that differ (by more than 1e-9 relative) at one real point are
  different functions, so math-verify's numeric and symbolic checks cannot call them equal;
* two that agree to 1e-40 at three independent real points (60-digit arithmetic) are equal:
  the grammar allows roots of constants only, so every answer is a rational function of its
  variables with constant (algebraic, or pi) coefficients, and two different ones agree at
  random points with negligible probability (Schwartz-Zippel); sympy's ``simplify`` proves
  exactly such identities (``cancel``, ``expand``, radical denesting).

:func:`symbolic_equivalence` answers True/False in those two cases and None ("ask
math-verify") for everything else: anything outside the grammar below, a value in the grey
zone between the two tolerances, a pole at a sample point, or an answer equal to a bare
variable (math-verify compares a lone symbol structurally, not by value).

Grammar (whole answer, whitespace and ``\\left``/``\\right``/spacing macros ignored): integers
(at most 40 digits), lowercase one-letter variables except ``e`` and ``i`` (latex2sympy reads
``e`` as Euler's number and uppercase as lowercase; ``i`` is the imaginary unit elsewhere in
this env), ``\\pi``, ``+ - * / \\cdot \\times``, implicit products, parentheses and braces,
``^`` with a constant integer exponent of magnitude <= 64 (``x^{10}``, ``x^2``, ``2^{-3}``),
``\\frac{a}{b}`` (``\\dfrac``/``\\tfrac``), ``\\sqrt{c}`` and ``\\sqrt[n]{c}`` of constant ``c``
(principal roots, as sympy's; a root of a variable expression is refused: its identities hold on
regions, ``\\sqrt{(x+5)^2} = x+5`` only for ``x > -5``). Shapes latex2sympy reads differently from ordinary algebra are refused (None):
a number followed by ``\\frac`` (a mixed number: ``2\\frac{1}{2}`` is 5/2), ``a/b c`` (it reads
``1/2x`` as ``1/(2x)``), an unbraced multi-digit exponent or argument (``x^23``, ``\\sqrt12``),
chained ``^``, two adjacent numbers, unary minus after an operator.

A bare decimal against a constant expression follows math-verify's rule for floats (both sides
rounded to 6 decimals): ``3.14`` vs ``\\pi`` is not equal, ``0.5`` vs ``\\frac{\\sqrt{4}}{4}`` is.
Decimals anywhere else are left to math-verify.
"""

from __future__ import annotations

import functools
import re
from types import FunctionType
from typing import Any, Callable

import mpmath

_CTX = mpmath.MPContext()  # our own context: the precision never leaks into other mpmath users
_CTX.dps = 60
_EQUAL_TOL = _CTX.mpf("1e-40")
_DIFFERENT_TOL = _CTX.mpf("1e-9")
_MAX_EXPONENT = 64
_MAX_DIGITS = 40
_MAX_CHARS = 400
_VARIABLES = frozenset("abcdfghjklmnopqrstuvwxyz")  # not e (Euler's number), not i (imaginary unit)

# Three sample points; every variable has its own value at each (negative at the second).
_POINT_RNG_SEED = 20261125


def _points() -> list[dict[str, Any]]:
    import random

    rng = random.Random(_POINT_RNG_SEED)
    points = []
    for sign in (1, -1, 1):
        points.append({v: _CTX.mpf(sign) * _CTX.mpf(f"{rng.uniform(0.3, 3.3):.20f}") for v in sorted(_VARIABLES)})
    return points


_POINTS = _points()


class _Refuse(Exception):
    """The answer is outside the grammar (or a shape latex2sympy reads its own way)."""


# ---- tokens ------------------------------------------------------------------------------------
_TOKEN = re.compile(r"\s+|\\(?:left|right|displaystyle)(?![a-zA-Z])|\\[,;:! ]|\\q?quad(?![a-zA-Z])|~"
                    r"|(\d+)|([a-zA-Z])|\\([a-zA-Z]+)|([-+*/^(){}\[\]])")
_COMMANDS = {"frac": "frac", "dfrac": "frac", "tfrac": "frac", "sqrt": "sqrt", "pi": "pi", "cdot": "*", "times": "*"}


def _tokens(s: str) -> list[tuple[str, str]]:
    """``[(kind, text)]`` with kinds num, var, frac, sqrt, pi and the operator characters."""
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(s):
        m = _TOKEN.match(s, pos)
        if m is None:
            raise _Refuse
        pos = m.end()
        number, letter, command, op = m.groups()
        if number is not None:
            if len(number) > _MAX_DIGITS:
                raise _Refuse
            out.append(("num", number))
        elif letter is not None:
            if letter not in _VARIABLES:
                raise _Refuse
            out.append(("var", letter))
        elif command is not None:
            kind = _COMMANDS.get(command)
            if kind is None:
                raise _Refuse
            out.append((kind, command))
        elif op is not None:
            out.append((op, op))
    return out


# ---- parser: tokens -> evaluator ----------------------------------------------------------------
# An evaluator is a function of the point (variable -> value); constants are folded at parse time
# so a gold's constant parts cost nothing per point.
Evaluator = Callable[[dict[str, Any]], Any]


class _Parser:
    def __init__(self, tokens: list[tuple[str, str]]):
        self.tokens, self.i = tokens, 0
        self.variables: set[str] = set()

    def peek(self) -> str | None:
        return self.tokens[self.i][0] if self.i < len(self.tokens) else None

    def take(self, kind: str) -> str:
        if self.peek() != kind:
            raise _Refuse
        text = self.tokens[self.i][1]
        self.i += 1
        return text

    def parse(self) -> tuple[Evaluator | Any, frozenset[str]]:
        node = self.expr()
        if self.i != len(self.tokens):
            raise _Refuse
        return node, frozenset(self.variables)

    # expr := [+|-] term (('+'|'-') term)*
    def expr(self) -> Any:
        sign = 1
        if self.peek() in ("+", "-"):
            sign = -1 if self.take(self.peek()) == "-" else 1  # type: ignore[arg-type]
        node = self.term()
        if sign < 0:
            node = _neg(node)
        while self.peek() in ("+", "-"):
            op = self.take(self.peek())  # type: ignore[arg-type]
            if self.peek() in ("+", "-"):
                raise _Refuse  # "2+-3": latex2sympy's reading is not worth guessing
            right = self.term()
            node = _binary(node, right, op)
        return node

    # term := factor ((* | / | implicit) factor)*
    def term(self) -> Any:
        node, last_kind = self.factor()
        while True:
            kind = self.peek()
            if kind in ("*", "/"):
                self.take(kind)
                right, right_kind = self.factor()
                if kind == "/" and self.peek() not in (None, "+", "-", "*", "/", ")", "}", "]"):
                    raise _Refuse  # "1/2x" is 1/(2x) to latex2sympy
                node, last_kind = _binary(node, right, kind), right_kind
            elif kind in ("num", "var", "pi", "sqrt", "frac", "(", "{"):
                # latex2sympy's readings of adjacency, found by a differential test against it:
                # "2\frac{1}{2}" and "2 3", "(2)(3)", "3(4)" are sums (mixed numbers); "a(b)",
                # "x^{2}(y)" are function calls; "\frac{a}{b} 10" splits the digits. A product
                # stays only when the right factor is no number and a bracket holds a sum: "2(x+1)".
                if kind == "num" or (last_kind == "num" and kind == "frac"):
                    raise _Refuse
                if kind in ("(", "{") and not self.group_holds_sum():
                    raise _Refuse
                right, right_kind = self.factor()
                node, last_kind = _binary(node, right, "*"), right_kind
            else:
                return node

    def group_holds_sum(self) -> bool:
        """The bracket group starting at the next token has a binary + or - at its top level."""
        depth = 0
        for j in range(self.i, len(self.tokens)):
            kind = self.tokens[j][0]
            if kind in ("(", "{", "["):
                depth += 1
            elif kind in (")", "}", "]"):
                depth -= 1
                if depth == 0:
                    return False
            elif depth == 1 and kind in ("+", "-") and self.tokens[j - 1][0] not in ("(", "{", "[", "+", "-", "*", "/", "^"):
                return True
        return False

    # factor := primary ['^' exponent]
    def factor(self) -> tuple[Any, str]:
        kind = self.peek()
        node = self.primary()
        if self.peek() == "^":
            self.take("^")
            if self.peek() == "{":
                self.take("{")
                exponent = self.expr()
                self.take("}")
            elif self.peek() == "num":
                digits = self.take("num")
                if len(digits) != 1:
                    raise _Refuse  # "x^23" is x**23 to latex2sympy, x^2*3 to TeX
                exponent = _CTX.mpf(digits)
            else:
                raise _Refuse
            if self.peek() == "^":
                raise _Refuse
            node = _power(node, exponent)
            kind = "pow"
        return node, kind or ""

    def primary(self) -> Any:
        kind = self.peek()
        if kind == "num":
            return _CTX.mpf(self.take("num"))
        if kind == "var":
            name = self.take("var")
            self.variables.add(name)
            return lambda point, name=name: point[name]
        if kind == "pi":
            self.take("pi")
            return +_CTX.pi  # the constant's value at the context's precision
        if kind in ("(", "{"):
            self.take(kind)
            node = self.expr()
            self.take(")" if kind == "(" else "}")
            return node
        if kind == "frac":
            self.take("frac")
            return _binary(self.argument(), self.argument(), "/")
        if kind == "sqrt":
            self.take("sqrt")
            degree = 2
            if self.peek() == "[":
                self.take("[")
                degree = int(self.take("num"))
                self.take("]")
                if not 2 <= degree <= 10:
                    raise _Refuse
            return _root(self.argument(), degree)
        raise _Refuse

    def argument(self) -> Any:
        """A command's argument: ``{expr}`` or one digit / one letter (TeX's single token)."""
        kind = self.peek()
        if kind == "{":
            self.take("{")
            node = self.expr()
            self.take("}")
            return node
        if kind == "num":
            digits = self.take("num")
            if len(digits) != 1:
                raise _Refuse
            return _CTX.mpf(digits)
        if kind == "var":
            return self.primary()
        raise _Refuse


def _is_const(node: Any) -> bool:
    return not isinstance(node, FunctionType)  # mpmath's constants (pi) are callable too


def _check(value: Any) -> Any:
    if not _CTX.isfinite(value):
        raise ZeroDivisionError
    return value


def _neg(node: Any) -> Any:
    return -node if _is_const(node) else (lambda point: -node(point))


_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: _divide(a, b),
}


def _divide(a: Any, b: Any) -> Any:
    # A denominator that is (numerically) zero: a pole at this point, or 1/0 in the answer.
    if abs(b) <= _EQUAL_TOL * max(1, abs(a)):
        raise ZeroDivisionError
    return a / b


def _binary(left: Any, right: Any, op: str) -> Any:
    fn = _OPS[op]
    if _is_const(left) and _is_const(right):
        return fn(left, right)
    lf = (lambda point, c=left: c) if _is_const(left) else left
    rf = (lambda point, c=right: c) if _is_const(right) else right
    return lambda point: fn(lf(point), rf(point))


def _power(base: Any, exponent: Any) -> Any:
    if not _is_const(exponent):
        raise _Refuse  # x^{y}: not a polynomial-style power
    if _CTX.im(exponent) != 0:
        raise _Refuse
    n = _CTX.nint(exponent)
    if abs(exponent - n) > _EQUAL_TOL or abs(n) > _MAX_EXPONENT:
        raise _Refuse  # x^{1/2}, 2^{100}: fractional or large exponents go to math-verify
    n = int(n)

    def pw(value: Any) -> Any:
        if n < 0 and abs(value) <= _EQUAL_TOL:
            raise ZeroDivisionError
        return value ** n if n >= 0 else 1 / value ** (-n)

    if _is_const(base):
        return pw(base)
    return lambda point: pw(base(point))


def _root(node: Any, degree: int) -> Any:
    # Roots of constants only. A root of a variable expression is a branch function whose
    # identities hold on regions (sqrt{(x+5)^2} = x+5 only for x > -5) that no fixed set of sample
    # points covers; a rational function of the variables (constant algebraic coefficients) is
    # one analytic function, so its agreement at random points means identity.
    if not _is_const(node):
        raise _Refuse
    return _CTX.sqrt(node) if degree == 2 else _CTX.root(node, degree)  # principal roots, as sympy


# ---- public ------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=8192)
def parse(answer: str) -> tuple[tuple[Any, ...], frozenset[str]] | None:
    """The answer's values at the three sample points and its variables; None when the answer is
    outside the grammar or undefined at a sample point. Cached: a GRPO group scores one gold many
    times (and a repeated answer costs one lookup)."""
    if len(answer) > _MAX_CHARS or not answer:
        return None
    try:
        node, variables = _Parser(_tokens(answer)).parse()
        if _is_const(node):
            values = (_check(node),) * len(_POINTS)
        else:
            values = tuple(_check(node(point)) for point in _POINTS)
    except (_Refuse, ZeroDivisionError, ValueError, OverflowError, TypeError):
        return None
    return values, variables


_DECIMAL = re.compile(r"^\s*[+-]?\d+\.\d+\s*$")


def _decimal_vs_constant(decimal: str, other: str) -> bool | None:
    """math-verify's float rule: a bare decimal and a constant both rounded to 6 decimals."""
    parsed = parse(other)
    if parsed is None or parsed[1]:
        return None
    value = parsed[0][0]
    if _CTX.im(value) != 0:
        return None
    difference = abs(_CTX.mpf(decimal.strip()) - value)
    if difference > _CTX.mpf("2e-6"):
        return False  # rounded to 6 decimals they differ by at least 1e-6
    if difference <= _EQUAL_TOL and len(decimal.strip().split(".")[1]) <= 6:
        return True  # the same value, already on the 6-decimal grid: rounds alike
    return None


def symbolic_equivalence(gold: str, answer: str) -> bool | None:
    """True / False when the pair is decided by values (see the module docstring); None otherwise."""
    gold_decimal, answer_decimal = bool(_DECIMAL.match(gold)), bool(_DECIMAL.match(answer))
    if gold_decimal != answer_decimal:
        return _decimal_vs_constant(gold, answer) if gold_decimal else _decimal_vs_constant(answer, gold)
    gold_parsed = parse(gold)
    if gold_parsed is None:
        return None
    answer_parsed = parse(answer)
    if answer_parsed is None:
        return None
    (gold_values, gold_vars), (answer_values, answer_vars) = gold_parsed, answer_parsed
    equal_everywhere = True
    for g, a in zip(gold_values, answer_values):
        difference = abs(g - a)
        scale = max(1, abs(g), abs(a))
        if difference > _DIFFERENT_TOL * scale:
            return False
        if difference > _EQUAL_TOL * scale:
            equal_everywhere = False
    if not equal_everywhere:
        return None  # the grey zone: math-verify decides
    # math-verify compares an answer that is a lone symbol structurally (``x`` vs ``\frac{x^2}{x}``
    # is "not equal" there): leave any pair equal to a bare variable to it.
    for name in gold_vars | answer_vars:
        if all(abs(v - point[name]) <= _EQUAL_TOL * max(1, abs(v)) for v, point in zip(gold_values, _POINTS)):
            return None
    return True
