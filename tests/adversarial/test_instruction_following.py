"""instruction_following: instructions an empty answer would satisfy (no commas, lowercase, fewer
than N words) must not be met by an answer that shows nothing (invisible characters only) or
that never finished its reasoning; counting checks read what a reader sees."""

from __future__ import annotations

import pytest

from tests.adversarial.conftest import assert_refused, assert_scores

ENV = "instruction_following"


def row(ids: list[str], kwargs: list[dict | None], prompt: str = "Describe the sea.") -> dict:
    return {"responses_create_params": {"input": [{"role": "user", "content": prompt}]},
            "verifier_metadata": {"instruction_id_list": ids, "kwargs": kwargs}}


# Instructions any empty response would satisfy.
EMPTY_WINS = row(["punctuation:no_comma", "change_case:english_lowercase", "length_constraints:number_words"],
                 [None, None, {"num_words": 50, "relation": "less than"}])

INVISIBLE = {
    "zero_width_space": "\u200b" * 20,
    "byte_order_mark": "\ufeff",
    "word_joiners": "\u2060\u2060",
    "bidi_marks": "\u200e\u200f\u202a\u202c",
    "hangul_filler": "\u3164",
    "braille_blank": "\u2800\u2800",
    "tag_characters": "\U000e0041\U000e0042",
    "soft_hyphen_and_spaces": " \u00ad \u00a0\n\u3000",
    "variation_selector": "\ufe0f",
}


@pytest.mark.parametrize("name", sorted(INVISIBLE))
async def test_attack_invisible_only_response(scorer, name):
    env = await scorer(ENV)
    reply = await env.verify(EMPTY_WINS, INVISIBLE[name])
    assert_refused(reply)
    assert reply["follow_instruction_list"] == [False, False, False]


UNFINISHED = {
    "unclosed_think": "<think>the sea is calm and wide",
    "unclosed_thinking_tag": "<thinking>the sea is calm and wide",
    "uppercase_tag": "<THINK>the sea is calm and wide",
    "after_a_closed_block": "<think>plan</think>\n<think>the sea is calm and wide",
}


@pytest.mark.parametrize("name", sorted(UNFINISHED))
async def test_attack_unclosed_reasoning_is_no_answer(scorer, name):
    env = await scorer(ENV)
    assert_refused(await env.verify(EMPTY_WINS, UNFINISHED[name]))


async def test_attack_zero_width_word_padding(scorer):
    # "at least 40 words": forty letters joined by zero-width spaces look like one word
    env = await scorer(ENV)
    padded = "\u200b".join(["s"] * 40)
    reply = await env.verify(row(["length_constraints:number_words"], [{"num_words": 40, "relation": "at least"}]),
                             padded)
    assert_refused(reply)


async def test_attack_zero_width_split_forbidden_word(scorer):
    env = await scorer(ENV)
    reply = await env.verify(row(["keywords:forbidden_words"], [{"forbidden_words": ["storm"]}]),
                             "the sea before a st\u200borm is quiet.")
    assert_refused(reply)


async def test_control_honest_lowercase_answer(scorer):
    env = await scorer(ENV)
    assert_scores(await env.verify(EMPTY_WINS, "the sea is wide and calm today."))


async def test_control_answer_after_closed_reasoning(scorer):
    env = await scorer(ENV)
    assert_scores(await env.verify(EMPTY_WINS, "<think>Keep it short, no commas.</think>\nthe sea is wide and calm."))


async def test_control_answer_with_emoji_and_accents(scorer):
    env = await scorer(ENV)
    assert_scores(await env.verify(EMPTY_WINS, "the sea is calm 🌊 and the café is open."))


async def test_control_answer_quoting_a_think_tag_in_code(scorer):
    env = await scorer(ENV)
    reply = await env.verify(row(["keywords:existence"], [{"keywords": ["regex"]}]),
                             'Use a regex: pattern = "<think>.*" matches the opening tag.')
    assert_scores(reply)


# Huge responses built to make a checker's regex backtrack: each was quadratic (seconds to minutes
# of event-loop time per response) before its linear rewrite. pytest's timeout is the hang guard.
HUGE = {
    "blank_lines_for_bullet_count": (row(["detectable_format:number_bullet_lists"], [{"num_bullets": 3}]), "\n" * 300_000),
    "open_brackets_for_placeholders": (row(["detectable_content:number_placeholders"], [{"num_placeholders": 2}]),
                                       "[" * 300_000),
    "open_angles_for_title": (row(["detectable_format:title"], [None]), "<<" * 150_000),
    "whitespace_for_postscript": (row(["detectable_content:postscript"], [{"postscript_marker": "P.S."}]),
                                  " \n\t" * 100_000),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", sorted(HUGE))
async def test_attack_huge_response_built_to_backtrack(scorer, name):
    task_row, text = HUGE[name]
    env = await scorer(ENV)
    assert_refused(await env.verify(task_row, text))


async def test_control_honest_formats_still_count(scorer):
    env = await scorer(ENV)
    task_row = row(["detectable_format:number_bullet_lists", "detectable_content:number_placeholders",
                    "detectable_format:title", "detectable_content:postscript"],
                   [{"num_bullets": 2}, {"num_placeholders": 1}, None, {"postscript_marker": "P.S."}])
    assert_scores(await env.verify(task_row, "<<The Sea>>\n\n* calm at [time]\n\n* wide\n\nP.S. bring a coat"))
