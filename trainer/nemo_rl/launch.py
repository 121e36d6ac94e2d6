"""Submit a NeMo-RL job the way NeMo-RL's own Super launcher does: ``sbatch ... ray.sub``.

NVIDIA's launcher, not ours: ``examples/nemo_gym/nemotron-3-super/super_launch.sh`` (NeMo-RL) turns
the seeds' contract (``EXP_NAME CONFIG_PATH MODEL_PATH TRAIN_PATH VAL_PATH CONTAINER
SANDBOX_CONTAINER PERSISTENT_CACHE EXTRA_MOUNTS SLURM_PARTITION SLURM_ACCOUNT``) into ray.sub's inputs
(``CONTAINER MOUNTS COMMAND`` + the sandbox sidecar's) and runs ``sbatch --nodes=N --account=A
--job-name=EXP_NAME --partition=P --time=T --gres=gpu:8 --exclusive --dependency=singleton ray.sub``.
ray.sub (from the user's NeMo-RL checkout, ``nemo_rl_dir`` in the profile) starts one container per
node, a Ray head and workers over **every** node of the job, waits for all of them, then runs
``COMMAND`` in the head's container and exits with its status.

verigym fills the same contract from the env.toml profile and the prepared data, and makes
``COMMAND`` = ``bash <job>/driver.sh``: verigym's part, run in the Ray head's container with verigym's
own Python (``fleet_python``: NeMo-RL's image lacks the fleet's packages) — start the judge / GenRM
model servers (``vllm serve`` on the head; vLLM places its engines on the job's GPU nodes through Ray,
so NeMo-RL's placement groups and the judges never claim the same GPU), gate on each (``/health`` and
``/v1/models`` listing the model), start the environment fleet pointed at them, gate on it, fill the
fleet's addresses into the Gym config, then super_launch.sh's own command line
(``python ./examples/nemo_gym/run_grpo_nemo_gym.py --config $CONFIG_PATH ...`` with its environment),
with absolute checkpoint and log folders. The Slurm nodes are NeMo-RL's ``cluster.num_nodes`` plus the
model servers' (trainer/nemo_rl/arithmetic.py); ray.sub puts them all in one Ray cluster, as
NeMo-RL's Super guide sizes it (``SBATCH_NUM_NODES`` = ``cluster.num_nodes`` + the Gym nodes).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from trainer.launch.job_script import model_server_steps
from trainer.launch.profiles import SlurmProfile, WandbSettings
from trainer.launch.submit import LaunchError, Submission, follow
from trainer.nemo_rl.backend import FLEET_FILE_SLOT, NEMO_RL_RUNNER, NemoRLPlan
from trainer.nemo_rl.gym_config import GYM_ROOT

REPO = Path(__file__).resolve().parents[2]
DRIVER_FILE = "driver.sh"
# super_launch.sh's environment for the runner (NeMo-RL's Super launcher, same commit as schema.json).
RUNNER_ENV = {"NRL_WG_USE_RAY_REF": "1", "VLLM_DEEP_GEMM_WARMUP": "skip", "NRL_VLLM_USE_V1": "1",
              "NRL_IGNORE_VERSION_MISMATCH": "1", "VLLM_ATTENTION_BACKEND": "FLASH_ATTN",
              "NRL_FORCE_REBUILD_VENVS": "false", "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0", "UV_HTTP_TIMEOUT": "300"}
# NeMo-Gym's local_vllm_model runs its judges' vLLM with these (the official Super configs).
JUDGE_VLLM_ENV = {"VLLM_RAY_DP_PACK_STRATEGY": "strict", "VLLM_USE_DEEP_GEMM": "0", "VLLM_MOE_USE_DEEP_GEMM": "0"}
SANDBOX_PORT = "6000"


@dataclass
class RaySubJob:
    sbatch: list[str]        # the exact command line
    env: dict[str, str]      # what sbatch exports to ray.sub (added to the submitting environment)
    cwd: Path                # where sbatch runs: ray.sub's SLURM_SUBMIT_DIR, the NeMo-RL checkout
    job_dir: Path
    driver: str              # <job_dir>/driver.sh: COMMAND, run in the Ray head's container

    @property
    def driver_path(self) -> Path:
        return self.job_dir / DRIVER_FILE

    def describe(self) -> str:
        env = "\n".join(f"  {k}={shlex.quote(v)}" for k, v in self.env.items())
        return (f"job (NeMo-RL's ray.sub; from {self.cwd}):\n  {shlex.join(self.sbatch)}\nenvironment:\n{env}\n"
                f"COMMAND ({self.driver_path}, in the Ray head's container):\n{self.driver}")


def profile_problems(profile: object, plan: NemoRLPlan) -> list[str]:
    """What the profile lacks for a NeMo-RL job (one line each)."""
    if not isinstance(profile, SlurmProfile):
        return ["the NeMo-RL backend submits NeMo-RL's ray.sub with sbatch: use an executor = \"slurm\" profile"]
    problems = []
    if not profile.nemo_rl_dir:
        problems.append("set nemo_rl_dir = \"/path/to/NeMo-RL\" in the profile (NeMo-RL's checkout: its ray.sub and "
                        "examples/nemo_gym/run_grpo_nemo_gym.py)")
    elif not (Path(profile.nemo_rl_dir) / "ray.sub").is_file():
        problems.append(f"nemo_rl_dir = {profile.nemo_rl_dir!r} holds no ray.sub: point it at a NeMo-RL checkout")
    for key, label in (("container_image", "CONTAINER (NeMo-RL's image, e.g. nvcr.io/nvidia/nemo-rl:v0.7.0)"),
                       ("account", "SLURM_ACCOUNT"), ("partition", "SLURM_PARTITION")):
        if not getattr(profile, key):
            problems.append(f"set {key} in the profile: ray.sub needs {label}")
    if profile.fleet_nodes:
        problems.append("fleet_nodes must be 0 for the NeMo-RL backend: ray.sub puts every node of the job in NeMo-RL's "
                        "Ray cluster; the fleet runs on the Ray head node, as NeMo-Gym's own servers do")
    return problems


def _mounts(profile: SlurmProfile, nemo_rl: Path, plan: NemoRLPlan) -> str:
    # super_launch.sh's BASE_MOUNTS (the checkout at its own path, its Gym where NeMo-RL's image expects
    # it) + EXTRA_MOUNTS + what verigym's part needs at the same paths: its repo, the run's folders.
    own = [f"{nemo_rl}:{nemo_rl}",
           f"{nemo_rl}/3rdparty/Gym-workspace/Gym:/opt/nemo-rl/3rdparty/Gym-workspace/Gym",
           f"{REPO}:{REPO}"]
    for folder in {plan.out_dir.parent, plan.data_dir.resolve()}:
        if not str(folder).startswith(str(REPO) + os.sep):
            own.append(f"{folder}:{folder}")
    return ",".join([*profile.mounts, *own])


def render(plan: NemoRLPlan, profile: SlurmProfile, *, exp_name: str, wandb: WandbSettings | None = None,
           attached: bool = True) -> RaySubJob:
    nemo_rl = Path(profile.nemo_rl_dir or "/path/to/NeMo-RL").resolve()
    job_dir = plan.out_dir / "job"
    cfg = plan.config
    cache = profile.persistent_cache or ""
    env = {
        # the seeds' contract (super_launch.sh's inputs)
        "EXP_NAME": exp_name, "CONFIG_PATH": str(plan.files["grpo"]), "MODEL_PATH": str(cfg["policy"]["model_name"]),
        "TRAIN_PATH": str(cfg["data"]["train"]["data_path"]), "VAL_PATH": str(cfg["data"]["validation"]["data_path"]),
        "CONTAINER": profile.container_image or "", "SANDBOX_CONTAINER": profile.sandbox_container or "",
        "PERSISTENT_CACHE": cache, "EXTRA_MOUNTS": ",".join(profile.mounts),
        "SLURM_PARTITION": profile.partition_for(attached) or "", "SLURM_ACCOUNT": profile.account or "",
        # ray.sub's inputs, as super_launch.sh derives them
        "MOUNTS": _mounts(profile, nemo_rl, plan), "COMMAND": f"bash {job_dir / DRIVER_FILE}",
        "GPUS_PER_NODE": str(cfg["cluster"]["gpus_per_node"]), "BASE_LOG_DIR": str(job_dir),
        "OMP_NUM_THREADS": "16", "RAY_DEDUP_LOGS": "1",
    }
    if profile.cpus_per_task:  # ray.sub reads the node's CPUs from Slurm otherwise (Ray must see >= 8 per node)
        env["CPUS_PER_WORKER"] = str(profile.cpus_per_task)
    if profile.sandbox_container:  # ray.sub's NeMo-Skills sandbox sidecar, as super_launch.sh configures it
        env.update({"SANDBOX_COMMAND": "/start-with-nginx.sh", "LISTEN_PORT": SANDBOX_PORT, "NGINX_PORT": SANDBOX_PORT,
                    "NEMO_SKILLS_SANDBOX_PORT": SANDBOX_PORT, "SANDBOX_ENV_VARS": f"NEMO_SKILLS_SANDBOX_PORT={SANDBOX_PORT}"})
    if wandb and wandb.project:
        env["WANDB_PROJECT"] = wandb.project
    if wandb and wandb.entity:
        env["WANDB_ENTITY"] = wandb.entity
    sbatch = ["sbatch", f"--nodes={plan.roles.total}"]
    if profile.account:
        sbatch.append(f"--account={profile.account}")
    sbatch.append(f"--job-name={exp_name}")
    if profile.partition_for(attached):
        sbatch.append(f"--partition={profile.partition_for(attached)}")
    sbatch.append(f"--time={profile.time}")
    if profile.gpus_per_node:
        sbatch.append(f"--gres=gpu:{profile.gpus_per_node}")
    sbatch += ["--exclusive", "--dependency=singleton", f"--output={job_dir}/slurm-%j.log", str(nemo_rl / "ray.sub")]
    return RaySubJob(sbatch, env, nemo_rl, job_dir, driver_script(plan, profile, job_dir, nemo_rl))


def driver_script(plan: NemoRLPlan, profile: SlurmProfile, job_dir: Path, nemo_rl: Path) -> str:
    py = profile.fleet_python or sys.executable
    steps = model_server_steps(plan.models, python=py, vllm=tuple(profile.vllm_command), in_ray=True)
    fleet_file = job_dir / "fleet.json"
    q = shlex.quote
    lines = [
        "#!/bin/bash",
        "# verigym's part of a NeMo-RL job: ray.sub runs it (COMMAND) in the Ray head's container once every node",
        "# joined. Model servers -> their gate -> environment fleet -> its gate -> Gym config -> NeMo-RL's runner.",
        "# Written by `driver run --backend nemo-rl` (trainer/nemo_rl/launch.py).",
        "set -uo pipefail",
        f"export VERIGYM_JOB_DIR={q(str(job_dir))} VERIGYM_FLEET_FILE={q(str(fleet_file))}",
        f"export NEMO_GYM_EXTRA_ROOTS={q(str(GYM_ROOT))}",
        f"VG_PY={q(py)}",
        'RUN="$VERIGYM_JOB_DIR/run-$(date +%Y%m%d-%H%M%S)-$$"',  # ray.sub unsets SLURM_* before COMMAND runs
        'mkdir -p "$RUN/models" "$RUN/fleet" && rm -f "$VERIGYM_FLEET_FILE"',
        'log() { echo "[verigym $(date -u +%H:%M:%S)] $*"; }',
        f"cd {q(str(REPO))}",
        "# the servers bind the interface that reaches the Ray head (this node): ray.sub's head address",
        'RAY_HEAD=${RAY_ADDRESS:-$(cat /tmp/ray/ray_current_cluster 2>/dev/null)}',
        'HEAD_HOST=${RAY_HEAD%:*}',
        '[ -n "$HEAD_HOST" ] || HEAD_HOST=$(hostname -I | awk \'{print $1}\')',
        "PIDS=()",
        "cleanup() {",
        "  local rc=$?; trap - EXIT",
        '  touch "$RUN/stop-fleet"; sleep 1; touch "$RUN/stop-model"',
        '  for _ in $(seq 225); do local alive=0; for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done',
        '    [ $alive = 0 ] && break; sleep 0.2; done',
        '  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done',
        '  log "exit status $rc"; exit $rc',
        "}",
        "trap cleanup EXIT",
        "trap 'exit 143' TERM",
        "",
    ]
    for k, v in JUDGE_VLLM_ENV.items():
        lines.append(f"export {k}={q(v)}")
    started = 0
    for i, m in enumerate(steps):
        ready = f'"$RUN/models/{i}.json"'
        if not m.argv:
            lines.append(f'"$VG_PY" -m trainer.launch.model_steps check --model {q(m.model)} --url {q(m.url or "")} '
                         f'--ready-file {ready} || exit 1')
            continue
        started += 1
        lines.append(f'"$VG_PY" -m trainer.launch.model_steps serve --model {q(m.model)} --route-to "$HEAD_HOST" '
                     f'--ready-file {ready} --stop-file "$RUN/stop-model" --timeout {m.ready_timeout_s:g} -- '
                     f'{shlex.join(m.argv)} & PIDS+=($!)')
    if started:
        lines += [
            f'until [ "$(ls "$RUN"/models/[0-9]*.json 2>/dev/null | wc -l)" -ge {len(steps)} ]; do',
            '  for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null || { log "a model server exited before it was ready"; exit 1; }; done',
            "  sleep 1",
            "done",
        ]
    if steps:
        lines.append('log "model servers ready: $(cat "$RUN"/models/[0-9]*.json | tr -d "\\n")"')
    envs = " ".join(q(e.name) for e in plan.envs)
    overrides = " ".join(q(f"{env}.{p}") for env, pairs in _server_pairs(plan).items() for p in pairs)
    judges = " ".join(f"--judge {q(f'{e}.{j}={m}')}" for e, j, m in plan.models.judge_routes())
    gym = shlex.join(plan.gym_config_command("$VG_PY", nemo_rl)).replace(q(FLEET_FILE_SLOT), '"$VERIGYM_FLEET_FILE"')
    lines += [
        "",
        f'"$VG_PY" -m trainer.launch.fleet_steps serve --route-to "$HEAD_HOST" --ready-file "$RUN/fleet/head.json" '
        f'--stop-file "$RUN/stop-fleet" --models-dir "$RUN/models" {judges} -- {envs} {overrides} & PIDS+=($!); FLEET_PID=$!',
        f'"$VG_PY" -m trainer.launch.fleet_steps gate --ready-dir "$RUN/fleet" --nodes head --envs {envs} '
        '--out "$VERIGYM_FLEET_FILE" --timeout 600 & GATE_PID=$!',
        'while kill -0 "$GATE_PID" 2>/dev/null; do',
        '  kill -0 "$FLEET_PID" 2>/dev/null || { log "the environment fleet exited before it was ready"; kill "$GATE_PID"; exit 1; }',
        "  sleep 0.5",
        "done",
        'wait "$GATE_PID" || { log "the environment fleet did not become ready"; exit 1; }',
        gym.replace("'$VG_PY'", '"$VG_PY"') + ' || exit 1',
        "",
        "# NeMo-RL: super_launch.sh's command line (its environment, overrides from the seeds' contract; checkpoints",
        "# and logs at the absolute folders of grpo.yaml, not super_launch.sh's relative results/ and logs/).",
        f"cd {q(str(nemo_rl))}",
        'HF_MODULES=${HF_MODULES_CACHE:-${PERSISTENT_CACHE:-$VERIGYM_JOB_DIR}/hf_modules/$EXP_NAME}',
        'mkdir -p "$HF_MODULES"',
        "python -c \"from transformers import AutoConfig, AutoTokenizer; p='$MODEL_PATH'; "
        "AutoConfig.from_pretrained(p, trust_remote_code=True); AutoTokenizer.from_pretrained(p, trust_remote_code=True, "
        "use_fast=True); print('Prewarmed HF dynamic modules cache')\" || log \"HF modules prewarm failed (continuing, as "
        "super_launch.sh does)\"",
        _runner_line(plan, profile),
        "rc=$?",
        'log "NeMo-RL exited with $rc"',
        "exit $rc",
        "",
    ]
    return "\n".join(lines)


def _server_pairs(plan: NemoRLPlan) -> dict[str, list[str]]:
    from trainer.fleet import override_pairs

    routed = {f"{e}.judges.{j}.base_url" for e, j, _ in plan.models.judge_routes()}
    return {env.name: [p for p in override_pairs(dict(plan.server_config.get(env.name, {})))
                       if f"{env.name}.{p.split('=', 1)[0]}" not in routed] for env in plan.envs}


def _runner_line(plan: NemoRLPlan, profile: SlurmProfile) -> str:
    cfg = plan.config
    cache = '"${PERSISTENT_CACHE}"'
    env = dict(RUNNER_ENV)
    parts = [f"{k}={shlex.quote(v)}" for k, v in env.items()]
    if profile.persistent_cache:  # super_launch.sh's caches under PERSISTENT_CACHE
        parts += [f"NRL_MEGATRON_CHECKPOINT_DIR={cache}/megatron_ckpt_cache",
                  f"MEGATRON_CONFIG_LOCK_DIR={cache}/hf_config_locks", f"VLLM_CACHE_ROOT={cache}/vllm_compile_cache",
                  f"DG_JIT_CACHE_DIR={cache}/vllm_compile_cache/deep_gemm",
                  f"FLASHINFER_CUBIN_DIR={cache}/flashinfer_cubins", f"FLASHINFER_WORKSPACE_BASE={cache}/flashinfer_workspace",
                  f"NEMO_GYM_VENV_DIR={cache}/gym_venvs"]
    parts += ['HF_MODULES_CACHE="$HF_MODULES"', f'PYTHONPATH={shlex.quote(str(Path(profile.nemo_rl_dir or ".").resolve()))}:${{PYTHONPATH:-}}']
    overrides = ['policy.model_name="$MODEL_PATH"', 'data.train.data_path="$TRAIN_PATH"',
                 'data.validation.data_path="$VAL_PATH"',
                 f"checkpointing.checkpoint_dir={shlex.quote(str(cfg['checkpointing']['checkpoint_dir']))}",
                 f"logger.log_dir={shlex.quote(str(cfg['logger']['log_dir']))}", 'logger.wandb.name="$EXP_NAME"']
    if profile.persistent_cache:
        overrides += [f"env.nemo_gym.uv_venv_dir={cache}/gym_venvs", "env.nemo_gym.skip_venv_if_present=true"]
    return " ".join([*parts, "python", f"./{NEMO_RL_RUNNER}", '--config "$CONFIG_PATH"', *overrides])


def write(job: RaySubJob) -> None:
    job.job_dir.mkdir(parents=True, exist_ok=True)
    job.driver_path.write_text(job.driver)
    job.driver_path.chmod(0o755)
    (job.job_dir / "sbatch.txt").write_text(job.describe() + "\n")


def submit(job: RaySubJob, *, attached: bool, out: IO[str] | None = None) -> int:
    """sbatch ray.sub with the contract's environment; attached: stream the job's logs, return its status."""
    out = out or sys.stdout
    if not shutil.which("sbatch"):
        raise LaunchError("sbatch not found: the NeMo-RL backend submits from a Slurm login node")
    write(job)
    done = subprocess.run([*job.sbatch[:1], "--parsable", *job.sbatch[1:]], capture_output=True, text=True, cwd=job.cwd,
                          env={**os.environ, **job.env})
    if done.returncode != 0:
        raise LaunchError(f"sbatch failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}")
    job_id = done.stdout.strip().split(";")[0]
    log = job.job_dir / f"slurm-{job_id}.log"
    driver_log = job.job_dir / f"{job_id}-logs" / "ray-driver.log"  # ray.sub: $BASE_LOG_DIR/$SLURM_JOB_ID-logs
    print(f"submitted Slurm job {job_id} (NeMo-RL's ray.sub)\n  log:    {log}\n  driver: {driver_log}", file=out, flush=True)
    if not attached:
        print(f"  follow: squeue -j {job_id}; tail -f {driver_log}", file=out, flush=True)
        return 0
    status = follow(Submission(job_id, log, job.driver_path, "slurm", extra_logs=(driver_log,)), out)
    print(f"job {job_id} finished with exit status {status} (logs: {log}, {driver_log})", file=out, flush=True)
    return status
