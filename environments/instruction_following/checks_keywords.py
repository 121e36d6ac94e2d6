"""IFEval families ``keywords:*``, ``language:*`` and ``change_case:*``.

Semantics follow google-research ``instruction_following_eval/instructions.py``; where a
checker needs NLTK or random defaults we use :mod:`.text` and required kwargs instead.
"""

from __future__ import annotations

import re
from collections import Counter

from environments.instruction_following.registry import Relation, compare, instruction
from environments.instruction_following.text import detect_language, tokens


@instruction("keywords:existence")
def keywords_existence(response: str, *, keywords: list[str]) -> bool:
    # IFEval searches the keyword as a regex, case-insensitively; we escape it so a
    # keyword like "C++" is literal rather than a regex error.
    return all(re.search(re.escape(k), response, re.IGNORECASE) for k in keywords)


@instruction("keywords:frequency")
def keywords_frequency(response: str, *, keyword: str, frequency: int, relation: Relation) -> bool:
    count = len(re.findall(re.escape(keyword.strip()), response, re.IGNORECASE))
    return compare(count, relation, frequency)


@instruction("keywords:forbidden_words")
def keywords_forbidden_words(response: str, *, forbidden_words: list[str]) -> bool:
    return not any(re.search(r"\b" + re.escape(w) + r"\b", response, re.IGNORECASE) for w in forbidden_words)


@instruction("keywords:letter_frequency")
def keywords_letter_frequency(response: str, *, letter: str, let_frequency: int, let_relation: Relation) -> bool:
    count = Counter(response.lower())[letter.lower()]
    return compare(count, let_relation, let_frequency)


@instruction("language:response_language")
def language_response_language(response: str, *, language: str) -> bool:
    detected = detect_language(response)
    # IFEval counts undetectable text (digits only, say) as following.
    return detected is None or detected == language


@instruction("change_case:capital_word_frequency")
def change_case_capital_word_frequency(response: str, *, capital_frequency: int, capital_relation: Relation) -> bool:
    capitals = sum(1 for token in tokens(response) if token.isupper())
    return compare(capitals, capital_relation, capital_frequency)


@instruction("change_case:english_capital")
def change_case_english_capital(response: str) -> bool:
    if not response.isupper():
        return False
    detected = detect_language(response)
    return detected is None or detected == "en"


@instruction("change_case:english_lowercase")
def change_case_english_lowercase(response: str) -> bool:
    if not response.islower():
        return False
    detected = detect_language(response)
    return detected is None or detected == "en"
