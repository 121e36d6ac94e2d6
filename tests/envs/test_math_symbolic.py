"""math's symbolic fast path (environments/math_grading/symbolic.py): it decides only what math-verify
decides the same way, refuses (None) the shapes latex2sympy reads its own way, and the verifier
labels what it decided ``scored_by: symbolic``."""

from __future__ import annotations

import random

import pytest

from environments.math_grading.scoring import library_score
from environments.math_grading.symbolic import parse, symbolic_equivalence
from servers import registry
from servers.service import EnvService
from servers.wire import response_from_text

DECIDED = [
    ("\\frac{1}{2}", "0.5", True),
    ("\\frac{1}{2}", "\\frac{2}{4}", True),
    ("\\sqrt{8}", "2\\sqrt{2}", True),
    ("3.14", "\\pi", False),
    ("\\pi", "3.14", False),
    ("\\frac{1}{3}", "0.333", False),
    ("(x+1)(x+2)", "x^2+3x+2", True),
    ("(x+1)(x+2)", "x^2+3x+3", False),
    ("\\frac{x^2-1}{x-1}", "x+1", True),
    ("\\frac{20}{\\sqrt{5}}", "4\\sqrt{5}", True),
    ("\\sqrt{3+2\\sqrt{2}}", "1+\\sqrt{2}", True),
    ("2\\pi r", "\\pi r\\cdot 2", True),
    ("y+1", "x+1", False),
    ("\\left(x+1\\right)^2", "x^2+2x+1", True),
    ("\\sqrt[3]{-8}", "-2", False),  # the principal cube root of -8 is complex, as in sympy
    ("\\dfrac{a}{b}", "\\frac{2a}{2b}", True),
]

REFUSED = [
    ("2\\frac{1}{2}", "\\frac{5}{2}"),  # a mixed number to latex2sympy
    ("1/2x", "\\frac{1}{2x}"),  # 1/(2x) to latex2sympy
    ("x^23", "x^{23}"),  # unbraced multi-digit exponent
    ("a(b)", "ab"),  # a function call to latex2sympy
    ("3(4)", "12"),  # a sum (7) to latex2sympy
    ("x", "\\frac{x^2}{x}"),  # a bare symbol is compared structurally by math-verify
    ("\\sqrt{(x+5)^2}", "x+5"), ("\\sqrt{x^2y^2}", "xy"), ("\\sqrt{x^2}", "x"),  # roots of variables:
    # equal on regions only (x > -5; x, y of one sign), which fixed sample points cannot cover
    ("\\sqrt{2}", "1.414214"),  # within math-verify's 6-decimal rounding: its call
    ("(1,2]", "(1,2]"), ("\\{1,2\\}", "\\{2,1\\}"), ("(1,2)", "(2,1)"),  # intervals, sets, tuples
    ("e^{2}", "e^2"), ("2i", "i+i"), ("X+1", "x+1"),  # e, i, capitals have their own meanings
    ("x^{y}", "x^y"), ("2^{1/2}", "\\sqrt{2}"), ("(x+1)^{3000}", "(x+1)^{3000}"),  # non-integer / huge powers
    ("\\frac{1}{x-x}", "1"),  # undefined
    ("50\\%", "0.5"), ("x=2", "2"), ("\\sin x", "\\sin(x)"),
]


@pytest.mark.parametrize("gold,answer,expected", DECIDED)
def test_decides_like_math_verify(gold: str, answer: str, expected: bool):
    assert symbolic_equivalence(gold, answer) is expected
    assert (library_score(gold, answer)[0] == 1.0) is expected  # math-verify's own verdict


@pytest.mark.parametrize("gold,answer", REFUSED)
def test_refuses_what_it_cannot_decide_exactly(gold: str, answer: str):
    assert symbolic_equivalence(gold, answer) is None


def test_gold_parse_is_cached():
    parse.cache_clear()
    symbolic_equivalence("(x+3)(x+4)", "x^2+7x+12")
    symbolic_equivalence("(x+3)(x+4)", "x^2+7x+13")
    info = parse.cache_info()
    assert info.hits >= 1 and info.currsize == 3


def _random_expression(rng: random.Random, depth: int = 0) -> str:
    def atom() -> str:
        r = rng.random()
        if r < 0.4:
            return str(rng.randint(1, 9))
        if r < 0.75:
            return rng.choice("xyab")
        if r < 0.8:
            return "\\pi"
        return f"({_random_expression(rng, depth + 1)})" if depth < 2 else "x"

    def factor() -> str:
        r = rng.random()
        base = (f"\\sqrt{{{_random_expression(rng, depth + 1)}}}" if r < 0.15 and depth < 2 else
                f"\\frac{{{_random_expression(rng, depth + 1)}}}{{{_random_expression(rng, depth + 1)}}}"
                if r < 0.3 and depth < 2 else atom())
        return f"{base}^{{{rng.randint(-2, 3)}}}" if rng.random() < 0.25 else base

    terms = []
    for _ in range(rng.randint(1, 3 if depth == 0 else 2)):
        parts = [factor() for _ in range(rng.randint(1, 2))]
        terms.append("\\cdot ".join(parts) if parts[-1][0].isdigit() else "".join(parts))
    return ("-" if rng.random() < 0.15 else "") + "".join(
        (rng.choice("+-") if i else "") + t for i, t in enumerate(terms))


def test_differential_against_math_verify():
    """Seeded random small expressions, each against a changed copy and against math-verify's own
    sympy rewrite of it: every pair the fast path decides, math-verify decides the same way."""
    import sympy

    from environments.math_grading.scoring import parse_prediction

    rng = random.Random(17)
    decided = 0
    for _ in range(40):
        gold = _random_expression(rng)
        parsed = parse_prediction(gold)
        answers = [gold + "+1"]
        if parsed and isinstance(parsed[0], sympy.Expr) and len(gold) < 40:
            answers.append(sympy.latex(sympy.expand(parsed[0])))
        for answer in answers:
            fast = symbolic_equivalence(gold, answer)
            if fast is None:
                continue
            decided += 1
            assert fast == (library_score(gold, answer)[0] == 1.0), (gold, answer, fast)
    assert decided >= 20  # the generator's shapes are mostly inside the grammar


def _row(gold: str, text: str) -> dict:
    return {"responses_create_params": {"input": [{"role": "user", "content": "q"}]}, "question": "q",
            "expected_answer": gold, "response": response_from_text(text)}


async def test_verifier_labels_symbolic_verdicts_and_can_turn_them_off():
    env = registry.instantiate("math", overrides={"cpu_workers": 1})
    service = EnvService(env)
    await service.start()
    off = registry.instantiate("math", overrides={"cpu_workers": 1, "symbolic_fast_path": False})
    service_off = EnvService(off)
    await service_off.start()
    try:
        status, reply = await service.verify(_row("2\\sqrt{2}", "so \\boxed{\\sqrt{8}}"))
        assert status == 200 and reply["reward"] == 1.0 and reply["scored_by"] == "symbolic"
        status, reply = await service.verify(_row("(x+1)(x+2)", "\\boxed{x^2+3x+3}"))
        assert reply["reward"] == 0.0 and reply["scored_by"] == "symbolic" and reply["library_reward"] == 0.0
        status, reply = await service.verify(_row("x", "\\boxed{\\frac{x^2}{x}}"))  # refused: math-verify decides
        assert reply["scored_by"] == "math_verify" and reply["reward"] == 0.0
        status, reply = await service_off.verify(_row("2\\sqrt{2}", "so \\boxed{\\sqrt{8}}"))
        assert reply["reward"] == 1.0 and reply["scored_by"] == "math_verify"
    finally:
        await service.stop()
        await service_off.stop()
