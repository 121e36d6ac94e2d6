"""mcqa: one letter per answer — several boxes, several letters in a box, lookalike letters and
unfinished reasoning must not be read as the right choice."""

from __future__ import annotations

import pytest

from tests.adversarial.conftest import assert_refused, assert_scores

ENV = "mcqa"
ROW = {"responses_create_params": {"input": "Which is a mammal?\nA) shark\nB) whale\nC) trout\nD) eel"},
       "options": [{"A": "shark"}, {"B": "whale"}, {"C": "trout"}, {"D": "eel"}], "expected_answer": "B"}
MODES = ["strict_single_letter_boxed", "lenient_boxed", "lenient_answer_colon"]

SPRAYS = {
    "every_letter_in_one_box": "\\boxed{A, B, C, D}",
    "letters_run_together": "\\boxed{ABCD}",
    "either_or": "\\boxed{A or B}",
    "slashes": "\\boxed{A/B/C/D}",
    "last_box_wrong": "\\boxed{B} on second thought \\boxed{C}",
    "answer_line_every_letter": "Answer: A, B, C, D",
    "cyrillic_lookalike_letter": "\\boxed{В}",  # Cyrillic Ve looks like B
    "answer_in_unclosed_reasoning": "<think>It is \\boxed{B}",
    "option_texts_together": "\\boxed{shark whale trout eel}",
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(SPRAYS))
async def test_attack_letter_spraying(scorer, mode, name):
    env = await scorer(ENV, default_grading_mode=mode)
    assert_refused(await env.verify(ROW, SPRAYS[name]))


@pytest.mark.parametrize("mode,text", [
    ("strict_single_letter_boxed", "Whales breathe air. \\boxed{B}"),
    ("strict_single_letter_boxed", "<think>A shark is a fish.</think>\\boxed{(B)}"),
    ("lenient_boxed", "\\boxed{whale}"),
    ("lenient_answer_colon", "Answer: b"),
    ("lenient_answer_colon", "Answer: A? No. Answer: B"),
])
async def test_control_one_clear_answer(scorer, mode, text):
    env = await scorer(ENV, default_grading_mode=mode)
    assert_scores(await env.verify(ROW, text))
