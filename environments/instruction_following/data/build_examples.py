"""Rebuild ``example.jsonl``: the real NeMo-Gym rows (unchanged) with a following and a
violating response each, plus verifier_metadata-style, fraction-mode and malformed rows.

    python -m environments.instruction_following.data.build_examples
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from servers.wire import response_from_text

SHARED = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "nemo_gym"
OUT = Path(__file__).with_name("example.jsonl")

FULL = {"reward": 1.0}

# Responses per real row id: (following, violating, fields expected of the violating reply).
SENTENCES = " ".join(f"Topic [{chr(97 + i % 4)}{i}] is covered on page {i}." for i in range(18))
REAL: dict[int, tuple[str, str, list[bool]]] = {
    17616: ("Oliver looked at his mother.\n\nShe drove on in silence.\n\nCrash went the thunder outside.\n\n"
            "He smiled, ready for the contest",
            "Oliver looked at his mother.\n\nShe drove on in silence.\n\nThunder rolled outside.\n\n"
            "He smiled, ready for the contest", [False, True]),
    44654: ("* ONE\n* TWO\n* THREE\n***\n* FOUR\n* FIVE",
            "* ONE\n* TWO\n* THREE\n***\n* FOUR\n* FIVE\n* and six more lowercase words here", [True, False, False]),
    2228: ("Relationship games sell well. Relationship mechanics keep players engaged.",
           "Relationship games are part of the market. Puzzle games sell too.", [False, False]),
    44655: (SENTENCES, "Just one sentence about [Plato].", [False, True, False]),
    8654: ("<<Installing JayHorn>>\nClone the repository and build it with Gradle.\n***\n"
           "Run the jar on your Java file to check it.",
           "Clone the repository and build it with Gradle. Run the jar on your Java file.", [False, False, True]),
}
# IFBench rows (fraction grading) whose ids we support.
IFBENCH: dict[int, tuple[str, str]] = {
    0: ("kaleidoscope " + "nebula " * 2 + "whisper " * 3 + "labyrinth " * 5 + "paradox " * 7,
        "kaleidoscope nebula whisper labyrinth paradox"),
    79: ("INT. LUNAR MODULE\n  The lights flicker.\n    Armstrong reaches for the radio.\n      Silence.",
         "INT. LUNAR MODULE\nThe lights flicker.\nSilence."),
    172: ("Use os.path.basename(filepath) or pathlib.Path(filepath).name; both return filename strings.",
          "It is the one that you can use to do it in a way that is the best for you."),
}


def with_response(row: dict[str, Any], text: str, expected: dict[str, Any]) -> dict[str, Any]:
    return {**row, "response": response_from_text(text), "_expected": expected}


def load(gym: str) -> dict[int, dict[str, Any]]:
    rows = [json.loads(line) for line in (SHARED / gym / "example.jsonl").read_text().splitlines() if line.strip()]
    return {row["id"]: row for row in rows}


def meta_row(ids: list[str], kwargs: list[Any], text: str, expected: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {"id": 9000, "responses_create_params": {"input": [{"role": "user", "content": "Write something."}]},
            "verifier_metadata": {"instruction_id_list": ids, "kwargs": kwargs, **meta},
            "response": response_from_text(text), "_expected": expected}


def main() -> None:
    out: list[dict[str, Any]] = []
    for row_id, row in load("instruction_following").items():
        good, bad, flags = REAL[row_id]
        out.append(with_response(row, good, {**FULL, "fields": {"follow_instruction_list": [True] * len(flags)}}))
        out.append(with_response(row, bad, {"reward": 0.0, "fields": {"follow_instruction_list": flags}}))
    ifbench = load("ifbench")
    for row_id, (good, bad) in IFBENCH.items():
        out.append(with_response(ifbench[row_id], good, FULL))
        out.append(with_response(ifbench[row_id], bad, {"reward": 0.0}))
    # words:start_verb needs a POS tagger: the row is rejected, naming the id.
    out.append(with_response(ifbench[260], "Build a city.", {"status": 422}))
    # current NeMo-Gym layout, fraction mode from verifier_metadata, and loose-only success
    out.append(meta_row(["punctuation:no_comma", "startend:quotation"], [None, {}], '"no commas here"', FULL))
    out.append(meta_row(["punctuation:no_comma", "startend:quotation"], [None, None], '"a, b"', {"reward": 0.5},
                        grading_mode="fraction"))
    out.append(meta_row(["startend:end_checker"], [{"end_phrase": "Any other questions?"}],
                        "Here you go.\nAny other questions?\n**Note: generated.**",
                        {"reward": 0.0, "fields": {"follow_instruction_list_loose": [True]}}))
    # malformed rows
    out.append(meta_row(["keywords:made_up"], [{}], "x", {"status": 422}))
    out.append(meta_row(["keywords:frequency"], [{"keyword": "cat"}], "cat", {"status": 422}))  # missing kwargs
    out.append(meta_row(["punctuation:no_comma", "startend:quotation"], [None], "x", {"status": 422}))
    out.append(meta_row(["keywords:frequency"], [{"keyword": "cat", "frequency": "many", "relation": "at least"}],
                        "cat", {"status": 422}))
    OUT.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in out))
    print(f"wrote {len(out)} rows to {OUT}")


if __name__ == "__main__":
    main()
