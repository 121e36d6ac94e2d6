"""Synthetic RULER-style long rows of a requested length, with no downloads.

Tasks (RULER's templates): ``niah_single`` (one needle), ``niah_multikey`` (one needle among
distractor needles with other keys), ``variable_tracking`` (a chain of ``VAR X = ...``
assignments). The haystack is RULER's noise text, repeated.

Token rule (documented, no tokenizer): 1 token ~= 4 characters of English text, the usual
rule of thumb for BPE tokenizers. ``target_tokens`` sets the prompt length by that rule, so
``length`` in a row is ``len(prompt) // 4``.
"""

from __future__ import annotations

import random
from typing import Any, Iterator

CHARS_PER_TOKEN = 4
TASKS = ("niah_single", "niah_multikey", "variable_tracking")
NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
_ADJECTIVES = ("ancient", "brave", "calm", "dusty", "eager", "fancy", "gentle", "hollow", "icy", "jolly", "lively",
               "misty", "noisy", "orange", "proud", "quiet", "rapid", "silent", "tidy", "violet", "windy", "young")
_NOUNS = ("anchor", "bridge", "canyon", "dragon", "engine", "falcon", "garden", "harbor", "island", "jungle",
          "kettle", "lantern", "meadow", "needle", "orchard", "pepper", "quartz", "river", "saddle", "tunnel")
_NIAH_PROMPT = ("Some special magic numbers are hidden within the following text. Make sure to memorize it. "
                "I will quiz you about the numbers afterwards.\n{context}\nWhat is the special magic number for "
                "{key} mentioned in the provided text?")
_NEEDLE = "One of the special magic numbers for {key} is: {value}. "
_VT_PROMPT = ("Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n{context}\n"
              "Question: Find all variables that are assigned the value {value} in the text above.")


def _key(rng: random.Random, used: set[str]) -> str:
    while True:
        key = f"{rng.choice(_ADJECTIVES)}-{rng.choice(_NOUNS)}"
        if key not in used:
            used.add(key)
            return key


def _haystack_with(inserts: list[str], budget_chars: int, rng: random.Random) -> str:
    """Noise of ~budget_chars with the inserts at random depths, in the given order."""
    units = max(1, budget_chars // len(NOISE))
    body = [NOISE] * units
    positions = sorted(rng.randrange(units + 1) for _ in inserts)
    for offset, (position, text) in enumerate(zip(positions, inserts)):
        body.insert(position + offset, text)
    return "".join(body)


def _row(task: str, prompt: str, outputs: list[str]) -> dict[str, Any]:
    return {"responses_create_params": {"input": [{"role": "user", "content": prompt}]},
            "outputs": outputs, "length": len(prompt) // CHARS_PER_TOKEN, "subset": task}


def make_row(task: str, rng: random.Random, target_tokens: int, num_distractors: int = 3,
             chain_length: int = 5) -> dict[str, Any]:
    if task not in TASKS:
        raise ValueError(f"unknown long_context task {task!r}; known: {', '.join(TASKS)}")
    if target_tokens < 64:
        raise ValueError("target_tokens must be at least 64")
    used: set[str] = set()
    if task in ("niah_single", "niah_multikey"):
        key, value = _key(rng, used), str(rng.randrange(1_000_000, 10_000_000))
        needles = [_NEEDLE.format(key=key, value=value)]
        if task == "niah_multikey":
            needles += [_NEEDLE.format(key=_key(rng, used), value=rng.randrange(1_000_000, 10_000_000))
                        for _ in range(num_distractors)]
            rng.shuffle(needles)
        overhead = len(_NIAH_PROMPT.format(context="", key=key)) + sum(map(len, needles))
        context = _haystack_with(needles, target_tokens * CHARS_PER_TOKEN - overhead, rng)
        return _row(task, _NIAH_PROMPT.format(context=context, key=key), [value])
    names: list[str] = []
    while len(names) < chain_length:
        name = "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(5))
        if name not in names:
            names.append(name)
    value = str(rng.randrange(10_000, 100_000))
    chain = [f"VAR {names[0]} = {value}. "] + [f"VAR {names[i]} = VAR {names[i - 1]}. " for i in range(1, len(names))]
    overhead = len(_VT_PROMPT.format(context="", value=value)) + sum(map(len, chain))
    context = _haystack_with(chain, target_tokens * CHARS_PER_TOKEN - overhead, rng)
    return _row(task, _VT_PROMPT.format(context=context, value=value), names)


def generate_rows(*, tasks: list[str] | None, size: int, seed: int, target_tokens: int = 4000,
                  **options: Any) -> Iterator[dict[str, Any]]:
    """``size`` rows cycling over ``tasks``; row i depends only on (seed, i), so prefixes are stable."""
    chosen = list(tasks or TASKS)
    for task in chosen:
        if task not in TASKS:
            raise ValueError(f"unknown long_context task {task!r}; known: {', '.join(TASKS)}")
    unknown = set(options) - {"num_distractors", "chain_length"}
    if unknown:
        raise ValueError(f"unknown long_context option(s): {', '.join(sorted(unknown))}; "
                         "known: target_tokens, num_distractors, chain_length")
    for index in range(size):
        rng = random.Random(f"{seed}:{index}")
        yield make_row(chosen[index % len(chosen)], rng, int(target_tokens), **{k: int(v) for k, v in options.items()})
