"""IF-RLVR training constraints (open-instruct ``IFEvalG``), which NeMo-Gym's
``instruction_following`` rows use alongside the IFEval ids (``paragraphs:paragraphs``,
``first_word:first_word_sent``, ``count:lowercase_counting``, ...)."""

from __future__ import annotations

import re

from environments.instruction_following.registry import Relation, compare, instruction
from environments.instruction_following.text import split_on_divider, split_sentences, tokens

G = "ifevalg"


@instruction("paragraphs:paragraphs", source=G)
def paragraphs_divider(response: str) -> bool:
    """Exactly 2 paragraphs separated by the markdown divider ``***``."""
    parts = split_on_divider(response)
    return parts is not None and len(parts) == 2


@instruction("paragraphs:paragraphs2", source=G)
def paragraphs_blank_line(response: str) -> bool:
    """Exactly 2 paragraphs separated by one blank line (``\\n\\n``)."""
    parts = re.split(r"\n\n", response)
    kept = []
    for index, part in enumerate(parts):
        if not part.strip():
            if index not in (0, len(parts) - 1):
                return False
        else:
            kept.append(part)
    return len(kept) == 2


def _strip_punct(word: str) -> str:
    return re.sub(r"[^\w\s]", "", word)


@instruction("first_word:first_word_sent", source=G)
def first_word_sent(response: str, *, first_word: str) -> bool:
    sentences = split_sentences(response)
    return bool(sentences) and all(s.split()[0].strip().lower() == first_word.strip().lower() for s in sentences)


@instruction("first_word:first_word_answer", source=G)
def first_word_answer(response: str, *, first_word: str) -> bool:
    parts = response.split()
    return bool(parts) and parts[0].strip().lower() == first_word.strip().lower()


@instruction("last_word:last_word_sent", source=G)
def last_word_sent(response: str, *, last_word: str) -> bool:
    sentences = split_sentences(response)
    want = last_word.strip().lower()
    return bool(sentences) and all(_strip_punct(s.split()[-1]).lower() == want for s in sentences)


@instruction("last_word:last_word_answer", source=G)
def last_word_answer(response: str, *, last_word: str) -> bool:
    parts = response.split()
    return bool(parts) and _strip_punct(parts[-1]).lower() == last_word.strip().lower()


@instruction("count:lowercase_counting", source=G)
def lowercase_counting(response: str, *, N: int) -> bool:
    """All-lowercase words may appear at most N times in total."""
    return len(re.findall(r"\b[a-z]+\b", response)) <= N


@instruction("letters:letter_counting", source=G)
def letter_counting(response: str, *, N: int, relation: Relation) -> bool:
    """Number of ASCII letters in the response, compared with N."""
    return compare(len(re.findall(r"[a-zA-Z]", response)), relation, N)


@instruction("letters:letter_counting2", source=G)
def letter_counting2(response: str, *, letter: str, let_frequency: int, let_relation: Relation) -> bool:
    return compare(response.lower().count(letter.lower()), let_relation, let_frequency)


@instruction("punctuation:punctuation_dot", source=G)
def punctuation_dot(response: str) -> bool:
    return "." not in response


@instruction("punctuation:punctuation_exclamation", source=G)
def punctuation_exclamation(response: str) -> bool:
    return "!" not in response


@instruction("copy:copying_simple", source=G)
def copying_simple(response: str, *, prompt_to_repeat: str) -> bool:
    return response.strip().lower() == prompt_to_repeat.strip().lower()


@instruction("copy:copying_multiple", source=G)
def copying_multiple(response: str, *, prompt_to_repeat: str, N: int) -> bool:
    copies = response.split("******")
    return len(copies) == N and all(c.strip().lower() == prompt_to_repeat.strip().lower() for c in copies)


@instruction("format:bigram_wrapping", source=G)
def bigram_wrapping(response: str) -> bool:
    parts = response.split()
    return all(parts[i].startswith("<<") and parts[i + 1].endswith(">>") for i in range(0, len(parts) - 1, 2))


@instruction("count:count_unique", source=G)
def count_unique(response: str) -> bool:
    """No word token repeated (punctuation tokens included, as upstream)."""
    found = tokens(response)
    return len(found) == len(set(found))


@instruction("count:count_increment_word", source=G)
def count_increment_word(response: str, *, keyword1: str, keyword2: str) -> bool:
    once = len(re.findall(re.escape(keyword1.strip()), response, re.IGNORECASE))
    twice = len(re.findall(re.escape(keyword2.strip()), response, re.IGNORECASE))
    return once == 1 and twice == 2


@instruction("keywords:palindrome", source=G)
def palindrome(response: str) -> bool:
    return any(word == word[::-1] for word in response.split())


@instruction("keywords:keyword_specific_position", source=G)
def keyword_specific_position(response: str, *, keyword: str, n: int, m: int) -> bool:
    sentences = split_sentences(response)
    if not 1 <= n <= len(sentences):
        return False
    parts = sentences[n - 1].split()
    return 1 <= m <= len(parts) and _strip_punct(parts[m - 1]).lower() == keyword.strip().lower()


@instruction("keywords:exclude_word_harder", source=G)
def exclude_word_harder(response: str, *, keyword: str) -> bool:
    return " " + keyword.strip() + " " not in response
