"""``driver run --backend nemo-rl``: the command-line half of trainer/nemo_rl/backend.py (the config,
the plan) and trainer/nemo_rl/launch.py (NeMo-RL's ray.sub)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trainer.config import ConfigError

PRESETS = ("rlvr", "swe1", "swe2", "rlhf")


def run_nemo_rl(args: argparse.Namespace) -> int:
    from trainer.blends import BlendError, load_blend
    from trainer.nemo_rl.backend import build_plan, format_plan, write_files
    from trainer.nemo_rl.schema import SchemaError

    if args.config == "tiny":
        print("driver run: --backend nemo-rl needs a stage preset: -c " + "|".join(PRESETS)
              + " (or rlvr_small, rlvr_test, rlvr_1node, ...; a YAML path also works)", file=sys.stderr)
        return 2
    if not args.blend:
        print("driver run: --backend nemo-rl needs --blend NAME (the rows NeMo-RL trains on)", file=sys.stderr)
        return 2
    profile_name = getattr(args, "run", None) or getattr(args, "batch", None)
    attached = bool(getattr(args, "run", None))
    profile = wandb = None
    if profile_name:
        from trainer.launch.profiles import ProfileError, load_profile

        try:
            profile, wandb, _ = load_profile(profile_name, getattr(args, "env_file", None))
        except ProfileError as exc:
            print(f"driver run: {exc}", file=sys.stderr)
            return 2
    try:
        blend = load_blend(args.blend)
        data_dir = Path(args.data_dir) if args.data_dir else Path("data") / blend.name
        plan = build_plan(args.config, list(args.overrides), blend, data_dir, profile=profile,
                          profile_name=profile_name or "PROFILE")
    except (ConfigError, BlendError, SchemaError) as exc:
        print(f"driver run: {exc}", file=sys.stderr)
        return 2
    write_files(plan)
    job = None
    problems = []  # besides plan.warnings (printed with the plan)
    if profile_name:
        from trainer.nemo_rl import launch

        problems += launch.profile_problems(profile, plan)
        if isinstance(profile, launch.SlurmProfile):
            exp_name = str(plan.config.get("logger", {}).get("wandb", {}).get("name") or f"verigym-{blend.name}")
            job = launch.render(plan, profile, exp_name=exp_name, wandb=wandb, attached=attached)
    else:
        problems.append("submitting needs a profile: --run PROFILE (attached) or --batch PROFILE (detached), "
                        "from env.toml; or --dry-run to only write the files")
    described = job.describe() if job is not None else None
    if args.dry_run:
        if job is not None:
            launch.write(job)
        print(format_plan(plan, described))
        if job is None:
            print("job: pass --run PROFILE or --batch PROFILE (env.toml) to see NeMo-RL's sbatch line for that profile")
        for p in problems:
            print(f"cannot submit yet: {p}")
        print(f"dry run: files written to {plan.out_dir}; nothing submitted")
        return 0
    if problems or plan.warnings:
        print(format_plan(plan, described))
        for p in [*plan.warnings, *problems]:
            print(f"driver run: cannot submit: {p}", file=sys.stderr)
        return 2
    from trainer.launch.submit import LaunchError

    print(format_plan(plan, described), flush=True)
    try:
        return launch.submit(job, attached=attached)
    except LaunchError as exc:
        print(f"driver run: {exc}", file=sys.stderr)
        return 2
