"""`driver run`: prepare the blend, start its environment servers, train with async GRPO.

    driver run --blend tiny                       # the README's first command
    driver run -c tiny grpo.max_num_steps=20      # dotlist overrides anywhere on the line
    driver run --blend tiny --dry-run             # resolved config + plan, nothing started
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from trainer.blends import BlendError
from trainer.config import ConfigError, MasterConfig, load_config, to_yaml
from trainer.data_prep import DataPrepError
from trainer.rollout.generation_server import GenerationServerError, placement
from trainer.rollout.task import MANIFEST, Routes, Task, TaskError, agent_name, make_tasks, routes_of


# Threads a local run holds at once, measured for the tiny recipe (Ray's local cluster with one
# generator, two environment servers): 340-360. A user's RLIMIT_NPROC counts them all.
LOCAL_RUN_THREADS = 400


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "run", help="train the policy with async GRPO against the blend's environment servers",
        description="Async GRPO with in-flight weight updates and bounded policy lag (NeMo-RL semantics). "
                    "Trailing key=value arguments override any config key, e.g. grpo.num_generations_per_prompt=16.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Outputs in logger.log_dir: metrics.jsonl, reward_curve.png, summary.json, config.yaml, checkpoints/ "
               "(rerunning the same command resumes from the latest checkpoint).")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="dotlist config overrides")
    p.add_argument("-c", "--config", default="tiny",
                   help="config name in trainer/configs/ or a YAML path (default: tiny); the Nemotron recipe's names "
                        "work too: rlvr1|rlvr2|rlvr3 (= -c rlvr --blend rlvrN), small, test")
    p.add_argument("--blend", default=None, help="blend name (blends/<name>.yaml); sets data.blend")
    p.add_argument("--data-dir", default=None,
                   help="prepared data folder (default: data/<blend>): a folder `driver data prep` wrote is used with "
                        "that prep's choices (--input, --skip-invalid, ...), redone only when the blend or inputs change")
    p.add_argument("--dry-run", action="store_true", help="print the resolved config and the plan, start nothing")
    p.add_argument("--no-resume", action="store_true", help="ignore existing checkpoints in the log dir")
    p.add_argument("--backend", choices=["local", "nemo-rl"], default="local",
                   help="local: the built-in engine; nemo-rl: write NeMo-RL's GRPO + NeMo-Gym configs and the job "
                        "(with a stage preset: -c rlvr|swe1|swe2|rlhf, or their _small/_test variants)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--run", metavar="PROFILE", help="submit as a job on env.toml's PROFILE and wait: stream the log, "
                                                       "exit with the job's status (docs/cluster.md)")
    where.add_argument("--batch", metavar="PROFILE", help="submit as a job on PROFILE and return: prints the job id and the log path")
    p.add_argument("--env-file", metavar="PATH", help="the profiles (default: $VERIGYM_ENV_FILE, else env.toml in the "
                                                      "current folder or a parent)")
    p.add_argument("--fleet-file", metavar="PATH", help="JSON {env: url or [urls]} of running environment servers (a job's "
                                                        "readiness gate writes it); used instead of starting them")
    p.set_defaults(func=cmd_run)


def _load_data(cfg: MasterConfig, data_dir: str | None, dry_run: bool = False
               ) -> tuple[list[Task], list[Task], list[str], str]:
    """The train and validation tasks (trainer.rollout.task: each row routed once, by the routes
    data prep wrote), the environments they need, and a line saying where the rows come from.

    A dry run never prepares data (that may download the blend): it reads what is prepared, or
    returns no tasks and lets the plan say how to prepare them. Files given with
    ``data.train_data_path`` use the manifest beside them when there is one, else they are routed
    as data prep routes (:func:`_file_routes`)."""
    def read(path: Path, what: str) -> list[dict[str, Any]]:
        if not path.is_file():
            raise ConfigError(f"{what} {path} does not exist")
        rows = []
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except ValueError as exc:
                    raise ConfigError(f"{path}:{number}: not a JSON row ({exc})") from None
        return rows

    if cfg.data.train_data_path:
        train_path = Path(cfg.data.train_data_path)
        train = read(train_path, "data.train_data_path")
        val = read(Path(cfg.data.validation_data_path), "data.validation_data_path") \
            if cfg.data.validation_data_path else []
        note = f"data: {cfg.data.train_data_path}" + (f", {cfg.data.validation_data_path}" if val else "")
        routes = routes_of(train_path.parent) or _file_routes(cfg, train + val)
    elif cfg.data.blend:
        from trainer.blends import load_blend
        from trainer.prepared_data import data_for_run

        blend = load_blend(cfg.data.blend)
        out = Path(data_dir) if data_dir else Path("data") / Path(cfg.data.blend).stem
        if dry_run:
            if not (out / "train.jsonl").is_file():
                from trainer.data_prep import planned_envs

                envs, unknown = planned_envs(blend)
                note = "data: not prepared yet; environments from the blend's sources" + (
                    f" ({', '.join(unknown)} not downloaded: its rows may name more)" if unknown else "")
                return [], [], envs, note
            note = f"data: {out} (as prepared; a run re-checks it against the blend and the inputs it was prepared from)"
            manifest = json.loads((out / MANIFEST).read_text()) if (out / MANIFEST).is_file() else {}
        else:
            prepared = data_for_run(blend, out)
            note, manifest = prepared.note, prepared.manifest
        train, val = read(out / "train.jsonl", "prepared file"), read(out / "val.jsonl", "prepared file")
        # a folder without a manifest (rows put there by hand) is routed as data prep would
        routes = Routes.from_manifest(manifest, blend.default_env) if manifest else blend.routes()
    else:
        raise ConfigError("set data.blend or data.train_data_path")
    if not train:
        raise ConfigError("no training rows")
    try:
        train_tasks, val_tasks = make_tasks(train, routes), make_tasks(val, routes)
    except TaskError as exc:
        raise ConfigError(str(exc)) from None
    return train_tasks, val_tasks, sorted({t.env for t in train_tasks + val_tasks}), note


def _file_routes(cfg: MasterConfig, rows: list[dict[str, Any]]) -> Routes:
    """The routes of ``data.train_data_path`` rows, as data prep routes: ``agent_ref.name``
    through the agent names the installed environments declare (and ``data.blend``'s agent_map
    when one is set); a row without one may name its environment in ``env``. An agent name no
    installed environment declares is an error."""
    agents = {name for r in rows if (name := agent_name(r))}
    if not agents:
        return Routes()  # every row names its environment: no catalog to ask
    from trainer.env_catalog import installed

    declared = dict(installed().routes())
    if cfg.data.blend:
        from trainer.blends import load_blend

        declared.update(load_blend(cfg.data.blend).agent_map)
    unknown = sorted(agents - set(declared))
    if unknown:
        raise ConfigError(f"agent_ref.name {unknown[0]!r} in {cfg.data.train_data_path} is no installed environment's "
                          f"agent name (environments: {', '.join(sorted(set(declared.values())))}); map it with a "
                          "blend's agent_map (data.blend=...) or prepare the file with `driver data prep`")
    return Routes(declared)


def plan(cfg: MasterConfig, envs: list[str], n_train: int, n_val: int, said: tuple[str, ...] = ()) -> str:
    """The plan a run prints first; ``said``: lines on top (how -c and the data were read)."""
    g, a = cfg.grpo, cfg.grpo.async_grpo
    mode = (f"async, max_trajectory_age_steps={a.max_trajectory_age_steps}, in_flight_weight_updates={cfg.in_flight_updates}"
            if a.enabled else "synchronous baseline (same engine, max age 0)")
    if cfg.env.urls:
        to_start = "none (env.urls given: " + ", ".join(cfg.env.urls) + ")"
    else:
        to_start = ", ".join(envs) or ("none known before the data is prepared (its rows name them)" if not n_train
                                       else "none")
    epochs = f"{g.max_num_steps * g.num_prompts_per_step / n_train:.2f} epochs" if n_train else "epochs: once prepared"
    return "\n".join([
        *(line for line in said if line),
        f"environments to start: {to_start}",
        f"data: {n_train} train rows, {n_val} validation rows (max_val_samples={g.max_val_samples})",
        f"steps: {g.max_num_steps} ({g.num_prompts_per_step} prompts x {g.num_generations_per_prompt} generations = "
        f"{cfg.rollout_batch_size} rollouts/step; {epochs})",
        f"optimizer steps per GRPO step: {cfg.rollout_batch_size // cfg.global_batch_size} "
        f"(train_global_batch_size={cfg.global_batch_size}, micro batch {cfg.policy.train_micro_batch_size})",
        f"mode: {mode}",
        f"ray: {cfg.cluster.ray_address or 'local (started by the driver)'}; generators: {cfg.cluster.num_generation_workers}; "
        f"weight transport: {cfg.cluster.weight_transport}",
        placement(cfg),
        _warm_start_plan(cfg.policy.warm_start) if cfg.policy.warm_start.enabled else "warm start: off",
        f"outputs: {cfg.logger.log_dir}",
    ])


def _read_recipe_names(args: argparse.Namespace) -> str:
    """``-c rlvr2`` (a Nemotron recipe config name) -> ``-c rlvr --blend rlvr2``, in ``args``; a
    stage preset without ``--blend`` on the NeMo-RL backend -> its stage's blend. Returns the line
    that says so ("" when nothing was read differently). Raises ConfigError."""
    from trainer.config import CONFIG_DIR
    from trainer.recipe_names import recipe_config, stage_default_blend

    name = args.config
    if not (Path(name).exists() or (CONFIG_DIR / f"{name}.yaml").exists()):
        try:
            recipe = recipe_config(name, args.blend)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if recipe is not None:
            args.config, args.blend = recipe.preset, recipe.blend
            return recipe.said()
    if args.backend == "nemo-rl" and not args.blend:
        blend = stage_default_blend(args.config)
        if blend is not None:
            args.blend = blend
            return f"config: -c {args.config} trains on --blend {blend} (the stage's blend; --blend picks another)"
    return ""


def cmd_run(args: argparse.Namespace) -> int:
    try:
        recipe_line = _read_recipe_names(args)
    except ConfigError as exc:
        print(f"driver run: {exc}", file=sys.stderr)
        return 2
    if args.backend == "nemo-rl":
        from trainer.nemo_rl.command import run_nemo_rl

        if recipe_line:  # before NeMo-RL's plan, which is written from the preset and blend it names
            print(recipe_line, flush=True)
        return run_nemo_rl(args)
    overrides = list(args.overrides)
    if args.blend:
        overrides.insert(0, f"data.blend={args.blend}")
    if args.run or args.batch:  # a wrong profile fails before the data is prepared
        from trainer.launch.profiles import ProfileError, load_profile

        try:
            load_profile(args.run or args.batch, args.env_file)
        except ProfileError as exc:
            print(f"driver run: {exc}", file=sys.stderr)
            return 2
    try:
        cfg = load_config(args.config, overrides)
        if args.blend and args.config == "tiny" and args.blend != "tiny" and not any(o.startswith("logger.log_dir=") for o in overrides):
            cfg.logger.log_dir = f"runs/{args.blend}"
        train, val, envs, data_line = _load_data(cfg, args.data_dir, dry_run=args.dry_run)
    except (ConfigError, BlendError, DataPrepError) as exc:
        print(f"driver run: {recipe_line + '; ' if recipe_line else ''}{exc}", file=sys.stderr)
        return 2
    if args.fleet_file:
        from trainer.launch.fleet_steps import read_fleet_file

        try:
            cfg.env.urls = read_fleet_file(args.fleet_file)
        except ValueError as exc:
            print(f"driver run: --fleet-file: {exc}", file=sys.stderr)
            return 2
    if args.run or args.batch:  # the same run as a job on a cluster profile (trainer/launch)
        from trainer.launch.engine_job import run_engine_on_profile
        from trainer.launch.profiles import ProfileError
        from trainer.launch.submit import LaunchError

        if args.dry_run:
            print(to_yaml(cfg) + "# plan\n" + plan(cfg, envs, len(train), len(val), (recipe_line, data_line)))
        try:
            return run_engine_on_profile(args, cfg, envs)
        except (ProfileError, LaunchError) as exc:
            print(f"driver run: {exc}", file=sys.stderr)
            return 2
    judge_lines, judge_problems = [], []
    if envs and not cfg.env.urls:  # judges this run's environments will call, checked before anything starts
        from trainer.model_servers import ModelServerError, local_report

        try:
            judge_lines, judge_problems = local_report(envs, cfg.env.server_config)
        except ModelServerError as exc:
            print(f"driver run: env.server_config: {exc}", file=sys.stderr)
            return 2
    if args.dry_run:
        print(to_yaml(cfg))
        print("# plan\n" + plan(cfg, envs, len(train), len(val), (recipe_line, data_line)))
        print("\n".join(judge_lines + [f"missing: {p}" for p in judge_problems]))
        if not train and cfg.data.blend:
            out = Path(args.data_dir) if args.data_dir else Path("data") / Path(cfg.data.blend).stem
            print(f"data: {out} is not prepared; a real run prepares it (`driver data prep --blend {cfg.data.blend}`; "
                  "offline: --input FILE, or HF_HUB_OFFLINE=1 with the files in the Hugging Face cache)")
        return 0
    from servers.model.loading import ModelLoadError, resolve_source

    try:  # a run's checkpoints folder or its `latest` -> the step it names (the resolver envs model serve uses)
        cfg.policy.model_name = resolve_source(cfg.policy.model_name)
    except ModelLoadError as exc:
        print(f"driver run: policy.model_name: {exc}", file=sys.stderr)
        return 2
    if cfg.cluster.ray_address is None:  # a local Ray: its threads count against a user's RLIMIT_NPROC
        from servers.process_budget import shortfall

        short = shortfall(LOCAL_RUN_THREADS, "a local run (Ray, the trainer and generator actors, the environment servers)")
        if short:
            print(f"driver run: {short}", file=sys.stderr)
            return 2
    print(plan(cfg, envs, len(train), len(val), (recipe_line, data_line)), flush=True)
    if judge_lines:
        print("\n".join(judge_lines), flush=True)
    if judge_problems:
        for problem in judge_problems:
            print(f"driver run: {problem}", file=sys.stderr)
        return 2
    from trainer.fleet import Fleet, FleetError
    from trainer.grpo.engine import run_grpo
    from trainer.grpo.interrupt import RunFailed, StopRequest, as_run_interrupted

    from trainer.reaper import start_reaper

    with StopRequest() as stop:
        fleet = None
        reaper = start_reaper()  # ends what a killed driver leaves (Ray's agents and workers); stopped below
        try:
            if cfg.env.urls:
                urls = dict(cfg.env.urls)
            else:
                env_logs = Path(cfg.logger.log_dir) / "env_logs"
                env_logs.mkdir(parents=True, exist_ok=True)
                fleet = Fleet(envs, overrides=cfg.env.server_config, log_dir=env_logs)
                stop.on_force(fleet.kill_now)
                fleet.start()
                urls = fleet.urls
            result = run_grpo(cfg, train, val, urls, resume=not args.no_resume, stop=stop,
                              watch=[fleet.check] if fleet is not None else [])
        except GenerationServerError as exc:  # the generation server this run starts did not come up
            print(f"driver run: {exc}", file=sys.stderr)
            return 1
        except FleetError as exc:  # an environment server did not come up
            print(f"driver run: {exc.line}", file=sys.stderr)
            return 1
        except RunFailed as exc:  # a server it started exited, a component failed: one line, the rest in error.log
            print(f"driver run: {stopped_message(exc, cfg)}", file=sys.stderr, flush=True)
            return exc.exit_code
        except KeyboardInterrupt as raised:  # RunInterrupted from our handler (or a library's own re-raise)
            exc = as_run_interrupted(raised, stop)
            if fleet is not None:
                with stop.deferred():
                    fleet.stop()
                fleet = None
            print(stopped_message(exc, cfg), flush=True)
            return exc.exit_code
        finally:
            if fleet is not None:
                with stop.deferred():
                    fleet.stop()
            if reaper is not None:  # this driver cleaned up itself: nothing for it to do
                reaper.kill()
                reaper.wait()
    print(format_summary(result.summary))
    return 0


def stopped_message(exc: Any, cfg: MasterConfig) -> str:
    """The last line a stopped run prints: where it stopped and what the same command will do
    (``exc``: a RunInterrupted, or a RunFailed, whose line comes first and which says where its
    full text went)."""
    ckpt = Path(cfg.checkpointing.checkpoint_dir or Path(cfg.logger.log_dir) / "checkpoints")
    if exc.steps_done is None:
        where = "stopped before training started"
    else:
        where = f"stopped at step {exc.steps_done}"
    if exc.checkpoint_written:
        then = f"final checkpoint written ({ckpt / f'step_{exc.checkpoint_step:06d}'})"
    elif exc.checkpoint_step:
        then = f"the last checkpoint is step {exc.checkpoint_step} ({ckpt}); steps after it are redone"
    elif cfg.checkpointing.enabled:
        then = "no checkpoint yet: a rerun starts from the beginning"
    else:
        then = "checkpointing is off: a rerun starts from the beginning"
    if hasattr(exc, "error_log"):  # RunFailed
        more = f"; full error: {exc.error_log}" if exc.error_log else ""
        return f"{exc}; {where}{more}; {then}; fix the cause, then rerun the same command"
    return f"driver: {where} ({exc}); {then}; resume with the same command"


def format_summary(s: dict[str, Any]) -> str:
    val = s.get("validation") or []
    lines = ["", "run summary",
             f"  steps {s['steps']} (resumed from {s['resumed_from']}), wall {s['wall_seconds']}s, loop {s['loop_seconds']}s",
             f"  time: generating {s['generation_seconds']}s, training {s['training_seconds']}s, trainer waiting "
             f"{s['trainer_wait_seconds']}s (idle {s['trainer_idle_fraction']:.0%}), weight sync {s['weight_sync_seconds']}s, "
             f"reward {s['reward_seconds']}s",
             f"  generated tokens {s['generated_tokens']}, in-flight weight updates {s['in_flight_weight_updates']}, "
             f"dropped stale groups {s['dropped_stale_groups']}",
             *([f"  policy lag: group mean {lag['group_lag_mean']} (max {lag['group_lag_max']}), token mean "
                f"{lag['token_lag_mean']} (max {lag['token_lag_max']}); samples with tokens of 2+ weight versions "
                f"{lag['mixed_version_samples_frac']:.1%} (in {lag['steps_with_mixed_versions']} steps)"]
               if (lag := s.get("lag")) else []),
             f"  failed samples (masked) {s['failed_samples']} {s['failures_by_class'] or ''}, re-scored {s['retried_scores']}"]
    if val:
        lines.append(f"  validation reward: step {val[0][0]}: {val[0][1]:.3f} -> step {val[-1][0]}: {val[-1][1]:.3f}  "
                     f"(all: {', '.join(f'{st}:{v:.2f}' for st, v in val)})")
    if s.get("reward_curve"):
        lines.append(f"  reward curve: {s['reward_curve']}")
    return "\n".join(lines)


def _warm_start_plan(ws: Any) -> str:
    stops = ([f"loss <= {ws.target_loss:g}"] if ws.target_loss else []) + \
            ([f"exact-match accuracy >= {ws.target_accuracy:g}"] if ws.target_accuracy else [])
    return f"warm start: up to {ws.num_steps} supervised steps" + (f", stopping at {' or '.join(stops)}" if stops else "")
