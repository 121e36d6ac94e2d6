"""Output comparison, done in the server — never trust a verdict printed in the sandbox.

stdin/stdout tests follow LiveCodeBench's ``grade_stdio``: strip the whole output, split
into lines, strip each line, require the same number of lines, and compare line by line;
a line that differs as text is accepted when both sides are the same sequence of numbers
(LCB uses exact ``Decimal`` equality, so ``1.0`` == ``1.00``; we add a float tolerance,
``float_tolerance`` in config, 0 = LCB-exact). Tokens are compared after splitting on
whitespace, so ``"1  2"`` equals ``"1 2"`` as LCB's numeric fallback already allows.

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


def _close(a: Decimal, b: Decimal, tolerance: float) -> bool:
    if a == b:
        return True
    return tolerance > 0 and math.isclose(float(a), float(b), rel_tol=tolerance, abs_tol=tolerance)


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
        if not all(_close(a, b, tolerance) for a, b in zip(got_nums, want_nums)):
            return False
    return True


def _values_equal(got: Any, want: Any, tolerance: float) -> bool:
    if isinstance(got, bool) or isinstance(want, bool):
        return got is want if isinstance(got, bool) and isinstance(want, bool) else False
    if isinstance(got, (int, float)) and isinstance(want, (int, float)):
        if got == want:
            return True
        either_float = isinstance(got, float) or isinstance(want, float)
        return tolerance > 0 and either_float and math.isclose(got, want, rel_tol=tolerance, abs_tol=tolerance)
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
