"""mcqa: every extraction mode, option validation, output_regex templates, row validation."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from environments.mcqa.letters import (answer_colon, boxed_option_text, by_output_regex, compile_output_regex,
                                       extract_letter, strict_boxed)
from environments.mcqa.verifier import McqaRow
from servers import registry
from servers.wire import ResponseObject, response_from_text

ABCD = frozenset("ABCD")
OPTIONS = (("A", "venus"), ("B", "mars"), ("C", "jupiter"), ("D", "saturn"))


@pytest.mark.parametrize("text, expected", [
    ("\\boxed{B}", "B"),
    ("\\boxed{ [C] }", "C"),
    ("\\boxed{(D)}", "D"),
    ("\\boxed{\\text{A}}", "A"),
    ("\\boxed{\\textbf{B}}", "B"),
    ("\\boxed{A} wait, no: \\boxed{C}", "C"),  # the last box
    ("\\boxed{b}", None),  # strict is uppercase only
    ("\\boxed{E}", None),  # not an option letter
    ("\\boxed{AB}", None),
    ("The answer is B", None),
])
def test_strict_boxed(text, expected):
    assert strict_boxed(text, ABCD) == expected


@pytest.mark.parametrize("text, expected", [
    ("\\boxed{Mars}", "B"),
    ("\\boxed{\\text{ Jupiter }}", "C"),
    ("\\boxed{Mars or Venus}", None),  # two options contained: ambiguous
    ("\\boxed{Pluto}", None),
    ("no box", None),
])
def test_lenient_boxed_option_text(text, expected):
    assert boxed_option_text(text, OPTIONS) == expected
    assert extract_letter(text, "lenient_boxed", ABCD, OPTIONS) == expected


def test_lenient_boxed_prefers_the_letter():
    assert extract_letter("\\boxed{D}", "lenient_boxed", ABCD, OPTIONS) == "D"


@pytest.mark.parametrize("text, expected", [
    ("Answer: c", "C"),
    ("answer : **B**", "B"),
    ("Answer: (A).", "A"),
    ("Answer: Saturn", "D"),
    ("Answer: A\nhmm, reconsider.\nFinal Answer: B", "B"),  # the last Answer:
    ("Answer: E", None),
    ("Answer: something else", None),
    ("B", None),
])
def test_lenient_answer_colon(text, expected):
    assert answer_colon(text, ABCD, OPTIONS) == expected


def test_output_regex_rightmost_case_insensitive_and_validated():
    regex = compile_output_regex(r"Option Selected:\s*([A-Za-z])")
    assert by_output_regex("option selected: a ... Option Selected: b", regex, ABCD) == "B"
    assert by_output_regex("Option Selected: Z", regex, ABCD) is None
    assert by_output_regex("Option Selected: Z", regex, frozenset()) == "Z"  # rows without options
    assert "invalid output_regex" in compile_output_regex("([")
    assert "no capture group" in compile_output_regex("Answer")


def test_unknown_mode_is_an_error():
    with pytest.raises(ValueError, match="unknown grading_mode"):
        extract_letter("\\boxed{A}", "nope", ABCD, OPTIONS)


def _row(**kw) -> dict:
    row = {"responses_create_params": {"input": [{"role": "user", "content": "q"}]},
           "options": [{"A": "Venus"}, {"B": "Mars"}, {"C": "Jupiter"}, {"D": "Saturn"}], "expected_answer": "B"}
    row.update(kw)
    return row


@pytest.mark.parametrize("change, message", [
    ({"expected_answer": "F"}, "not one of the option letters"),
    ({"expected_answer": "BC"}, "single letter"),
    ({"options": [{"AA": "x"}]}, "no option has a single-letter key"),
    ({"options": [{"A": "x"}, {"B": None}]}, "not one of the option letters A"),  # a null text is no option
    ({"grading_mode": "fuzzy"}, "grading_mode"),
])
def test_row_validation(change, message):
    with pytest.raises(ValidationError, match=message):
        McqaRow.model_validate(_row(**change))


def test_odd_option_entries_are_read_as_nemo_gym_reads_them():
    # NeMo-Gym's mcqa scores these rows: a two-key entry is two options, a non-letter key or a
    # null text is no option. verigym scores them the same way instead of refusing the row.
    row = McqaRow.model_validate(_row(options=[{"A": "Venus", "B": "Mars"}, {"CC": "x"}, {"D": None}]))
    assert row.letters == frozenset("AB") and row.normalized_options == (("A", "venus"), ("B", "mars"))


async def _verify(env, row: dict, text: str):
    return await env.verify(env.Row.model_validate(row), ResponseObject.model_validate(response_from_text(text)), None)


async def test_verify_modes_priority_and_fallback():
    env = registry.instantiate("mcqa")
    v = await _verify(env, _row(), "\\boxed{B}")
    assert v.reward == 1.0 and v.extras == {"expected_answer": "B", "extracted_answer": "B",
                                            "grading_method": "strict_single_letter_boxed"}
    v = await _verify(env, _row(template_metadata={"output_regex": r"Final Choice:\s*([A-Z])"}), "Final Choice: B")
    assert v.reward == 1.0 and v.extras["grading_method"] == "output_regex"
    # invalid template regex: NeMo-Gym's fallback to the grading mode, made visible
    v = await _verify(env, _row(template_metadata={"output_regex": "(["}), "\\boxed{B}")
    assert v.reward == 1.0 and "invalid output_regex" in v.extras["output_regex_error"]
    v = await _verify(env, _row(), "\\boxed{C}")
    assert v.reward == 0.0 and v.extras["extracted_answer"] == "C"
    env = registry.instantiate("mcqa", overrides={"default_grading_mode": "lenient_answer_colon"})
    v = await _verify(env, _row(), "Answer: b")
    assert v.reward == 1.0
