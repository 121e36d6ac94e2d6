"""The ``driver`` command.

  driver blends                                   list the shipped blends
  driver data prep --blend tiny                   blend -> train/val JSONL + manifest
  driver rollout --blend tiny                     start the env servers, generate, score, summarise
  driver run --blend tiny                         GRPO training (trainer/run_command.py)
  driver dpo data.train.data_path=pairs.jsonl     DPO on preference pairs (trainer/dpo/)

Every subcommand has ``--help``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import re
import sys
from pathlib import Path
from typing import Any

DEFAULT_DATA_ROOT = Path("data")


class UsageError(Exception):
    pass


def _data_dir(args: argparse.Namespace) -> Path:
    return Path(args.output) if getattr(args, "output", None) else DEFAULT_DATA_ROOT / Path(args.blend).stem


# ---- driver blends --------------------------------------------------------------------------
def cmd_blends(_: argparse.Namespace) -> int:
    from trainer.blends import available, load_blend

    for name in available():
        blend = load_blend(name)
        print(f"{name:<8} {blend.description}  [{', '.join(s.label() for s in blend.sources)}]")
    return 0


# ---- driver data prep -----------------------------------------------------------------------
def cmd_data_prep(args: argparse.Namespace) -> int:
    from trainer.blends import BlendError
    from trainer.data_prep import DataPrepError, prep_blend
    from trainer.placeholders import PlaceholderError, local_sources_from_cli

    out = _data_dir(args)
    try:
        result = prep_blend(args.blend, out, sample=args.sample, force=args.force,
                            input_path=Path(args.input) if args.input else None, skip_invalid=args.skip_invalid,
                            pass_rates=Path(args.pass_rates) if args.pass_rates else None,
                            placeholder_sources=local_sources_from_cli(args.placeholder_source or []))
    except (BlendError, DataPrepError, PlaceholderError) as exc:
        print(f"driver data prep: {exc}", file=sys.stderr)
        return 1
    c = result.manifest["counts"]
    if result.skipped:
        print(f"{out}: up to date (blend and inputs unchanged); --force to rebuild")
    else:
        print(f"{out}: train {c['train']} rows, val {c['val']} rows, "
              f"{c['placeholders_resolved']} placeholders resolved, {c['low_effort_converted']} low-effort, "
              f"{c['curriculum_dropped']} dropped by curriculum ({result.manifest['seconds']}s)")
        if args.pass_rates:
            print(f"  pass rates: {c['pass_rates_matched']} train rows matched {args.pass_rates}")
        if c.get("reasoning_off") or c.get("reasoning_budget"):
            print(f"  reasoning control: {c['reasoning_off']} rows reasoning off, {c['reasoning_budget']} cut to a budget")
        print(f"  train per env: {c['train_per_env']}")
        if c.get("test"):
            print(f"  test {c['test']} rows -> {out / 'test.jsonl'} (split.train_ratio)")
        if c["rejected"]:
            print(f"  {c['rejected']} invalid rows skipped -> {out / 'rejected.jsonl'} (line numbers and reasons inside)")
    if args.wandb:
        from trainer.data_artifact import log_prepared_blend

        logged = log_prepared_blend(out, result.manifest, result.manifest.get("blend_file"), project=args.wandb,
                                    entity=args.wandb_entity)
        where = f"; offline run in {logged.run_dir} (`wandb sync {logged.run_dir}` uploads it)" \
            if logged.mode == "offline" else ""
        print(f"  W&B artifact {logged.name} (lineage: {result.manifest['blend']}-inputs -> data-prep run){where}")
    return 0


# ---- driver rollout -------------------------------------------------------------------------
def _parse_urls(pairs: list[str]) -> dict[str, str]:
    urls = {}
    for pair in pairs:
        if "=" not in pair:
            raise UsageError(f"--env-url {pair!r}: expected NAME=URL")
        name, url = pair.split("=", 1)
        urls[name] = url
    return urls


def cmd_rollout(args: argparse.Namespace) -> int:
    from servers.model.loading import ModelLoadError, resolve_source
    from trainer.blends import BlendError, load_blend
    from trainer.data_prep import DataPrepError, prep_blend
    from trainer.rollout.collect import RolloutSettings, format_summary, read_rollouts
    from trainer.rollout.generator import SamplingParams
    from trainer.rollout.task import TaskError, make_tasks, routes_of

    try:
        args.model = resolve_source(args.model)  # a checkpoint root or its `latest` -> the step (as envs model serve)
    except ModelLoadError as exc:
        print(f"driver rollout: --model {exc}", file=sys.stderr)
        return 1
    try:
        blend = load_blend(args.blend)
        split_file = Path(args.input) if args.input else DEFAULT_DATA_ROOT / blend.name / f"{args.split}.jsonl"
        if not args.input and not split_file.exists():
            print(f"{split_file} missing: running `driver data prep --blend {args.blend}` first")
            prep_blend(args.blend, split_file.parent)
    except (BlendError, DataPrepError) as exc:
        print(f"driver rollout: {exc}", file=sys.stderr)
        return 1
    rows = read_rollouts(split_file, repair_tail=False)
    if args.limit:
        rows = rows[: args.limit]
    if not rows:
        print(f"driver rollout: {split_file} has no rows", file=sys.stderr)
        return 1
    try:  # the routes data prep wrote beside the split; a file of its own is routed as data prep would
        tasks = make_tasks(rows, routes_of(split_file.parent, blend.default_env) or blend.routes())
    except TaskError as exc:
        raise UsageError(f"{split_file}: {exc}") from None
    output = Path(args.output) if args.output else Path("runs") / f"rollouts_{blend.name}_{args.split}.jsonl"
    settings = RolloutSettings(
        num_generations=args.num_generations, max_steps=args.max_steps, concurrency=args.concurrency,
        pass_threshold=args.pass_threshold,
        sampling=SamplingParams(temperature=args.temperature, top_p=args.top_p, max_new_tokens=args.max_new_tokens,
                                stop=tuple(args.stop or ())))
    summary = asyncio.run(_rollout(tasks, settings, output, args))
    print(format_summary(summary))
    from trainer.curriculum import pass_rates, pass_rates_path, write_pass_rates

    rates = write_pass_rates(pass_rates_path(output), pass_rates(rows, read_rollouts(output), args.pass_threshold,
                                                                 blend.curriculum.pass_rate_key))
    print(f"per-prompt pass rates -> {rates} (curriculum: driver data prep --blend {args.blend} --pass-rates {rates})")
    if args.pairs:  # DPO pairs against tool hallucination (trainer/dpo/preference_data.py)
        from trainer.dpo.preference_data import pairs_from_rollouts, write_pairs

        pairs = pairs_from_rollouts(read_rollouts(output), args.max_pairs_per_prompt)
        write_pairs(args.pairs, pairs)
        print(f"{len(pairs)} preference pairs (clean call chosen, hallucinated call rejected, same prompt) -> {args.pairs}")
    print(json.dumps({"summary": str(output.with_name(output.stem + "_summary.json")),
                      "rollouts_per_s": summary["this_run"]["rollouts_per_s"]}))
    return 0


async def _rollout(tasks: list[Any], settings: Any, output: Path, args: argparse.Namespace) -> Any:
    from trainer.fleet import Fleet
    from trainer.policy import Policy, PolicyConfig
    from trainer.rollout.collect import collect
    from trainer.rollout.generator import make_generator
    from trainer.rollout.scoring import EnvCalls, EnvInfo, RetryPolicy

    import torch

    torch.set_num_threads(max(1, args.threads))
    given = _parse_urls(args.env_url or [])
    needed = sorted({t.env for t in tasks})
    to_start = [env for env in needed if env not in given]
    print(f"environments: {', '.join(needed)}" + (f" (starting {', '.join(to_start)})" if to_start else ""))
    fleet = Fleet(to_start)
    await asyncio.to_thread(fleet.start)
    try:
        urls = {e: {**given, **fleet.urls}[e] for e in needed}
        info = EnvInfo(urls)
        stateful = {env: await asyncio.to_thread(info.stateful, env) for env in needed}
        policy = await asyncio.to_thread(Policy.load, PolicyConfig(model_name=args.model, seed=args.seed))
        async with EnvCalls(urls, retry=RetryPolicy(args.retries), timeout_s=args.timeout) as env, \
                make_generator(policy, max_batch=args.batch_size, seed=args.seed) as generator:
            return await collect(tasks, env=env, generator=generator, stateful=stateful, settings=settings,
                                 output=output)
    finally:
        await asyncio.to_thread(fleet.stop)


# ---- parser ---------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="driver", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("blends", help="list the shipped blends")
    p.set_defaults(func=cmd_blends)

    data = sub.add_parser("data", help="data commands (prep)")
    data_sub = data.add_subparsers(dest="data_command", metavar="SUBCOMMAND", required=True)
    p = data_sub.add_parser("prep", help="blend -> train.jsonl, val.jsonl, manifest.json",
                            description="Load a blend's rows, resolve placeholders, validate every row against its "
                                        "environment, split, write train/val/manifest. Skips when up to date.")
    p.add_argument("--blend", required=True, help="blend name (blends/NAME.yaml) or path to a blend YAML")
    p.add_argument("--sample", type=int, help="keep only the first N rows")
    p.add_argument("--force", action="store_true", help="rebuild even when the output is up to date")
    p.add_argument("--input", help="local JSONL file (or folder holding the blend's files) instead of the hub")
    p.add_argument("--output", help=f"output folder (default {DEFAULT_DATA_ROOT}/BLEND)")
    p.add_argument("--skip-invalid", action="store_true",
                   help="write invalid rows to rejected.jsonl and continue (default: fail on the first report)")
    p.add_argument("--wandb", nargs="?", const="verigym", metavar="PROJECT",
                   help="register the output as a W&B artifact with its lineage (inputs, blend, manifest) in PROJECT "
                        "(default verigym); WANDB_MODE=offline writes it locally for a later `wandb sync`")
    p.add_argument("--wandb-entity", help="W&B entity (team) for --wandb")
    p.add_argument("--pass-rates", metavar="FILE",
                   help="per-prompt pass rates written by `driver rollout --split train` (<output>_pass_rates.jsonl): "
                        "set on the train rows for the blend's curriculum (max_pass_rate, sort_by_difficulty)")
    p.add_argument("--placeholder-source", action="append", metavar="NAME=PATH",
                   help="a local copy of a placeholder source dataset (rlvr blends: DAPO-Math-17k, Skywork-OR1) instead "
                        "of the hub: NAME is dapo, skywork, the hub id or a blend's dataset name; PATH a JSONL or "
                        "parquet file of the source's split, or its downloaded folder (repeatable)")
    p.set_defaults(func=cmd_data_prep)

    p = sub.add_parser("rollout", help="generate K responses per prompt and score them on the env servers",
                       description="Starts the environment servers the blend needs (or uses --env-url), generates with "
                                   "the local policy, scores, writes NeMo-Gym rollout rows; resumable.")
    p.add_argument("--blend", required=True, help="blend name or YAML path")
    p.add_argument("--split", default="val", choices=["train", "val"], help="which prepared split (default val)")
    p.add_argument("--input", help="JSONL of rows to roll out instead of the prepared split")
    p.add_argument("--num-generations", type=int, default=8, help="responses per prompt, K (default 8)")
    p.add_argument("--limit", type=int, help="only the first N prompts")
    p.add_argument("--output", help="rollout JSONL (default runs/rollouts_BLEND_SPLIT.jsonl)")
    p.add_argument("--env-url", action="append", metavar="NAME=URL", help="use a running server for NAME (repeatable)")
    p.add_argument("--model", default="tiny",
                   help="policy.model_name: 'tiny', a Hugging Face folder, a run's checkpoints folder or its "
                        "checkpoints/latest (the newest step), or a hub id (default tiny)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--stop", action="append", help="stop string (repeatable)")
    p.add_argument("--max-steps", type=int, default=8, help="model turns per rollout for tool environments")
    p.add_argument("--batch-size", type=int, default=64, help="sequences decoded together")
    p.add_argument("--concurrency", type=int, default=128, help="rollouts in flight")
    p.add_argument("--pass-threshold", type=float, default=1.0, help="reward counted as a pass for pass@k")
    p.add_argument("--pairs", metavar="PATH", help="also write DPO preference pairs (NeMo-RL format) from the tool rows' "
                                                  "rollouts: a clean call chosen, a hallucinated tool or arguments outside "
                                                  "the schema rejected, same prompt (`driver dpo` trains on them)")
    p.add_argument("--max-pairs-per-prompt", type=int, default=4, help="with --pairs: at most this many per prompt")
    p.add_argument("--retries", type=int, default=3,
                   help="tries again on a failed server call (503, connection error, a failure-classed verify reply) "
                        "before recording the rollout as failed")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per server call")
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads (default 1: on a small shared CPU more threads oversubscribe and "
                        "tiny forwards get much slower; raise it on a dedicated machine)")
    p.set_defaults(func=cmd_rollout)

    # `driver run` lives in trainer/run_command.py (the GRPO engine); optional until it exists.
    try:
        run_command = importlib.import_module("trainer.run_command")
    except ModuleNotFoundError as exc:
        if exc.name != "trainer.run_command":
            raise
    else:
        run_command.add_parser(sub)
    from trainer.dpo.command import add_parser as add_dpo_parser  # `driver dpo` (trainer/dpo/)

    add_dpo_parser(sub)
    return parser


_OVERRIDE = re.compile(r"^[A-Za-z_][\w-]*(\.[\w-]+)*=")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Options, then ``key=value`` overrides anywhere on the line (``driver run --no-resume a.b=1``).

    argparse hands a ``nargs="*"`` positional only the words before the first option; the words it
    did not place come back here and are accepted when each one is a dotlist override for a command
    that takes them. Anything else is an error naming the word.
    """
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    takes_overrides = hasattr(args, "overrides")
    words = (list(args.overrides) if takes_overrides else []) + extra
    bad = [x for x in words if not _OVERRIDE.match(x)] if takes_overrides else extra
    if bad:
        sub = f"driver {args.command}" if getattr(args, "command", None) else "driver"
        hint = " (config overrides are key=value, e.g. grpo.max_num_steps=20)" if takes_overrides else ""
        parser.error(f"{sub}: unrecognized arguments: {' '.join(bad)}{hint}")
    if takes_overrides:
        args.overrides = words
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UsageError as exc:
        print(f"driver: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("driver: interrupted (rerun the same command to resume)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
