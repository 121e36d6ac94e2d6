"""Every registered instruction id: one response that follows it, one that violates it."""

from __future__ import annotations

import pytest

from environments.instruction_following.registry import bind_all, load_all
from environments.instruction_following.scoring import evaluate, loose_variants
from environments.instruction_following.text import count_sentences, count_words, split_sentences
from environments.instruction_following.verifier import InstructionFollowingRow

LT, AL = "less than", "at least"
ENGLISH = "the quick brown fox jumps over the lazy dog while the farmer watches from the porch"
PROMPT = "Write a poem about the sea"

# id -> (kwargs, following response, violating response)
CASES: dict[str, tuple[dict, str, str]] = {
    # ---- IFEval -------------------------------------------------------------------------
    "keywords:existence": ({"keywords": ["ocean", "C++"]}, "The Ocean and C++.", "The ocean only."),
    "keywords:frequency": ({"keyword": "cat", "frequency": 2, "relation": AL}, "Cat and cat.", "One cat."),
    "keywords:forbidden_words": ({"forbidden_words": ["part"]}, "A partial answer.", "Part of it."),
    "keywords:letter_frequency": ({"letter": "z", "let_frequency": 2, "let_relation": LT}, "Zoo.", "Zizzy."),
    "language:response_language": ({"language": "fr"}, "Je pense que le chat est très mignon et il dort beaucoup.",
                                   "I think that the cat is very cute and it sleeps a lot."),
    "length_constraints:number_sentences": ({"num_sentences": 3, "relation": LT}, "One. Two.", "One. Two. Three."),
    "length_constraints:number_paragraphs": ({"num_paragraphs": 2}, "First.\n***\nSecond.", "First.\n\nSecond."),
    "length_constraints:number_words": ({"num_words": 5, "relation": AL}, "one two three four five", "one two"),
    "length_constraints:nth_paragraph_first_word": (
        {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "then"}, "Start here.\n\n\"Then, we end.",
        "Start here.\n\nAfter that we end."),
    "detectable_content:number_placeholders": ({"num_placeholders": 2}, "Dear [name] at [address].", "Dear [name]."),
    "detectable_content:postscript": ({"postscript_marker": "P.S."}, "Hello.\nP.S. bye", "Hello. PS bye"),
    "detectable_format:number_bullet_lists": ({"num_bullets": 2}, "* a\n- b", "* a\n* b\n* c"),
    "detectable_format:constrained_response": ({}, "My answer is yes.", "Yes, definitely."),
    "detectable_format:number_highlighted_sections": ({"num_highlights": 2}, "*one* and **two**", "*one* only"),
    "detectable_format:multiple_sections": ({"section_spliter": "Section", "num_sections": 2},
                                            "Section 1\nhi\nSection 2\nbye", "Section 1\nhi"),
    "detectable_format:json_format": ({}, '```json\n{"a": 1}\n```', "a: 1"),
    "detectable_format:title": ({}, "<<My Title>>\nbody", "My Title\nbody"),
    "combination:two_responses": ({}, "First answer.******Second answer.", "Same.******Same."),
    "combination:repeat_prompt": ({"prompt_to_repeat": PROMPT}, PROMPT + ". Waves...", "A poem: waves..."),
    "startend:end_checker": ({"end_phrase": "Is there anything else?"}, "Done. Is there anything else?", "Done."),
    "change_case:capital_word_frequency": ({"capital_frequency": 2, "capital_relation": AL},
                                           "THIS is VERY important", "This is Very important"),
    "change_case:english_capital": ({}, ENGLISH.upper(), ENGLISH),
    "change_case:english_lowercase": ({}, ENGLISH, ENGLISH.capitalize()),
    "punctuation:no_comma": ({}, "No commas here.", "Well, a comma."),
    "startend:quotation": ({}, '"Quoted answer."', "Unquoted answer."),
    # ---- IF-RLVR (open-instruct IFEvalG) --------------------------------------------------
    "paragraphs:paragraphs": ({}, "One.\n***\nTwo.", "One.\n***\nTwo.\n***\nThree."),
    "paragraphs:paragraphs2": ({}, "One.\n\nTwo.", "One. Two."),
    "first_word:first_word_sent": ({"first_word": "rain"}, "Rain falls. Rain stops.", "Rain falls. Sun shines."),
    "first_word:first_word_answer": ({"first_word": "rain"}, "Rain falls today.", "Today rain falls."),
    "last_word:last_word_sent": ({"last_word": "home"}, "I go home. You stay home!", "I go home. You stay."),
    "last_word:last_word_answer": ({"last_word": "contest"}, "We won the contest.", "The contest was won."),
    "count:lowercase_counting": ({"N": 2}, "ALL CAPS but two", "many many lowercase words"),
    "letters:letter_counting": ({"N": 5, "relation": LT}, "abc 12345", "abcdefgh"),
    "letters:letter_counting2": ({"letter": "a", "let_frequency": 3, "let_relation": AL}, "banana", "bob"),
    "punctuation:punctuation_dot": ({}, "No dots here", "A dot."),
    "punctuation:punctuation_exclamation": ({}, "Calm.", "Wow!"),
    "copy:copying_simple": ({"prompt_to_repeat": PROMPT}, PROMPT, PROMPT + " about waves"),
    "copy:copying_multiple": ({"prompt_to_repeat": PROMPT, "N": 2}, f"{PROMPT}\n******\n{PROMPT}", PROMPT),
    "format:bigram_wrapping": ({}, "<<I am>> <<at home>>", "I am <<at home>>"),
    "count:count_unique": ({}, "every word differs here", "the cat saw the dog"),
    "count:count_increment_word": ({"keyword1": "sun", "keyword2": "moon"}, "sun moon moon", "sun sun moon"),
    "keywords:palindrome": ({}, "we saw a racecar", "no such thing here"),
    "keywords:keyword_specific_position": ({"keyword": "blue", "n": 2, "m": 3}, "Hi there. The sky blue today.",
                                           "Hi there. The blue sky."),
    "keywords:exclude_word_harder": ({"keyword": "very"}, "It is quite good.", "It is very good."),
    # ---- IFBench OOD ----------------------------------------------------------------------
    "count:word_count_range": ({"min_words": 3, "max_words": 5}, "one two three four", "one two"),
    "count:unique_word_count": ({"N": 4}, "alpha beta gamma delta", "alpha alpha alpha beta"),
    "ratio:stop_words": ({"percentage": 30}, "Python extracts filenames using pathlib.",
                         "It is the one that you can use."),
    "ratio:sentence_type": ({}, "I ran. I slept. Why?", "I ran. Why? How?"),
    "ratio:sentence_balance": ({}, "I ran. Why? Wow!", "I ran. I slept. Why?"),
    "count:conjunctions": ({"small_n": 3}, "Tea and cake, but not coffee, or juice.", "Tea and cake and jam."),
    "count:person_names": ({"N": 2}, "Emma met Liam.", "Emma met Bob."),
    "count:numbers": ({"N": 2}, "Buy 3 apples for 1,000 coins.", "Buy 3 apples, 4 pears, 5 figs."),
    "count:keywords_multiple": ({"keyword1": "a1", "keyword2": "b2", "keyword3": "c3", "keyword4": "d4",
                                 "keyword5": "e5"},
                                "a1 " + "b2 " * 2 + "c3 " * 3 + "d4 " * 5 + "e5 " * 7, "a1 b2 c3 d4 e5"),
    "sentence:keyword": ({"word": "ocean", "N": 2}, "Hello. The ocean is big.", "The ocean is big. Hello."),
    "sentence:increment": ({"small_n": 1}, "I run. I run fast. I run very fast.", "I run. I run. I run."),
    "words:no_consecutive": ({}, "Every dog runs quickly", "Big bad wolf"),
    "format:line_indent": ({}, "a\n  b\n    c", "a\nb\n  c"),
    "format:quote_unquote": ({}, '"Carpe diem" means seize the day.', 'He said "carpe diem"'),
    "format:no_whitespace": ({}, "nowhitespaceatall", "two words"),
}


def _check(instruction_id: str, kwargs: dict, response: str) -> bool:
    spec = load_all()[instruction_id]
    return spec.check(response, spec.bind(kwargs))


def test_every_registered_id_has_a_case():
    assert set(CASES) == set(load_all()), "add a following/violating pair for each new id"
    ifeval = [i for i, spec in load_all().items() if spec.source == "ifeval"]
    assert len(ifeval) == 25


@pytest.mark.parametrize("instruction_id", sorted(CASES))
def test_following_response_passes(instruction_id):
    kwargs, good, _ = CASES[instruction_id]
    assert _check(instruction_id, kwargs, good) is True


@pytest.mark.parametrize("instruction_id", sorted(CASES))
def test_violating_response_fails(instruction_id):
    kwargs, _, bad = CASES[instruction_id]
    assert _check(instruction_id, kwargs, bad) is False


def test_sentence_splitter_keeps_abbreviations_and_decimals():
    text = "Dr. Smith paid $3.50 at 5 p.m. on Main St. yesterday. Was it e.g. cheap? Yes! See example.com now."
    assert split_sentences(text) == ["Dr. Smith paid $3.50 at 5 p.m. on Main St. yesterday.",
                                     "Was it e.g. cheap?", "Yes!", "See example.com now."]
    assert count_sentences("Wait... what? Fine.") == 3
    assert count_words("It's a well-known fact, 42 times.") == 8  # \w+ tokens, as IFEval


def test_loose_accepts_preamble_and_markdown_but_strict_does_not():
    specs = [load_all()["startend:quotation"], load_all()["detectable_format:title"]]
    bound = bind_all(["startend:quotation", "detectable_format:title"], [None, {}])
    outcome = evaluate('Sure, here it is:\n"**<<Title>>** body"', specs, bound)
    assert outcome.strict == [False, True]
    assert outcome.loose == [True, True]
    assert len(loose_variants("a\nb\nc")) == 8
    assert evaluate("   ", specs, bound).loose == [False, False]  # empty never follows


def _row(**fields):
    return {"responses_create_params": {"input": "hi"}, **fields}


def test_row_accepts_legacy_and_metadata_layouts_and_drops_null_kwargs():
    legacy = InstructionFollowingRow.model_validate(_row(instruction_id_list=["keywords:frequency"], kwargs=[
        {"keyword": "cat", "frequency": 2.0, "relation": AL, "num_words": None, "language": None}]))
    assert legacy._bound == [{"keyword": "cat", "frequency": 2, "relation": AL}]
    meta = InstructionFollowingRow.model_validate(_row(verifier_metadata={
        "instruction_id_list": ["detectable_format:title"], "kwargs": [None], "grading_mode": "fraction"}))
    assert meta._mode == "fraction" and meta._bound == [{}]


@pytest.mark.parametrize("fields, message", [
    ({"instruction_id_list": ["words:start_verb"], "kwargs": [{}]}, "words:start_verb"),
    ({"instruction_id_list": ["keywords:frequency"], "kwargs": [{"keyword": "a"}]}, "frequency"),
    ({"instruction_id_list": ["keywords:frequency"], "kwargs": [{"keyword": "a", "frequency": 1,
                                                                 "relation": "about"}]}, "relation"),
    ({"instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}, {}]}, "2 entries"),
    ({"instruction_id_list": []}, "non-empty"),
    ({"instruction_id_list": ["punctuation:no_comma"], "grading_mode": "sometimes"}, "grading_mode"),
])
def test_bad_rows_are_rejected_with_the_reason(fields, message):
    with pytest.raises(ValueError, match=message):
        InstructionFollowingRow.model_validate(_row(**fields))


def test_bind_cache_shares_only_equal_content_and_never_caches_errors():
    ids = ["length_constraints:number_words"]
    first = bind_all(ids, [{"num_words": 39, "relation": "at least", "unused": None}])
    again = bind_all(ids, [{"relation": "at least", "num_words": 39}])  # same content, other key order
    assert first == again == [{"num_words": 39, "relation": "at least"}]
    assert bind_all(ids, [{"num_words": 40, "relation": "at least"}]) == [{"num_words": 40, "relation": "at least"}]
    for _ in range(2):  # a bad row is rejected every time, not remembered as bound
        with pytest.raises(ValueError, match="relation"):
            bind_all(ids, [{"num_words": 39, "relation": "roughly"}])


def test_linear_checkers_count_what_ifevals_regexes_count():
    """The bullet, placeholder, title and postscript checks were rewritten to run in linear time
    (IFEval's regexes backtrack quadratically on long runs); on random text they agree with them."""
    import random
    import re

    from environments.instruction_following.checks_format import count_bullets, count_placeholders, postscript, title

    rng = random.Random(26)
    for _ in range(5000):
        text = "".join(rng.choice(" \n\t*-[]<>pPsS.a") for _ in range(rng.randint(0, 20)))
        assert count_bullets(text, "*") == len(re.findall(r"^\s*\*[^\*].*$", text, flags=re.MULTILINE))
        assert count_bullets(text, "-") == len(re.findall(r"^\s*-.*$", text, flags=re.MULTILINE))
        assert count_placeholders(text) == len(re.findall(r"\[.*?\]", text))
        assert title(text) == any(t.lstrip("<").rstrip(">").strip() for t in re.findall(r"<<[^\n]+>>", text))
        for marker, pattern in (("P.S.", r"\s*p\.\s?s\..*$"), ("P.P.S", r"\s*p\.\s?p\.\s?s.*$"), ("p.a", r"\s*p\.a.*$")):
            assert postscript(text, postscript_marker=marker) == bool(re.findall(pattern, text.lower(), flags=re.MULTILINE))
