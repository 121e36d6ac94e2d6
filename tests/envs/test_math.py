"""math: extraction rules, every answer family, the fast path, caches, and the deadline."""

from __future__ import annotations

import os
import signal

import pytest

from environments.math.extract import answer_line, extract_answer, is_incomplete, last_boxed, last_plain_number
from environments.math.notation import inequality_to_interval, repeating_decimal, rewrite_pair, split_plain_unit
from environments.math.scoring import (as_rational, fast_equivalence, library_score, normalize, parse_gold,
                                       plain_math_verify, strip_math_delimiters)
from servers import registry
from servers.service import EnvService
from servers.wire import ResponseObject, response_from_text


# ---- extraction ------------------------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    ("so \\boxed{5}", "5"),
    ("first \\boxed{1} then \\boxed{2}", "2"),  # the LAST box
    ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),  # nested braces
    ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),  # literal set braces
    ("\\fbox{7}", "7"),
    ("\\boxed{3} and finally \\fbox{4}", "4"),
    ("\\boxed 5 is it", "5"),
    ("\\boxed{2} then an unclosed \\boxed{3", "2"),
    ("no box here", None),
])
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("work...\nAnswer: 42", "42"),
    ("Final answer: $x^2$.", "x^2"),
    ("The final answer is 7.", "7"),
    ("answer: 1\nmore thinking\nFinal Answer: 2", "2"),
    ("no such line", None),
])
def test_answer_line(text, expected):
    assert answer_line(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("the roots are 2 and -3", "-3"),
    ("total 1,000 apples", "1,000"),
    ("it is 2.5 metres", "2.5"),
    ("ratio 3/4", "3/4"),
    ("x2 and y", None),  # digits inside words are not numbers
])
def test_last_plain_number(text, expected):
    assert last_plain_number(text) == expected


def test_extract_answer_rule_order_and_config():
    assert extract_answer("Answer: 3 but \\boxed{4}") == ("4", "boxed")
    assert extract_answer("Answer: \\boxed{5}", ("answer_line",)) == ("5", "answer_line")
    assert extract_answer("ends with 9") == (None, "none")  # last_number is opt-in
    assert extract_answer("ends with 9", ("boxed", "answer_line", "last_number")) == ("9", "last_number")
    assert extract_answer("ends with 9", ("boxed",)) == (None, "none")
    assert extract_answer("\\boxed{}  nothing") == (None, "none")


def test_truncated_response_is_not_scored_by_a_guess():
    """A response cut off mid-reasoning: no last-number guess, no unfinished answer line."""
    rules = ("boxed", "answer_line", "last_number")
    cut = "32^2 = 1024, 33^2 = 1089.\nAnswer: 3"  # "Answer: 33" cut after one digit
    assert extract_answer(cut, rules) == ("3", "answer_line")
    assert extract_answer(cut, rules, incomplete=True) == (None, "none")
    assert extract_answer("Answer: 33\nchecking again: 33^2 = 10", rules, incomplete=True) == ("33", "answer_line")
    assert extract_answer("so \\boxed{33}. Checking: 33^2 = 10", rules, incomplete=True) == ("33", "boxed")
    assert extract_answer("so \\boxed{33", rules, incomplete=True) == (None, "none")  # unclosed box
    assert is_incomplete(ResponseObject.model_validate({**response_from_text("x"), "status": "incomplete"}))
    assert not is_incomplete(ResponseObject.model_validate(response_from_text("x")))


# ---- equivalence per answer family ------------------------------------------------------
@pytest.mark.parametrize("gold, pred, ok", [
    ("32", "32", True), ("32", "33", False),  # integers
    ("\\frac{1}{2}", "0.5", True), ("\\frac{333}{1997}", "333/1997", True), ("\\dfrac{3}{4}", "0.75", True),  # fractions
    ("2.50", "2.5", True), ("0.333", "1/3", False),  # decimals
    ("50\\%", "0.5", True), ("0.5", "50\\%", True),  # percentages
    ("\\sqrt{2}", "2^{1/2}", True), ("\\frac{\\pi}{2}", "\\pi/2", True), ("\\sqrt{2}", "\\sqrt{3}", False),  # LaTeX
    ("(1,2]", "(1, 2]", True), ("[1,2)", "(1,2]", False),  # intervals
    ("\\{1,2,3\\}", "\\{3,2,1\\}", True), ("\\{1,2\\}", "\\{1,3\\}", False),  # sets
    ("(1,2,3)", "(1, 2, 3)", True), ("(1,2,3)", "(1,3,2)", False),  # tuples
    ("x^2+2x+1", "(x+1)^2", True), ("x^2+1", "(x+1)^2", False),  # expressions
    ("10 \\text{ cm}", "10", True), ("5\\text{ meters}", "5", True),  # units
    ("60^\\circ", "60", True), ("30", "30^{\\circ}", True),  # degrees
    ("5", "x = 5", True),  # equations against a value
    ("\\(\\sqrt{2}\\)", "\\sqrt{2}", True),  # gold in math delimiters, as in NeMo-Gym rows
])
def test_answer_families(gold, pred, ok):
    reward, error = library_score(gold, pred)
    assert error is None
    assert reward == (1.0 if ok else 0.0)
    # the fast path never contradicts math-verify: it decides the same or defers
    decided = fast_equivalence(gold, pred)
    assert decided is None or decided == ok


# ---- notations math-verify alone misses (notation.py + the complex check) -----------------
@pytest.mark.parametrize("gold, pred, ok", [
    # repeating decimals
    ("\\frac{1}{3}", "0.\\overline{3}", True), ("\\frac{1}{3}", "0.(3)", True), ("\\frac{1}{3}", "0.333...", True),
    ("0.\\overline{3}", "1/3", True), ("\\frac{1}{3}", "0.\\bar{3}", True), ("\\frac{1}{7}", "0.\\overline{142857}", True),
    ("\\frac{5}{6}", "0.8\\overline{3}", True), ("\\frac{1}{6}", "0.1666\\ldots", True), ("1", "0.\\overline{9}", True),
    ("-\\frac{2}{3}", "-0.(6)", True),
    ("\\frac{1}{3}", "0.3333", False), ("\\frac{1}{3}", "0.3...", False), ("\\frac{1}{3}", "0.(4)", False),
    ("\\frac{2}{3}", "0.\\overline{3}", False), ("\\frac{1}{3}", "0.\\overline{3}4", False),
    # degree signs and units
    ("90^\\circ", "90°", True), ("90", "90°", True), ("90", "90 °C", True), ("90", "90\\degree", True), ("60", "60^o", True),
    ("45°", "45", True), ("90", "91°", False), ("45°", "46", False),
    ("5", "5 cm", True), ("5", "5 m/s", True), ("5 m/s", "5", True), ("5", "5 km/h", True), ("12", "12 dollars", True),
    ("5", "5 cm.", True), ("5", "5 \\text{ units}", True), ("3 cm^2", "3", True),
    ("5", "6 m/s", False), ("5 m/s", "5 km/h", False), ("5", "5x", False), ("5", "5 pi", False), ("5", "5 i", False),
    # complex numbers as one fraction vs split
    ("\\frac{1+i}{2}", "\\frac{1}{2}+\\frac{i}{2}", True), ("\\frac{1+i}{2}", "0.5+0.5i", True),
    ("\\frac{3-4i}{5}", "\\frac{3}{5}-\\frac{4}{5}i", True), ("\\frac{1}{1-i}", "\\frac{1+i}{2}", True),
    ("(1+i)/2", "1/2 + i/2", True),
    ("\\frac{1+i}{2}", "\\frac{1-i}{2}", False), ("\\frac{1+i}{2}", "\\frac{1}{2}", False), ("2i", "2", False),
    # solution sets: inequalities vs intervals, both directions
    ("(2,\\infty)", "x>2", True), ("x>2", "(2,\\infty)", True), ("[1,3)", "1\\le x<3", True), ("1 \\leq x < 3", "[1,3)", True),
    ("(-\\infty, 2]", "x\\le 2", True), ("[2,\\infty)", "2 \\le x", True), ("(1,3]", "3\\ge x>1", True),
    ("(-\\infty,-1)\\cup(2,\\infty)", "x<-1 \\text{ or } x>2", True),
    ("(2,\\infty)", "x \\geq 2", False), ("[1,3)", "1<x\\le 3", False), ("(2,\\infty)", "x<2", False), ("2", "x>2", False),
    ("(-\\infty,-1)\\cup(2,\\infty)", "x<-1 \\text{ or } x>3", False),
])
async def test_notation_equivalences_through_the_verifier(gold, pred, ok):
    env = registry.instantiate("math")  # no pool: self.cpu runs math-verify inline
    row = _row(gold, f"so \\boxed{{{pred}}}")
    verdict = await env.verify(env.Row.model_validate(row), ResponseObject.model_validate(row["response"]), None)
    assert verdict.failure_class is None, verdict.failure_detail
    assert verdict.reward == (1.0 if ok else 0.0), (gold, pred, rewrite_pair(gold, pred))


def test_notation_rewrites_leave_other_answers_alone():
    assert repeating_decimal("0.125") is None and repeating_decimal("1.2.3") is None
    assert repeating_decimal("0.1212...") == "\\frac{4}{33}"
    assert inequality_to_interval("a<b") is None  # two letters: a comparison, not a solution set
    assert inequality_to_interval("x<y<z") is None and inequality_to_interval("1<x>3") is None
    assert inequality_to_interval("3 > x \\geq 1") == "[1,3)"
    assert split_plain_unit("5 apples") == ("5 apples", None) and split_plain_unit("2\\pi") == ("2\\pi", None)
    assert split_plain_unit("\\frac{1}{2} km/h") == ("\\frac{1}{2}", "km/h")
    assert rewrite_pair("5 m/s", "5 km/h") == ("5 m/s", "5 km/h")  # different units are not dropped
    assert rewrite_pair("\\(0.\\overline{3}\\)", "$x>2$") == ("\\frac{1}{3}", "(2,\\infty)")


def test_fast_path_decides_plain_numbers_and_identical_strings():
    assert fast_equivalence("32", "32") is True
    assert fast_equivalence("1000", "1,000") is True
    assert fast_equivalence("-3", "-3.0") is True
    assert fast_equivalence("\\frac{1}{2}", "1/2") is True
    assert fast_equivalence("\\(\\frac{a}{b}\\)", "\\frac{a}{b}") is True
    assert fast_equivalence("32", "33") is False
    assert fast_equivalence("0.5", "0.6") is None  # decimals defer to math-verify's rounding rules
    assert fast_equivalence("\\sqrt{2}", "2^{1/2}") is None
    assert as_rational("1/0") is None and as_rational("x") is None
    assert normalize("\\left( 1 ,\\, 2 \\right)") == "(1,2)"
    assert strip_math_delimiters("$$x$$") == "x" and strip_math_delimiters("\\[ y \\]") == "y"


def test_gold_parse_is_cached_and_bad_gold_reported():
    parse_gold.cache_clear()
    library_score("\\frac{7}{9}", "7/9")
    library_score("\\frac{7}{9}", "0.7")
    info = parse_gold.cache_info()
    assert info.misses == 1 and info.hits == 1
    reward, error = library_score("}{", "1")
    assert reward == 0.0 and "could not parse expected_answer" in error


def test_plain_math_verify_baseline_agrees():
    assert plain_math_verify("\\frac{1}{2}", "0.5") == 1.0
    assert plain_math_verify("32", "31") == 0.0


# ---- the environment -----------------------------------------------------------------------
def _row(gold: str, text: str) -> dict:
    return {"responses_create_params": {"input": [{"role": "user", "content": "q"}]}, "question": "q",
            "expected_answer": gold, "response": response_from_text(text)}


async def test_verify_inprocess_diagnostics_and_result_cache():
    env = registry.instantiate("math", overrides={"cpu_workers": 1})
    service = EnvService(env)
    await service.start()
    try:
        status, reply = await service.verify(_row("\\frac{1}{2}", "so \\boxed{0.5}"))
        assert status == 200 and reply["reward"] == 1.0
        assert reply["extracted_answer"] == "0.5" and reply["expected_answer"] == "\\frac{1}{2}"
        assert reply["library_reward"] == 1.0 and reply["scored_by"] == "exact"
        status, reply = await service.verify(_row("\\sqrt{2}", "\\boxed{2^{1/2}}"))
        assert reply["reward"] == 1.0 and reply["scored_by"] == "math_verify"
        assert env._results.get(("\\sqrt{2}", "2^{1/2}")) == (1.0, "math_verify", None)
        status, reply = await service.verify(_row("7", "nothing to see"))
        assert reply["reward"] == 0.0 and reply["extracted_answer"] is None
        status, reply = await service.verify(_row(7, "\\boxed{7}"))  # numeric gold in the row
        assert status == 200 and reply["reward"] == 1.0
    finally:
        await service.stop()


async def test_incomplete_response_over_the_wire_and_last_number_opt_in():
    env = registry.instantiate("math", overrides={"cpu_workers": 1,
                                                  "extraction": ["boxed", "answer_line", "last_number"]})
    service = EnvService(env)
    await service.start()
    try:
        _, reply = await service.verify(_row("-3", "the only real root is x = -3"))
        assert (reply["reward"], reply["extraction_rule"]) == (1.0, "last_number")  # opted in, completed
        truncated = _row("-3", "the only real root is x = -3")
        truncated["response"]["status"] = "incomplete"
        _, reply = await service.verify(truncated)
        assert reply["reward"] == 0.0 and reply["extracted_answer"] is None and reply["response_incomplete"]
        assert "_ng_failure_class" not in reply  # a truncated answer is wrong, not unscorable
    finally:
        await service.stop()
    default = registry.instantiate("math")
    assert "last_number" not in default.config.extraction


async def test_boxed_only_config_matches_nemo_gym_strictness():
    # No pool needed: without a server runtime, self.cpu runs inline.
    env = registry.instantiate("math", overrides={"extraction": ["boxed"]})
    row = _row("3", "Answer: 3")
    verdict = await env.verify(env.Row.model_validate(row), ResponseObject.model_validate(row["response"]), None)
    assert verdict.reward == 0.0 and verdict.extras["extracted_answer"] is None


async def test_a_costly_answer_scores_zero_and_a_starved_worker_is_masked():
    # (x+1)^3000 vs (x+2)^2999 takes ~20 s of sympy; the pool kills it at its deadline. That cost is
    # the answer's: it scores 0 (scored_by "deadline"), cached. (Before issue 26 it was failure class
    # timeout, masked: a wrong answer escaped its zero and cost the deadline again on every repeat.)
    # A worker that passes the deadline without using the CPU (SIGSTOP stands in for an overloaded
    # machine) is infrastructure: failure class timeout, masked, not cached.
    env = registry.instantiate("math", overrides={"cpu_task_timeout_s": 3.0, "cpu_workers": 1,
                                                  "deadline_cpu_share": 0.1})
    service = EnvService(env)
    await service.start()
    try:
        _, reply = await service.verify(_row("(x+1)^{3000}", "\\boxed{(x+2)^{2999}}"))
        assert "_ng_failure_class" not in reply and reply["reward"] == 0.0, reply
        assert reply["scored_by"] == "deadline" and reply["deadline_cpu_s"] >= 0.3
        assert reply["extracted_answer"] == "(x+2)^{2999}"
        assert env._results.get(("(x+1)^{3000}", "(x+2)^{2999}")) == (0.0, "deadline", None)
        _, again = await service.verify(_row("(x+1)^{3000}", "\\boxed{(x+2)^{2999}}"))
        assert again["reward"] == 0.0 and again["scored_by"] == "deadline" and service.pool.timeouts == 1

        (worker,) = service.pool._workers
        worker.wait_ready()
        os.kill(worker.process.pid, signal.SIGSTOP)  # killed and replaced at the deadline
        _, starved = await service.verify(_row("\\sqrt{2}", "\\boxed{2^{1/2}}"))
        assert starved["_ng_failure_class"] == "timeout" and starved["instance_config"]["mask_sample"] is True
        assert env._results.get(("\\sqrt{2}", "2^{1/2}")) is None
        _, reply = await service.verify(_row("\\sqrt{2}", "\\boxed{2^{1/2}}"))  # the replaced worker serves
        assert reply["reward"] == 1.0 and "_ng_failure_class" not in reply
    finally:
        await service.stop()


@pytest.mark.parametrize("answer", ["9^{9^{9^{9}}}", "100000000!", "(x+y+z+w+1)^{30}", "\\Gamma(10^{8})",
                                    "(" * 40 + "1" + ")" * 40, "1" * 2000])
async def test_costly_answers_are_refused_before_math_verify(answer):
    env = registry.instantiate("math", overrides={"cpu_workers": 1})
    service = EnvService(env)
    await service.start()
    try:
        _, reply = await service.verify(_row("42", f"\\boxed{{{answer}}}"))
        assert reply["reward"] == 0.0 and "_ng_failure_class" not in reply and service.pool.timeouts == 0
        # refused by the guard, or decided by the symbolic fast path (numbers at sample points: cheap)
        assert reply["scored_by"] == "refused_costly" and reply["cost_refusal"] or reply["scored_by"] == "symbolic"
    finally:
        await service.stop()
