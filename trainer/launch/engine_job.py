"""``driver run --run/--batch PROFILE`` for the built-in engine: the same ``driver run`` command,
submitted as the trainer of a job script (trainer/launch/job_script.py).

On the submitting machine: the config is checked and the blend prepared (so a bad key or a
missing file fails here, not after a queue wait). In the job: Ray over the allocation, the
blend's environment servers on the fleet nodes, then ``driver run`` with ``--fleet-file`` (the
gate's URLs) and ``cluster.ray_address=auto`` (the job's Ray, from ``RAY_ADDRESS``). Outputs go to
``logger.log_dir`` as in a local run; the job files (script, Slurm log, fleet file) to
``<logger.log_dir>/job/``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trainer.config import MasterConfig
from trainer.fleet import override_pairs
from trainer.launch.job_script import FleetSpec, JobSpec, model_server_steps, render_job_script
from trainer.launch.profiles import LocalProfile, SlurmProfile, WandbSettings, load_profile
from trainer.launch.submit import LaunchError, launch, write_job_script
from trainer.model_servers import ModelServerError, ModelServerPlan, judge_uses, plan_model_servers


def fleet_overrides(envs: list[str] | tuple[str, ...], server_config: dict,
                    routed: list[tuple[str, str, str]] = ()) -> tuple[str, ...]:
    """``env.server_config`` as ``envs serve`` overrides (``NAME.key=value``) for the envs the fleet serves:
    a job's fleet is configured exactly as a local run's (trainer/fleet.py). A judge ``base_url`` the
    job fills in (``routed``: ``(env, judge, model)``, the job's model servers) is left out."""
    replaced = {f"{env}.judges.{judge}.base_url" for env, judge, _ in routed}
    return tuple(f"{env}.{pair}" for env in envs for pair in override_pairs(dict(server_config.get(env, {})))
                 if f"{env}.{pair.split('=', 1)[0]}" not in replaced)


def model_server_plan(envs: list[str] | tuple[str, ...], server_config: dict, profile: LocalProfile | SlurmProfile,
                      profile_name: str, preset: dict | None = None) -> ModelServerPlan:
    """What the job's judges need and how it gets each model (trainer/model_servers.py)."""
    return plan_model_servers(judge_uses(list(envs), server_config), preset=preset, profile=profile.model_servers,
                              gpus_per_node=profile.gpus_per_node, where=profile_name)


def engine_job(args: argparse.Namespace, cfg: MasterConfig, envs: list[str], profile: LocalProfile | SlurmProfile,
               wandb: WandbSettings, models: ModelServerPlan | None = None) -> JobSpec:
    log_dir = Path(cfg.logger.log_dir).resolve()
    job_dir = log_dir / "job"
    in_container = isinstance(profile, SlurmProfile) and bool(profile.container_image)
    python = "python3" if in_container else sys.executable
    config = args.config if not Path(args.config).exists() else str(Path(args.config).resolve())
    command = [python, "-m", "trainer.cli", "run", "-c", config]
    if args.blend:
        command += ["--blend", args.blend]
    data_dir = Path(args.data_dir) if args.data_dir else (Path("data") / Path(cfg.data.blend).stem if cfg.data.blend else None)
    if data_dir is not None:
        command += ["--data-dir", str(data_dir.resolve())]
    served = tuple(envs) if not cfg.env.urls else ()
    models = models or ModelServerPlan()
    routes = models.judge_routes()
    fleet = FleetSpec(envs=served, overrides=fleet_overrides(served, cfg.env.server_config, routes),
                      judges=tuple(f"{env}.{judge}={model}" for env, judge, model in routes))
    if fleet.envs:
        command += ["--fleet-file", str(job_dir / "fleet.json")]
    if args.no_resume:
        command.append("--no-resume")
    command += list(args.overrides)
    if wandb.project and not any(o.startswith("logger.wandb.project=") for o in args.overrides):
        command.append(f"logger.wandb.project={wandb.project}")
    # last, so they win: the job's own Ray, and the log dir resolved here (the job may start elsewhere)
    command += [f"logger.log_dir={log_dir}", "cluster.ray_address=auto"]
    name = f"verigym-{Path(cfg.data.blend).stem if cfg.data.blend else 'run'}"
    return JobSpec(name=name, job_dir=job_dir, trainer_command=tuple(command), fleet=fleet,
                   workdir=Path.cwd(), python=python,
                   model_servers=model_server_steps(models, python=python, vllm=tuple(profile.vllm_command), multi_node=False))


def run_engine_on_profile(args: argparse.Namespace, cfg: MasterConfig, envs: list[str]) -> int:
    """Submit this ``driver run`` to ``--run``/``--batch`` PROFILE; attached: the job's exit status."""
    attached = bool(args.run)
    name = args.run or args.batch
    profile, wandb, env_path = load_profile(name, args.env_file)
    try:
        models = model_server_plan(envs if not cfg.env.urls else [], cfg.env.server_config, profile, name)
        job = engine_job(args, cfg, envs, profile, wandb, models)
    except ModelServerError as exc:
        raise LaunchError(str(exc)) from None
    print("\n".join(models.lines()))
    if models.missing and not args.dry_run:
        raise LaunchError(f"{len(models.missing)} model server(s) missing: {models.missing[0]}")
    if args.dry_run:
        script = write_job_script(profile, job, attached=attached, wandb=wandb)
        print(f"# job script ({env_path} [{args.run or args.batch}]), written to {script}, not submitted\n"
              + render_job_script(profile, job, attached=attached, wandb=wandb))
        if not envs and not cfg.env.urls:
            print("# no environment servers in this script: they come from the prepared data "
                  f"(`driver data prep --blend {cfg.data.blend}`), which a real submission prepares first")
        if models.missing:
            print("# cannot submit: a model server is missing (MISSING above)")
        return 0
    return launch(profile, job, attached=attached, wandb=wandb)
