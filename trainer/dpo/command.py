"""`driver dpo`: Direct Preference Optimization on a pairs JSONL (NeMo-RL's DPO keys and loss).

    driver dpo data.train.data_path=runs/pairs.jsonl                 # the tiny preset (-c tiny)
    driver dpo -c dpo data.train.data_path=pairs.jsonl dpo.sft_loss_weight=0.1
    driver dpo ... --dry-run                                          # resolved config, nothing run
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from trainer.config import ConfigError


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "dpo", help="DPO on preference pairs (NeMo-RL's dpo.* keys and loss)",
        description="Direct Preference Optimization against a frozen reference (the initial weights; its logprobs "
                    "are computed once per pair). Pairs: NeMo-RL PreferenceDataset rows (context + two ranked "
                    "completions) or BinaryPreferenceDataset rows (prompt/chosen/rejected); `driver rollout --pairs` "
                    "writes them from tool-use rollouts. Trailing key=value arguments override config keys, e.g. "
                    "dpo.reference_policy_kl_penalty=0.1.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Outputs in logger.log_dir: metrics.jsonl (train/ and validation/ loss, preference_loss, sft_loss, "
               "accuracy, rewards_chosen_mean, rewards_rejected_mean, reward_margin; validation/hallucination_rate "
               "with data.hallucination_eval), summary.json, config.yaml, checkpoints/ (rerunning resumes).")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="dotlist config overrides")
    p.add_argument("-c", "--config", default="tiny",
                   help="config name in trainer/dpo/configs/ (tiny, dpo) or a YAML path (default: tiny)")
    p.add_argument("--dry-run", action="store_true", help="print the resolved config and exit")
    p.add_argument("--no-resume", action="store_true", help="ignore existing checkpoints in the log dir")
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads (default 1; raise it on a dedicated machine)")
    p.set_defaults(func=cmd_dpo)


def cmd_dpo(args: argparse.Namespace) -> int:
    from trainer.dpo.config import dpo_config_yaml, load_dpo_config
    from trainer.dpo.preference_data import PreferenceDataError
    from trainer.dpo.train import DPOError, run_dpo

    try:
        cfg = load_dpo_config(args.config, list(args.overrides))
    except ConfigError as exc:
        print(f"driver dpo: {exc}", file=sys.stderr)
        return 2
    if args.dry_run:
        print(dpo_config_yaml(cfg), end="")
        return 0
    import torch

    torch.set_num_threads(max(1, args.threads))
    try:
        summary = run_dpo(cfg, resume=not args.no_resume)
    except (DPOError, PreferenceDataError, ConfigError) as exc:
        print(f"driver dpo: {exc}", file=sys.stderr)
        return 1
    final = summary["final_train"]
    print(json.dumps({"log_dir": cfg.logger.log_dir, "steps": summary["steps"],
                      "train/loss": final.get("train/loss"), "train/accuracy": final.get("train/accuracy"),
                      "train/reward_margin": final.get("train/reward_margin")}))
    return 0
