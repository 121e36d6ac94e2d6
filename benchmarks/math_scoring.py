"""Per-call cost of math scoring, in-process, same run: plain math-verify vs our scorer.

* ``plain_math_verify``: parse gold + parse prediction + verify on every call (what a
  NeMo-Gym math_with_judge worker does, minus its per-call fork).
* ``ours_cold``: our per-call path with empty caches (fast path, else math-verify with the
  gold parse cached per worker): a new (gold, answer) pair every time.
* ``ours_warm``: the server's steady state under GRPO, where a group's answers repeat and
  the (gold, extracted) result cache answers.

Pairs are the math example rows' (expected_answer, extracted answer) plus hand-written pairs
over every answer family; the answers are extracted from the example responses exactly as
the server does. Prints one JSON object.

    python benchmarks/math_scoring.py [--rounds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

from environments.math_grading.extract import extract_answer
from environments.math_grading.scoring import fast_equivalence, library_score, parse_gold, plain_math_verify
from servers import registry
from servers.wire import ResponseObject

EXAMPLES = Path(__file__).resolve().parents[1] / "environments" / "math" / "data" / "example.jsonl"
FAMILY_PAIRS = [("\\frac{1}{2}", "0.5"), ("50\\%", "0.5"), ("\\sqrt{2}", "2^{1/2}"), ("(1,2]", "(1, 2]"),
                ("\\{1,2,3\\}", "\\{3,2,1\\}"), ("x^2+2x+1", "(x+1)^2"), ("60^\\circ", "60"), ("42", "42"),
                ("1000", "1,000"), ("\\frac{\\pi}{2}", "\\pi/2"), ("-3", "-3"), ("32", "33")]


def example_pairs() -> list[tuple[str, str]]:
    pairs = []
    for line in EXAMPLES.read_text().splitlines():
        row = json.loads(line)
        if row.get("_expected", {}).get("status", 200) != 200 or "failure_class" in row.get("_expected", {}):
            continue
        extracted, _ = extract_answer(ResponseObject.model_validate(row["response"]).output_text)
        if extracted is not None:
            pairs.append((str(row["expected_answer"]), extracted))
    return pairs


def ours_uncached(gold: str, extracted: str) -> float:
    decided = fast_equivalence(gold, extracted)
    if decided is not None:
        return 1.0 if decided else 0.0
    return library_score(gold, extracted)[0]


def per_call_ms(fn, pairs, rounds: int) -> float:
    start = time.perf_counter()
    for _ in range(rounds):
        for gold, pred in pairs:
            fn(gold, pred)
    return 1000 * (time.perf_counter() - start) / (rounds * len(pairs))


async def warm_env_ms(pairs, rounds: int) -> float:
    """The environment's verify (extraction + caches), no HTTP, CPU pool replaced by inline calls."""
    env = registry.instantiate("math")
    rows = [(env.Row.model_validate({"responses_create_params": {"input": []}, "expected_answer": g}),
             ResponseObject.model_validate({"output": [{"type": "message", "role": "assistant",
                                                        "content": [{"type": "output_text", "text": f"\\boxed{{{p}}}"}]}]}))
            for g, p in pairs]
    for row, response in rows:  # fill the result cache once, as the first GRPO sample of a group does
        await env.verify(row, response, None)
    start = time.perf_counter()
    for _ in range(rounds):
        for row, response in rows:
            await env.verify(row, response, None)
    return 1000 * (time.perf_counter() - start) / (rounds * len(rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    pairs = example_pairs() + FAMILY_PAIRS
    for gold, pred in pairs:  # import + first-parse costs out of the timings; agreement check
        assert plain_math_verify(gold, pred) == ours_uncached(gold, pred), (gold, pred)
    plain = per_call_ms(plain_math_verify, pairs, args.rounds)

    def cold(gold: str, pred: str) -> float:
        parse_gold.cache_clear()
        return ours_uncached(gold, pred)

    ours_cold = per_call_ms(cold, pairs, args.rounds)
    ours_gold_cached = per_call_ms(ours_uncached, pairs, args.rounds)
    warm = asyncio.run(warm_env_ms(pairs, args.rounds * 10))
    print(json.dumps({
        "benchmark": "math_scoring", "pairs": len(pairs), "rounds": args.rounds,
        "plain_math_verify_ms_per_call": round(plain, 4),
        "ours_no_caches_ms_per_call": round(ours_cold, 4),
        "ours_gold_cache_ms_per_call": round(ours_gold_cached, 4),
        "ours_env_verify_result_cache_ms_per_call": round(warm, 4),
        "speedup_gold_cache_vs_plain": round(plain / ours_gold_cached, 2),
        "fast_path_share": round(sum(fast_equivalence(g, p) is not None for g, p in pairs) / len(pairs), 3),
        "note": "in-process, single thread; machine shared with other jobs",
    }))


if __name__ == "__main__":
    main()
