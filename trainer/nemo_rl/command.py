"""``driver run --backend nemo-rl``: the command-line half of trainer/nemo_rl/backend.py."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trainer.config import ConfigError

PRESETS = ("rlvr", "swe1", "swe2", "rlhf")


def run_nemo_rl(args: argparse.Namespace) -> int:
    from trainer.blends import BlendError, load_blend
    from trainer.nemo_rl.backend import build_plan, format_plan, job_script, write_files
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
    profile = getattr(args, "run", None) or getattr(args, "batch", None)
    write_files(plan)
    script = job_script(plan.job, profile)
    if args.dry_run:
        print(format_plan(plan, script))
        if script is None:
            print("job script: not rendered (the launch module trainer/launch has no render_job_script in this "
                  "checkout); the trainer part above is what it runs")
        print(f"dry run: files written to {plan.out_dir}; nothing submitted")
        return 0
    problems = list(plan.warnings)
    if not profile:
        problems.append("submitting needs a profile: --run PROFILE (attached) or --batch PROFILE (detached), "
                        "from env.toml; or --dry-run to only write the files")
    if script is None:
        problems.append("the launch module (trainer/launch render_job_script) is not installed in this checkout")
    if problems:
        print(format_plan(plan, script))
        for p in problems:
            print(f"driver run: cannot submit: {p}", file=sys.stderr)
        return 2
    from trainer import launch  # the launch module submits (attached or detached) and streams logs

    return int(launch.submit(job=plan.job, profile=profile, script=script,  # type: ignore[attr-defined]
                             attached=bool(getattr(args, "run", None))))
