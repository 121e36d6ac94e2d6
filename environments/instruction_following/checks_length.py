"""IFEval family ``length_constraints:*``: sentences, paragraphs, words."""

from __future__ import annotations

import re

from environments.instruction_following.registry import Relation, compare, instruction
from environments.instruction_following.text import count_sentences, count_words, split_on_divider

_FIRST_WORD_STOP = set(".,?!'\"")


@instruction("length_constraints:number_sentences")
def number_sentences(response: str, *, num_sentences: int, relation: Relation) -> bool:
    return compare(count_sentences(response), relation, num_sentences)


@instruction("length_constraints:number_paragraphs")
def number_paragraphs(response: str, *, num_paragraphs: int) -> bool:
    paragraphs = split_on_divider(response)
    return paragraphs is not None and len(paragraphs) == num_paragraphs


@instruction("length_constraints:number_words")
def number_words(response: str, *, num_words: int, relation: Relation) -> bool:
    return compare(count_words(response), relation, num_words)


@instruction("length_constraints:nth_paragraph_first_word")
def nth_paragraph_first_word(response: str, *, num_paragraphs: int, nth_paragraph: int, first_word: str) -> bool:
    # Paragraphs are separated by blank lines here (IFEval splits on "\n\n"); empty
    # paragraphs are not counted.
    paragraphs = re.split(r"\n\n", response)
    count = sum(1 for p in paragraphs if p.strip())
    if not 1 <= nth_paragraph <= len(paragraphs):
        return False
    paragraph = paragraphs[nth_paragraph - 1].strip()
    if not paragraph:
        return False
    word = paragraph.split()[0].strip().lstrip("'\"")
    found = ""
    for char in word:
        if char in _FIRST_WORD_STOP:
            break
        found += char.lower()
    return count == num_paragraphs and found == first_word.lower().strip()
