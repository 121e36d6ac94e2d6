"""Launching a training job on a cluster profile (``env.toml``): one job script for every backend.

The API a backend uses (the built-in engine in trainer/run_command.py, the NeMo-RL backend)::

    from trainer.launch.profiles import load_profile          # env.toml -> profile, [wandb], path
    from trainer.launch.job_script import FleetSpec, JobSpec  # what to run
    from trainer.launch.submit import launch                  # write job.sh, submit, stream / detach

    profile, wandb, _ = load_profile("my-cluster", env_file=None)  # --env-file / $VERIGYM_ENV_FILE / ./env.toml
    job_dir = Path(log_dir, "job").resolve()
    job = JobSpec(name="rlvr", job_dir=job_dir,
                  trainer_command=("uv", "run", "python", "examples/run_grpo.py", "--config", "..."),
                  fleet=FleetSpec(envs=("math", "mcqa")), nodes=109)
    status = launch(profile, job, attached=True, wandb=wandb)  # --run: the job's exit status
    launch(profile, job, attached=False, wandb=wandb)          # --batch: prints job id + log path
    render_job_script(profile, job, attached=True)             # the script text (for --dry-run)

What the trainer command finds in its environment when it starts (on the first node, after the
fleet is healthy): ``RAY_ADDRESS`` (the job's Ray head; join with ``ray.init(address="auto")``),
``RAY_AUTH_MODE``/``RAY_AUTH_TOKEN_PATH`` (the job's Ray token), ``VERIGYM_FLEET_FILE`` (=
``job.fleet_file``: ``{env: [url, ...]}`` of the running servers) and ``VERIGYM_JOB_DIR``.

Modules: ``profiles`` (env.toml), ``job_script`` (render), ``submit`` (sbatch / local, follow),
``ray_node`` and ``fleet_steps`` (the steps the script runs on each node; standard library only).
"""
