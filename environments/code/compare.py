"""Output comparison, done in the server — never trust a verdict printed in the sandbox.

stdin/stdout tests follow LiveCodeBench's ``grade_stdio``: strip the whole output, split
into lines, strip each line, require the same number of lines, and compare line by line;
a line that differs as text is accepted when both sides are the same sequence of numbers
(LCB uses exact ``Decimal`` equality, so ``1.0`` == ``1.00``; we add a float tolerance,
``float_tolerance`` in config, 0 = LCB-exact). Tokens are compared after splitting on
whitespace, so ``"1  2"`` equals ``"1 2"`` as LCB's numeric fallback already allows.

The tolerance applies only where the *expected* value is a real number (written with a
decimal point or an exponent; a JSON float): an integer answer is exact, so a program that
prints 1000000008 for 1000000007 is wrong however small the relative error. The
comparison is done in ``Decimal``, so numbers beyond float range are never "close" by both
overflowing to infinity.

Call-based tests (``fn_name``) follow LCB's ``grade_call_based``: the expected output is
JSON, the program's return value is JSON-encoded by the harness; tuples become lists; equal
values pass, and floats pass within the tolerance.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal, InvalidOperation
from typing import Any


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.strip().split("\n")]


def _numbers(tokens: list[str]) -> list[Decimal] | None:
    try:
        values = [Decimal(token) for token in tokens]
    except (InvalidOperation, ValueError):
        return None
    return values if all(v.is_finite() for v in values) else None


def _is_integer_literal(token: str) -> bool:
    return not any(ch in token for ch in ".eE")


def _close(got: Decimal, want: Decimal, tolerance: float, *, want_is_real: bool) -> bool:
    """Equal, or (for a real-valued expected number) within ``tolerance``, absolute or relative."""
    if got == want:
        return True
    if tolerance <= 0 or not want_is_real:
        return False
    tol = Decimal(repr(tolerance))
    return abs(got - want) <= max(tol, tol * max(abs(got), abs(want)))


def stdio_matches(got: str, expected: str, *, tolerance: float = 1e-6) -> bool:
    got_lines, want_lines = _lines(got), _lines(expected)
    if len(got_lines) != len(want_lines):
        return False
    for got_line, want_line in zip(got_lines, want_lines):
        if got_line == want_line:
            continue
        got_tokens, want_tokens = got_line.split(), want_line.split()
        if got_tokens == want_tokens:
            continue
        if len(got_tokens) != len(want_tokens):
            return False
        got_nums, want_nums = _numbers(got_tokens), _numbers(want_tokens)
        if got_nums is None or want_nums is None:
            return False
        if not all(_close(a, b, tolerance, want_is_real=not _is_integer_literal(token))
                   for a, b, token in zip(got_nums, want_nums, want_tokens)):
            return False
    return True


def _values_equal(got: Any, want: Any, tolerance: float) -> bool:
    if isinstance(got, bool) or isinstance(want, bool):
        return got is want if isinstance(got, bool) and isinstance(want, bool) else False
    if isinstance(got, (int, float)) and isinstance(want, (int, float)):
        if got == want:
            return True
        if any(isinstance(v, float) and not math.isfinite(v) for v in (got, want)):
            return False  # inf/nan: only equal values (handled above) pass
        # Decimal(float) is exact: no overflow for huge ints, no false match between infinities.
        return _close(Decimal(got), Decimal(want), tolerance, want_is_real=isinstance(want, float))
    if isinstance(got, list) and isinstance(want, list):
        return len(got) == len(want) and all(_values_equal(a, b, tolerance) for a, b in zip(got, want))
    if isinstance(got, dict) and isinstance(want, dict):
        return got.keys() == want.keys() and all(_values_equal(got[k], want[k], tolerance) for k in got)
    return got == want


def call_matches(got_json: str, expected: str, *, tolerance: float = 1e-6) -> bool:
    """``got_json``: the harness's JSON of the return value; ``expected``: the row's output string."""
    try:
        got = json.loads(got_json)
    except (ValueError, TypeError):
        return False
    try:
        want = json.loads(expected)
    except ValueError:
        # A few rows store a bare non-JSON string; compare as text like LCB's fallback.
        return isinstance(got, str) and got.strip() == expected.strip()
    return _values_equal(got, want, tolerance)
