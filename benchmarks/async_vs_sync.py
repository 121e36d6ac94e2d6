"""Async GRPO vs the synchronous baseline on the same rows, seed and steps (one JSON object).

Same engine, same math environment server; only ``grpo.async_grpo.enabled`` differs.
throughput = rollouts / training-loop seconds; ceiling = (gen + train) / max(gen, train) from the
synchronous run (what perfect overlap could give). Goal: ratio >= 1.5, async trainer idle < 15%.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from trainer.grpo.synthetic import arithmetic_tasks  # noqa: E402
from trainer.config import load_config  # noqa: E402
from trainer.fleet import Fleet  # noqa: E402
from trainer.grpo.engine import run_grpo  # noqa: E402


def run(mode_overrides: list[str], args: argparse.Namespace, urls: dict, tmp: Path, name: str) -> dict:
    cfg = load_config("tiny", [f"logger.log_dir={tmp / name}", "logger.progress_bar=false", "checkpointing.enabled=false",
                               f"grpo.max_num_steps={args.steps}", "grpo.num_prompts_per_step=8",
                               "grpo.num_generations_per_prompt=8", "grpo.val_period=0", "grpo.val_at_start=false",
                               "grpo.val_at_end=false", "policy.warm_start.num_steps=20", f"grpo.seed={args.seed}",
                               f"policy.generation.max_new_tokens={args.max_new_tokens}", *mode_overrides])
    res = run_grpo(cfg, arithmetic_tasks(400, args.seed), [], urls, resume=False)
    s = res.summary
    s["rollouts_per_s"] = args.steps * cfg.rollout_batch_size / s["loop_seconds"]
    return s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=20,
                    help="more steps amortise the first step, which has nothing to overlap with (8 steps: ~1.4x)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-new-tokens", type=int, default=16)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d, Fleet(["math"], log_dir=d) as fleet:
        sync = run(["grpo.async_grpo.enabled=false"], args, fleet.urls, Path(d), "sync")
        asyn = run(["grpo.async_grpo.enabled=true", "grpo.async_grpo.max_trajectory_age_steps=1",
                    "grpo.async_grpo.in_flight_weight_updates=true"], args, fleet.urls, Path(d), "async")
    gen, train = sync["generation_seconds"] + sync["reward_seconds"], sync["training_seconds"]
    print(json.dumps({
        "benchmark": "async_vs_sync", "steps": args.steps, "rollouts_per_step": 64,
        "sync_rollouts_per_s": round(sync["rollouts_per_s"], 2), "async_rollouts_per_s": round(asyn["rollouts_per_s"], 2),
        "throughput_ratio": round(asyn["rollouts_per_s"] / sync["rollouts_per_s"], 3),
        "ceiling_ratio": round((gen + train) / max(gen, train, 1e-9), 3),
        "goal_ratio": 1.5,
        "sync_trainer_idle_fraction": sync["trainer_idle_fraction"],
        "async_trainer_idle_fraction": asyn["trainer_idle_fraction"], "goal_idle_fraction": 0.15,
        "sync_generation_s": sync["generation_seconds"], "sync_training_s": sync["training_seconds"],
        "async_in_flight_weight_updates": asyn["in_flight_weight_updates"],
        "async_dropped_stale_groups": asyn["dropped_stale_groups"],
    }))


if __name__ == "__main__":
    main()
