"""Deterministic, offline text primitives the checkers share.

IFEval uses NLTK (punkt sentences, ``word_tokenize``) whose data is downloaded at run time,
which fails offline and has broken peers' servers. These are self-contained replacements:

* sentences: the rule-based splitter IFEval/IFEvalG use for their sentence checks
  (abbreviations, initials, decimals, acronyms and websites are not sentence ends);
* words: IFEval's ``count_words`` is ``RegexpTokenizer(r"\\w+")``, reproduced exactly;
* tokens: a regex stand-in for ``nltk.word_tokenize`` (words, with internal apostrophes or
  hyphens, and single punctuation marks);
* language: ``langdetect`` with a fixed seed (its profiles ship inside the wheel).
"""

from __future__ import annotations

import re
from functools import lru_cache

_WORD = re.compile(r"\w+")
_TOKEN = re.compile(r"\w+(?:['’-]\w+)*|[^\w\s]")

# Sentence splitting: protect dots that do not end a sentence, then split after . ! ?
_PREFIXES = re.compile(r"\b(Mr|St|Mrs|Ms|Dr|Prof|Sr|Jr|vs|etc|e\.g|i\.e)[.]", re.IGNORECASE)
_WEBSITES = re.compile(r"[.](com|net|org|io|gov|edu|me)\b")
_DECIMAL = re.compile(r"(\d)[.](\d)")
_ELLIPSIS = re.compile(r"\.{2,}")
_INITIAL = re.compile(r"(\s[A-Za-z])[.](?= )")
_ACRONYM3 = re.compile(r"\b([A-Za-z])[.]([A-Za-z])[.]([A-Za-z])[.]")
_ACRONYM2 = re.compile(r"\b([A-Za-z])[.]([A-Za-z])[.]")
_SUFFIXES = re.compile(r" (Inc|Ltd|Co)[.](?! [A-Z])")
_PRD = "\x00"  # stands in for a protected dot while splitting


def count_words(text: str) -> int:
    return len(_WORD.findall(text))


def words(text: str) -> list[str]:
    return _WORD.findall(text)


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


def split_sentences(text: str) -> list[str]:
    text = " " + text.replace("\n", " ") + "  "
    text = _PREFIXES.sub(lambda m: m.group(0)[:-1].replace(".", _PRD) + _PRD, text)
    text = _WEBSITES.sub(_PRD + r"\1", text)
    text = _DECIMAL.sub(r"\1" + _PRD + r"\2", text)
    text = _ELLIPSIS.sub(lambda m: _PRD * len(m.group(0)) + "<stop>", text)
    text = text.replace("Ph.D.", f"Ph{_PRD}D{_PRD}")
    text = _ACRONYM3.sub(rf"\1{_PRD}\2{_PRD}\3{_PRD}", text)
    text = _ACRONYM2.sub(rf"\1{_PRD}\2{_PRD}", text)
    text = _INITIAL.sub(r"\1" + _PRD, text)
    text = _SUFFIXES.sub(r" \1" + _PRD, text)
    # keep closing quotes with their sentence: 'said."' ends after the quote
    for mark in ".!?":
        text = text.replace(mark + '"', '"' + mark).replace(mark + "”", "”" + mark)
    # str.replace, not _ENDS.sub(r"\1<stop>"): the same text, without a template expansion per
    # sentence end (a profile of unique traffic put those at a fifth of a verification).
    for mark in ".!?":
        text = text.replace(mark, mark + "<stop>")
    sentences = [s.replace(_PRD, ".").strip() for s in text.split("<stop>")]
    return [s for s in sentences if s]


def count_sentences(text: str) -> int:
    return len(split_sentences(text))


def split_on_divider(text: str) -> list[str] | None:
    """Paragraphs separated by ``***`` (IFEval's rule): blank edges dropped, blank middles invalid."""
    parts = re.split(r"\s?\*\*\*\s?", text)
    kept: list[str] = []
    for index, part in enumerate(parts):
        if not part.strip():
            if index in (0, len(parts) - 1):
                continue
            return None
        kept.append(part)
    return kept


@lru_cache(maxsize=1)
def _langdetect():
    from langdetect import DetectorFactory, detect
    from langdetect.lang_detect_exception import LangDetectException

    DetectorFactory.seed = 0  # langdetect is randomised; a fixed seed makes it repeatable
    return detect, LangDetectException


def detect_language(text: str) -> str | None:
    """ISO 639-1 code, or None when langdetect cannot tell (no letters, say)."""
    detect, failure = _langdetect()
    try:
        return detect(text)
    except failure:
        return None


def warm_language_detector() -> None:
    """Load the language profiles now (about a second) rather than on the first request."""
    detect_language("warm up the detector with a short English sentence")


# NLTK's English stop-word list (179 words), embedded so nothing is downloaded.
STOPWORDS = frozenset("""
i me my myself we our ours ourselves you you're you've you'll you'd your yours yourself
yourselves he him his himself she she's her hers herself it it's its itself they them their
theirs themselves what which who whom this that that'll these those am is are was were be
been being have has had having do does did doing a an the and but if or because as until
while of at by for with about against between into through during before after above below
to from up down in out on off over under again further then once here there when where why
how all any both each few more most other some such no nor not only own same so than too
very s t can will just don don't should should've now d ll m o re ve y ain aren aren't
couldn couldn't didn didn't doesn doesn't hadn hadn't hasn hasn't haven haven't isn isn't ma
mightn mightn't mustn mustn't needn needn't shan shan't shouldn shouldn't wasn wasn't weren
weren't won won't wouldn wouldn't
""".split())
