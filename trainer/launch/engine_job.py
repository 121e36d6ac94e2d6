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
from trainer.launch.job_script import FleetSpec, JobSpec, render_job_script
from trainer.launch.profiles import LocalProfile, SlurmProfile, WandbSettings, load_profile
from trainer.launch.submit import launch, write_job_script


def engine_job(args: argparse.Namespace, cfg: MasterConfig, envs: list[str], profile: LocalProfile | SlurmProfile,
               wandb: WandbSettings) -> JobSpec:
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
    fleet = FleetSpec(envs=tuple(envs) if not cfg.env.urls else ())
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
                   workdir=Path.cwd(), python=python)


def run_engine_on_profile(args: argparse.Namespace, cfg: MasterConfig, envs: list[str]) -> int:
    """Submit this ``driver run`` to ``--run``/``--batch`` PROFILE; attached: the job's exit status."""
    attached = bool(args.run)
    profile, wandb, env_path = load_profile(args.run or args.batch, args.env_file)
    job = engine_job(args, cfg, envs, profile, wandb)
    if args.dry_run:
        script = write_job_script(profile, job, attached=attached, wandb=wandb)
        print(f"# job script ({env_path} [{args.run or args.batch}]), written to {script}, not submitted\n"
              + render_job_script(profile, job, attached=attached, wandb=wandb))
        if not envs and not cfg.env.urls:
            print("# no environment servers in this script: they come from the prepared data "
                  f"(`driver data prep --blend {cfg.data.blend}`), which a real submission prepares first")
        return 0
    return launch(profile, job, attached=attached, wandb=wandb)
