"""Answers whose scoring would cost more than any honest answer: refused before math-verify.

math-verify (sympy underneath) evaluates what an answer writes: ``\\boxed{9^{9^{9^{9}}}}`` makes it
compute a number with more digits than there are atoms in the universe, ``\\boxed{100000000!}``
a factorial of 10^8, ``(x+y+z+w+1)^{30}`` an expansion of 46,376 terms, and answers nested 20
deep make its parser backtrack for minutes. Before this guard such an answer ran into the 10 s
deadline and came back as a masked ``timeout``: a wrong answer escaped its zero, and cost 10 s of
CPU each time. A cost the response causes is the response's: :func:`costly_answer` names the
reason and the answer scores 0 (``scored_by: refused_costly``) without reaching math-verify.

The checks read the answer once, in microseconds (event loop, no sympy):

* :func:`oversized_answer`, before any parsing (the fast paths included): length over
  ``max_chars``, bracket nesting deeper than ``max_nesting``;
* :func:`costly_answer`, before math-verify (the fast paths compute no large number): a small
  recursive reading of the arithmetic (numbers, ``+ - * / ^ **``, ``!``, ``!!``, groups,
  ``\\frac``, ``\\sqrt``, ``\\binom``, ``\\Gamma``, ``\\sum``/``\\prod`` bounds) that estimates the size
  of every number sympy would compute exactly: a power or factorial with more than ``max_digits``
  digits, a power of a sum that expands to more than ``max_expansion_terms`` terms, a sum or
  product over more than ``max_range`` terms. Symbols stay symbols (``x^{1000000}`` is cheap).

The limits are far above any answer of the math datasets (the largest gold in this repo is
``(2+\\sqrt{3})^{2016}``: 2,017 expansion terms, 1,153 digits) and below the sizes that took
math-verify seconds in trials on the development machine (tests/adversarial/test_math.py holds
both sides: the attacks are refused, the hard real answers score). What the guard does not foresee
still meets the deadline, where the CPU the worker spent decides whose fault it was
(``verifier.score_final_answer``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from servers.environment import DeadlineCostConfig

_TOKEN = re.compile(r"\d+(?:\.\d+)?|\\[a-zA-Z]+|\*\*|!!|\S")
_DROP = re.compile(r"\\(?:left|right|big|Big|bigg|Bigg|displaystyle|textstyle|limits|nolimits)\b|\\[,;:! ]|~")
_TEXT_ARG = re.compile(r"\\(?:text|mathrm|textbf|mbox|operatorname|mathbf|textit)\s*\{[^{}]*\}")
_OPEN, _CLOSE = "({[", ")}]"
_FRACS = {"\\frac", "\\dfrac", "\\tfrac", "\\cfrac"}
_TIMES = {"*", "\\cdot", "\\times"}


class CostLimits(BaseModel):
    """The guard's limits: config key ``answer_limits`` of math and math_python."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_chars: int = Field(1000, ge=1, description="Longest answer scored; longer scores 0.")
    max_nesting: int = Field(12, ge=1, description="Deepest bracket nesting scored (math-verify's parser backtracks "
                                                   "on deeply nested input).")
    max_digits: int = Field(100_000, ge=1, description="Largest number (in digits) an answer may make sympy compute "
                                                       "exactly: powers, factorials, binomials.")
    max_expansion_terms: int = Field(10_000, ge=1, description="Largest expansion of a power of a sum, (a+b+c)^n.")
    max_range: int = Field(10_000, ge=1, description="Most terms of a \\sum or \\prod with a numeric bound.")


class AnswerCostConfig(DeadlineCostConfig):
    """Config keys of the environments scoring answers with math-verify (math, math_python)."""

    answer_limits: CostLimits = Field(
        default_factory=CostLimits, description="An extracted answer past one of these limits scores 0 "
                                                "(scored_by refused_costly) without reaching math-verify.")


class _Costly(Exception):
    """The answer asks for more work than the limits allow (the message says which)."""


@dataclass(frozen=True)
class _Value:
    """What the reading knows of a sub-expression: ``mag`` = log10 of its size when it is a
    number (None: it has symbols, or the reading cannot tell), ``terms`` = additive terms."""

    mag: float | None
    terms: int = 1


_SYMBOL = _Value(None)


def nesting_depth(text: str) -> int:
    depth = deepest = 0
    for ch in text:
        if ch in _OPEN:
            depth += 1
            deepest = max(deepest, depth)
        elif ch in _CLOSE:
            depth = max(0, depth - 1)
    return deepest


def oversized_answer(answer: str, limits: CostLimits = CostLimits()) -> str | None:
    """Why ``answer`` is too long or too deeply nested to read at all (checked before any parsing,
    the fast paths included), or None."""
    if len(answer) > limits.max_chars:
        return f"the answer has {len(answer)} characters (limit {limits.max_chars})"
    brackets = sum(answer.count(ch) for ch in _OPEN)
    if brackets > limits.max_nesting and (depth := nesting_depth(answer)) > limits.max_nesting:
        return f"the answer nests brackets {depth} deep (limit {limits.max_nesting})"
    return None


def costly_answer(answer: str, limits: CostLimits = CostLimits()) -> str | None:
    """Why scoring ``answer`` with math-verify would cost more than the limits allow, or None when
    it is fine: :func:`oversized_answer`, then the sizes of the numbers it makes sympy compute."""
    if (oversized := oversized_answer(answer, limits)) is not None:
        return oversized
    if not any(mark in answer for mark in ("^", "!", "*", "\\binom", "\\Gamma", "\\sum", "\\prod")):
        return None  # nothing that makes sympy compute a large number
    tokens = _TOKEN.findall(_TEXT_ARG.sub(" t ", _DROP.sub(" ", answer)))
    try:
        _Reader(tokens, limits).read_all()
    except _Costly as exc:
        return str(exc)
    except RecursionError:  # a chain like 9^9^9^... hundreds long: deeper than any honest answer
        return "the answer chains operators too deep to read"
    return None


class _Reader:
    """Recursive descent over the tokens; anything it does not know separates expressions."""

    def __init__(self, tokens: list[str], limits: CostLimits):
        self.tokens, self.pos, self.limits = tokens, 0, limits
        self.max_mag = math.log10(limits.max_digits)

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> str:
        self.pos += 1
        return self.tokens[self.pos - 1]

    def read_all(self) -> None:
        while self.pos < len(self.tokens):
            start = self.pos
            self.expr()
            if self.pos == start:
                self.pos += 1  # a separator (",", "=", "<", "&", an unknown symbol)

    def expr(self) -> _Value:
        values = [self.term()]
        while self.peek() in ("+", "-"):
            self.take()
            values.append(self.term())
        if len(values) == 1:
            return values[0]
        known = [v.mag for v in values]
        mag = None if None in known else max(known) + math.log10(len(values))  # type: ignore[type-var]
        return _Value(mag, sum(v.terms for v in values))

    def term(self) -> _Value:
        value = self.unary()
        while True:
            token = self.peek()
            if token in _TIMES or token == "/":
                self.take()
                right = self.unary()
                value = self.combine(value, right, divide=token == "/")
            elif token is not None and self.starts_atom(token):
                value = self.combine(value, self.unary(), divide=False)  # implicit product
            else:
                return value

    def combine(self, left: _Value, right: _Value, *, divide: bool) -> _Value:
        if left.mag is None or right.mag is None:
            mag = None
        else:
            mag = left.mag - right.mag if divide else left.mag + right.mag
        return _Value(mag, 1 if divide else left.terms * right.terms)

    def unary(self) -> _Value:
        while self.peek() in ("-", "+"):
            self.take()
        return self.postfix(self.atom())

    def postfix(self, value: _Value) -> _Value:
        while True:
            token = self.peek()
            if token in ("^", "**"):
                self.take()
                value = self.power(value, self.unary() if token == "**" else self.atom_with_postfix())
            elif token in ("!", "!!"):
                self.take()
                value = self.factorial(value, double=token == "!!")
            elif token == "_":
                self.take()
                self.atom()  # a subscript: x_{1}
            else:
                return value

    def atom_with_postfix(self) -> _Value:
        # ^ binds its argument tightly in LaTeX (x^{a}! is (x^a)!), but a plain chain 2^3^4 is a tower
        value = self.atom()
        return self.postfix(value) if self.peek() in ("^", "**") else value

    def starts_atom(self, token: str) -> bool:
        return token[0].isdigit() or token[0].isalpha() or token in _OPEN[:2] or \
            (token.startswith("\\") and token not in _TIMES)

    def atom(self) -> _Value:
        token = self.peek()
        if token is None:
            return _SYMBOL
        if token[0].isdigit():
            self.take()
            whole = token.split(".")[0].lstrip("0")
            return _Value(len(whole) - 1 + math.log10(int(whole[:15])) - (len(whole[:15]) - 1) if whole else 0.0)
        if token in _OPEN:
            self.take()
            inner = self.expr()
            while self.peek() is not None and self.peek() not in _CLOSE:
                self.take()  # the rest of a tuple or interval: read, not valued
                self.expr()
            if self.peek() is not None:
                self.take()
            return inner
        if token in _FRACS:
            self.take()
            top, bottom = self.atom(), self.atom()
            return self.combine(top, bottom, divide=True)
        if token == "\\sqrt":
            self.take()
            degree = 2.0
            if self.peek() == "[":
                index = self.atom()
                degree = 10 ** index.mag if index.mag is not None and index.mag < 6 else 2.0
            inside = self.atom()
            return _Value(None if inside.mag is None else inside.mag / max(degree, 1.0), inside.terms)
        if token == "\\binom":
            self.take()
            n, k = self.atom(), self.atom()
            if n.mag is not None:
                digits = (10 ** min(n.mag, 300)) * math.log10(2)
                if k.mag is not None:
                    digits = min(digits, (10 ** min(k.mag, 300)) * max(n.mag, 0.0))
                self.check_digits(digits, "a binomial coefficient")
                return _Value(digits)  # log10 of the value: its number of digits
            return _SYMBOL
        if token == "\\Gamma":
            self.take()
            return self.factorial(self.atom(), double=False)
        if token in ("\\sum", "\\prod"):
            self.take()
            self.big_operator(token)
            return _SYMBOL
        if token.startswith("\\") or token[0].isalpha():
            self.take()
            return _SYMBOL  # a symbol, a constant, a function name: its arguments are read next
        return _SYMBOL  # not an atom: the caller treats it as a separator

    def big_operator(self, name: str) -> None:
        bounds: list[_Value] = []
        while self.peek() in ("_", "^"):
            self.take()
            bounds.append(self.atom())
        upper = bounds[-1] if bounds else _SYMBOL
        if upper.mag is not None and upper.mag > math.log10(self.limits.max_range):
            raise _Costly(f"a {name[1:]} over about 10^{upper.mag:.0f} terms (limit {self.limits.max_range})")

    def power(self, base: _Value, exponent: _Value) -> _Value:
        if exponent.mag is None:
            return _SYMBOL
        if exponent.mag > 300:
            raise _Costly(f"a power with an exponent of about 10^{exponent.mag:.3g}")
        times = 10 ** exponent.mag
        if base.terms > 1:
            terms = math.comb(int(times) + base.terms - 1, base.terms - 1) if times < 10 ** 7 else math.inf
            if terms > self.limits.max_expansion_terms:
                raise _Costly(f"a power of a {base.terms}-term sum that expands to about {terms:.3g} terms "
                              f"(limit {self.limits.max_expansion_terms})")
        if base.mag is None:
            return _Value(None, base.terms)
        digits = times * abs(base.mag)  # (1/2)^n has a denominator as long as 2^n
        self.check_digits(digits, "a power")
        return _Value(digits, base.terms)

    def factorial(self, operand: _Value, *, double: bool) -> _Value:
        if operand.mag is None:
            return _SYMBOL
        if operand.mag > 300:
            raise _Costly(f"a factorial of a number of about 10^{operand.mag:.3g}")
        n = 10 ** operand.mag
        digits = n * math.log10(max(n, 2.0)) / (2 if double else 1)
        self.check_digits(digits, "a factorial")
        return _Value(digits)

    def check_digits(self, digits: float, what: str) -> None:
        if digits > self.limits.max_digits:
            raise _Costly(f"{what} with about {digits:.3g} digits (limit {self.limits.max_digits})")
