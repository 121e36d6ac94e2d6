"""Benchmark: ``driver data prep`` on a 100,000-row local blend in the hub format.

Writes a blend file shaped like the Nemotron RLVR release (math, MCQA, reasoning-gym rows,
and ``_hf_placeholder`` rows pointing at local DAPO-Math-17k / Skywork-OR1 files in their
source formats), runs the full prep (placeholder resolution, validation of every row
against its environment's schema, split, low-effort conversion, hashing) and prints ONE
JSON object: rows, seconds, rows/s. Target: <= 60 s on the 2-core dev machine.

    python benchmarks/data_prep.py [--rows 100000]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from trainer.blends import load_blend  # noqa: E402
from trainer.data_prep import PrepOptions, prepare  # noqa: E402

DAPO_WRAP = ("Solve the following math problem step by step. The last line of your response should be of the form "
             "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n{q}\n\n"
             "Remember to put your answer on its own line after \"Answer:\".")


def write_inputs(folder: Path, rows: int, seed: int = 0) -> Path:
    rng = random.Random(seed)
    n_source = 2000
    with open(folder / "dapo.jsonl", "w") as fh:
        for i in range(n_source):
            fh.write(json.dumps({"prompt": [{"role": "user", "content": DAPO_WRAP.format(q=f"Find {i} + {i}.")}],
                                 "reward_model": {"ground_truth": str(2 * i), "style": "rule"},
                                 "data_source": "math_dapo"}) + "\n")
    with open(folder / "skywork.jsonl", "w") as fh:
        for i in range(n_source):
            fh.write(json.dumps({"prompt": [{"role": "user", "content": f"What is {i} squared?"}],
                                 "reward_model": {"ground_truth": json.dumps([str(i * i)]), "style": "rule"},
                                 "data_source": "skywork"}) + "\n")
    agent = lambda name: {"type": "responses_api_agents", "name": name}  # noqa: E731
    with open(folder / "rlvr_bench.jsonl", "w") as fh:
        for i in range(rows):
            kind = rng.random()
            if kind < 0.1:
                row = {"dataset": "super_v3_lcsft_step1000_dapo17k", "agent_ref": agent("math_with_judge_simple_agent"),
                       "_hf_placeholder": {"row": rng.randrange(n_source), "question_template": {
                           "prefix": "Solve the problem and box the answer.\n\n", "suffix": "\n\n"}},
                       "pass_rate": rng.random()}
            elif kind < 0.2:
                row = {"dataset": "super_v3_lcsft_step1000_skyworks", "agent_ref": agent("math_with_judge_simple_agent"),
                       "_hf_placeholder": {"row": rng.randrange(n_source), "question_template":
                                           "{question}\n\nPut the final answer in \\boxed{}."}}
            elif kind < 0.55:
                q = f"What is {i} + {i % 97}?"
                row = {"responses_create_params": {"input": [{"role": "user", "content": q}]}, "question": q,
                       "expected_answer": str(i + i % 97), "agent_ref": agent("math_with_judge_simple_agent"),
                       "pass_rate": rng.random(), "uuid": f"m{i}"}
            elif kind < 0.8:
                row = {"responses_create_params": {"input": [{"role": "user", "content": f"Q{i}?\nA: x\nB: y"}]},
                       "options": [{"A": "x"}, {"B": "y"}], "expected_answer": "A", "grading_mode":
                       "strict_single_letter_boxed", "agent_ref": agent("mcqa_simple_agent"), "uuid": f"q{i}"}
            else:
                row = {"responses_create_params": {"input": [{"role": "user", "content": f"Calculate {i} - 1."}]},
                       "question": f"Calculate {i} - 1.", "answer": str(i - 1),
                       "metadata": {"source_dataset": "basic_arithmetic"}, "agent_ref": agent("reasoning_gym_simple_agent")}
            fh.write(json.dumps(row) + "\n")
    blend = {"description": "benchmark blend", "sources": [{"path": "rlvr_bench.jsonl"}],
             "placeholders": {"resolve": True, "local_sources": {
                 "super_v3_lcsft_step1000_dapo17k": str(folder / "dapo.jsonl"),
                 "super_v3_lcsft_step1000_skyworks": str(folder / "skywork.jsonl")}},
             "split": {"val_holdout": 100}, "low_effort": {"fraction": 0.02}}
    import yaml

    (folder / "bench.yaml").write_text(yaml.safe_dump(blend))
    return folder / "bench.yaml"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="verigym-bench-prep-") as tmp:
        folder = Path(tmp)
        blend_path = write_inputs(folder, args.rows)
        start = time.perf_counter()
        result = prepare(load_blend(str(blend_path)), PrepOptions(output=folder / "out", progress=False))
        seconds = time.perf_counter() - start
        again = time.perf_counter()
        skipped = prepare(load_blend(str(blend_path)), PrepOptions(output=folder / "out", progress=False)).skipped
        up_to_date_s = time.perf_counter() - again
    counts = result.manifest["counts"]
    print(json.dumps({"benchmark": "data_prep", "rows": args.rows, "seconds": round(seconds, 2),
                      "rows_per_s": round(args.rows / seconds), "target_s": 60, "meets_target": seconds <= 60,
                      "placeholders_resolved": counts["placeholders_resolved"], "train": counts["train"],
                      "val": counts["val"], "rejected": counts["rejected"], "up_to_date_check_s": round(up_to_date_s, 2),
                      "skipped_when_up_to_date": skipped}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
