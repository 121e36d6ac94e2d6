"""Share of the training loop's wall time spent outside generation, reward and training (one JSON).

Synchronous run (nothing overlaps, so the parts add up): overhead = loop - generation - reward -
training. Async run, trainer's view: overhead = loop - training - waiting for rollouts (weight sync,
control calls, metrics). Goal < 10%.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.async_vs_sync import run  # noqa: E402
from trainer.fleet import Fleet  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-new-tokens", type=int, default=16)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d, Fleet(["math"], log_dir=d) as fleet:
        sync = run(["grpo.async_grpo.enabled=false"], args, fleet.urls, Path(d), "sync")
        asyn = run(["grpo.async_grpo.enabled=true"], args, fleet.urls, Path(d), "async")
    loop = sync["loop_seconds"]
    # in the sync run generation and reward of a batch can overlap each other slightly; clamp at 0
    sync_over = max(0.0, loop - sync["generation_seconds"] - sync["reward_seconds"] - sync["training_seconds"]) / loop
    a_loop = asyn["loop_seconds"]
    async_over = max(0.0, a_loop - asyn["training_seconds"] - asyn["trainer_wait_seconds"]) / a_loop
    print(json.dumps({"benchmark": "engine_overhead", "steps": args.steps,
                      "sync_overhead_fraction": round(sync_over, 4), "async_overhead_fraction": round(async_over, 4),
                      "goal_fraction": 0.10, "async_weight_sync_s": asyn["weight_sync_seconds"],
                      "async_loop_s": a_loop, "sync_loop_s": loop}))


if __name__ == "__main__":
    main()
