"""``driver run --backend nemo-rl``: the command-line half of trainer/nemo_rl/backend.py."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trainer.config import ConfigError

PRESETS = ("rlvr", "swe1", "swe2", "rlhf")


def run_nemo_rl(args: argparse.Namespace) -> int:
    from trainer.blends import BlendError, load_blend
    from trainer.nemo_rl.backend import build_plan, format_plan, job_spec, write_files
    from trainer.nemo_rl.schema import SchemaError

    if args.config == "tiny":
        print("driver run: --backend nemo-rl needs a stage preset: -c " + "|".join(PRESETS)
              + " (or rlvr_small, rlvr_test, ...; a YAML path also works)", file=sys.stderr)
        return 2
    if not args.blend:
        print("driver run: --backend nemo-rl needs --blend NAME (the rows NeMo-RL trains on)", file=sys.stderr)
        return 2
    try:
        blend = load_blend(args.blend)
        data_dir = Path(args.data_dir) if args.data_dir else Path("data") / blend.name
        plan = build_plan(args.config, list(args.overrides), blend, data_dir)
    except (ConfigError, BlendError, SchemaError) as exc:
        print(f"driver run: {exc}", file=sys.stderr)
        return 2
    profile_name = getattr(args, "run", None) or getattr(args, "batch", None)
    attached = bool(getattr(args, "run", None))
    write_files(plan)
    profile = wandb = None
    script = None
    if profile_name:
        from trainer.launch.job_script import render_job_script
        from trainer.launch.profiles import ProfileError, SlurmProfile, load_profile

        try:
            profile, wandb, _ = load_profile(profile_name, getattr(args, "env_file", None))
            fleet_nodes = profile.fleet_nodes if isinstance(profile, SlurmProfile) else 0
            spec = job_spec(plan.job, f"verigym-nemo-rl-{blend.name}", plan.out_dir / "job", fleet_nodes)
            script = render_job_script(profile, spec, attached=attached, wandb=wandb)
        except (ProfileError, ValueError) as exc:
            print(f"driver run: {exc}", file=sys.stderr)
            return 2
    if args.dry_run:
        print(format_plan(plan, script))
        if script is None:
            print("job script: pass --run PROFILE or --batch PROFILE (env.toml) to see the script for that profile")
        print(f"dry run: files written to {plan.out_dir}; nothing submitted")
        return 0
    problems = list(plan.warnings)
    if not profile_name:
        problems.append("submitting needs a profile: --run PROFILE (attached) or --batch PROFILE (detached), "
                        "from env.toml; or --dry-run to only write the files")
    if problems:
        print(format_plan(plan, script))
        for p in problems:
            print(f"driver run: cannot submit: {p}", file=sys.stderr)
        return 2
    from trainer.launch.submit import LaunchError, launch

    print(format_plan(plan, None), flush=True)
    try:
        return launch(profile, spec, attached=attached, wandb=wandb)
    except LaunchError as exc:
        print(f"driver run: {exc}", file=sys.stderr)
        return 2
