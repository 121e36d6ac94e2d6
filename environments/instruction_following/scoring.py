"""Strict and loose following, as IFEval's ``evaluation_lib`` defines them.

Strict: the instruction holds on the raw response (an empty response follows nothing; "empty"
after removing invisible characters, servers/answer_text.py).
Loose: it holds on any of 8 variants: the response with its first line, last line or both
removed, each with and without markdown ``*`` (models wrap answers in a preamble line, an
outro line or bold markers that an exact checker would trip on).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from environments.instruction_following.registry import InstructionSpec
from servers.answer_text import is_blank


def loose_variants(response: str) -> list[str]:
    lines = response.split("\n")
    no_first = "\n".join(lines[1:]).strip()
    no_last = "\n".join(lines[:-1]).strip()
    no_both = "\n".join(lines[1:-1]).strip()
    unstarred = response.replace("*", "")
    return [response, unstarred, no_first, no_last, no_both,
            no_first.replace("*", ""), no_last.replace("*", ""), no_both.replace("*", "")]


@dataclass
class Outcome:
    strict: list[bool]
    loose: list[bool]


def evaluate(response: str, specs: list[InstructionSpec], bound: list[dict[str, Any]]) -> Outcome:
    strict: list[bool] = []
    loose: list[bool] = []
    variants: list[str] | None = None  # built only when some strict check fails
    for spec, kwargs in zip(specs, bound):
        ok = not is_blank(response) and spec.check(response, kwargs)
        strict.append(ok)
        if not ok:
            if variants is None:
                variants = loose_variants(response)[1:]
            ok = any(not is_blank(v) and spec.check(v, kwargs) for v in variants)
        loose.append(ok)
    return Outcome(strict, loose)
