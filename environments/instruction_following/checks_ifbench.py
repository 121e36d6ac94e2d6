"""IFBench out-of-distribution constraints that can be verified deterministically offline.

Left out on purpose (see README): ids that need a POS tagger (``words:start_verb``), a
syllable dictionary, emoji tables, Japanese tokenisation, or the reference texts/lists
IFBench ships (``ratio:overlap``, ``custom:european_capitals_sort``, ...).
"""

from __future__ import annotations

import re
import string

from environments.instruction_following.registry import instruction
from environments.instruction_following.text import STOPWORDS, count_words, split_sentences, words

B = "ifbench"
_PUNCT = str.maketrans("", "", string.punctuation)
_CONJUNCTIONS = frozenset({"and", "but", "for", "nor", "or", "so", "yet"})
# The list IFBench's prompt names ("from this list of person names: ...").
PERSON_NAMES = (
    "Emma Liam Sophia Jackson Olivia Noah Ava Lucas Isabella Mason Mia Ethan Charlotte Alexander Amelia "
    "Benjamin Harper Leo Zoe Daniel Chloe Samuel Lily Matthew Grace Owen Abigail Gabriel Ella Jacob "
    "Scarlett Nathan Victoria Elijah Layla Nicholas Audrey David Hannah Christopher Penelope Thomas Nora "
    "Andrew Aria Joseph Claire Ryan Stella Jonathan"
).split()
_NAME_PATTERNS = [(name, re.compile(r"\b" + name + r"\b")) for name in PERSON_NAMES]
# keyword1..keyword5 must appear 1, 2, 3, 5 and 7 times (IFBench's wording).
_KEYWORD_COUNTS = (1, 2, 3, 5, 7)


@instruction("count:word_count_range", source=B)
def word_count_range(response: str, *, min_words: int, max_words: int) -> bool:
    return min_words <= count_words(response) <= max_words


@instruction("count:unique_word_count", source=B)
def unique_word_count(response: str, *, N: int) -> bool:
    unique = {w.strip(string.punctuation + " ") for w in response.lower().split()}
    return len(unique) >= N


@instruction("ratio:stop_words", source=B)
def stop_words(response: str, *, percentage: float) -> bool:
    found = words(response.lower())
    if not found:
        return False
    return 100.0 * sum(1 for w in found if w in STOPWORDS) / len(found) <= percentage


def _sentence_ends(response: str) -> tuple[int, int, int]:
    sentences = split_sentences(response)
    return (sum(s.endswith(".") for s in sentences), sum(s.endswith("?") for s in sentences),
            sum(s.endswith("!") for s in sentences))


@instruction("ratio:sentence_type", source=B)
def sentence_type(response: str) -> bool:
    """Declarative = 2 x interrogative. Unlike upstream, zero questions does not pass."""
    declarative, interrogative, _ = _sentence_ends(response)
    return interrogative > 0 and declarative == 2 * interrogative


@instruction("ratio:sentence_balance", source=B)
def sentence_balance(response: str) -> bool:
    """As many declarative as interrogative as exclamatory sentences (at least one each)."""
    declarative, interrogative, exclamatory = _sentence_ends(response)
    return declarative > 0 and declarative == interrogative == exclamatory


@instruction("count:conjunctions", source=B)
def conjunctions(response: str, *, small_n: int) -> bool:
    used = {w.strip(string.punctuation + " ").lower() for w in response.split()} & _CONJUNCTIONS
    return len(used) >= small_n


@instruction("count:person_names", source=B)
def person_names(response: str, *, N: int) -> bool:
    return sum(1 for _, pattern in _NAME_PATTERNS if pattern.search(response)) >= N


@instruction("count:numbers", source=B)
def numbers(response: str, *, N: int) -> bool:
    """Exactly N numbers; ``3.14`` and ``1,000`` count once."""
    return len(re.findall(r"\d+(?:[.,]\d+)*", response)) == N


@instruction("count:keywords_multiple", source=B)
def keywords_multiple(response: str, *, keyword1: str, keyword2: str, keyword3: str, keyword4: str,
                      keyword5: str) -> bool:
    for keyword, times in zip((keyword1, keyword2, keyword3, keyword4, keyword5), _KEYWORD_COUNTS):
        found = re.findall(r"\b" + re.escape(keyword.strip()) + r"\b", response, re.IGNORECASE)
        if len(found) != times:
            return False
    return True


@instruction("sentence:keyword", source=B)
def sentence_keyword(response: str, *, word: str, N: int) -> bool:
    sentences = split_sentences(response)
    return 1 <= N <= len(sentences) and word.lower() in sentences[N - 1].lower()


@instruction("sentence:increment", source=B)
def sentence_increment(response: str, *, small_n: int) -> bool:
    """Each sentence has exactly small_n more words than the one before."""
    counts = [len(s.translate(_PUNCT).split()) for s in split_sentences(response)]
    return len(counts) > 1 and all(b == a + small_n for a, b in zip(counts, counts[1:]))


@instruction("words:no_consecutive", source=B)
def no_consecutive(response: str) -> bool:
    found = response.lower().translate(_PUNCT).split()
    return all(a[0] != b[0] for a, b in zip(found, found[1:]))


@instruction("format:line_indent", source=B)
def line_indent(response: str) -> bool:
    """Stairs: each non-blank line is indented (spaces) more than the previous one."""
    lines = [line for line in response.split("\n") if line.strip()]
    depth = [len(line) - len(line.lstrip(" ")) for line in lines]
    return len(lines) > 1 and all(b > a for a, b in zip(depth, depth[1:]))


@instruction("format:quote_unquote", source=B)
def quote_unquote(response: str) -> bool:
    """Every quoted phrase is followed by unquoted text (no quote ends the response)."""
    text = "".join(response.replace("“", '"').replace("”", '"').split())
    if '""' in text:
        return False
    tail = text.strip(string.digits + string.punctuation.replace('"', ""))
    return bool(tail) and tail[-1] != '"'


@instruction("format:no_whitespace", source=B)
def no_whitespace(response: str) -> bool:
    return bool(response.strip()) and not any(ch.isspace() for ch in response.strip())
