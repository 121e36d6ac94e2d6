"""One job script for every backend: Ray cluster -> environment fleet -> readiness gate -> trainer.

:func:`render_job_script` turns (profile, :class:`JobSpec`) into a bash script that runs the same
way under Slurm (``sbatch``; each piece is an ``srun --overlap`` step on its node) and on one machine
(the ``local`` executor runs it with ``bash``; each piece is a plain background process):

1. Ray: ``ray start --head --port=0`` on the first node (it binds a free port and the address it
   got is copied to ``$RUN/ray_address``: no probe-then-bind race), ``ray start --address`` on the
   other Ray nodes, then a wait until every node joined. A per-job token (``RAY_AUTH_MODE=token``)
   keeps other users of a shared node out of the cluster.
2. The fleet: ``envs serve`` on each fleet node (the last ``fleet_nodes`` nodes, else the first),
   bound to the node's address with port 0; each writes its bound URLs to ``$RUN/fleet/<node>.json``.
3. The gate: waits for every node's file and for ``GET /health`` = 200 on every URL, then writes
   ``$VERIGYM_FLEET_FILE`` (``{env: [url, ...]}``). A fleet step that dies fails the job here.
4. The trainer command on the first node, with ``RAY_ADDRESS`` and ``VERIGYM_FLEET_FILE`` set.
   The job's exit status is the trainer's, or 1 when a server step (fleet, model server) exits
   while it trains; on any exit the trainer, the fleet and Ray are stopped (SIGTERM, the trainer
   checkpoints, servers drain) by an EXIT trap.

Usage (what a backend does)::

    job = JobSpec(name="tiny", job_dir=Path("runs/tiny/job").resolve(),
                  trainer_command=("python", "-m", "trainer.cli", "run", ..., "--fleet-file", str(fleet_file)),
                  fleet=FleetSpec(envs=("math", "reasoning_gym")))
    script = render_job_script(profile, job, attached=True)
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from trainer.launch.profiles import LocalProfile, SlurmProfile, WandbSettings
from trainer.model_servers import ModelServerError, ModelServerPlan, serve_argv

FLEET_FILE_NAME = "fleet.json"


@dataclass(frozen=True)
class FleetSpec:
    """The environment servers a job starts: every fleet node serves every name (replicas)."""
    envs: tuple[str, ...] = ()
    overrides: tuple[str, ...] = ()  # `envs serve` overrides: key=value (all) or NAME.key=value
    ready_timeout_s: float = 600.0   # the gate fails the job when the fleet is not healthy by then
    judges: tuple[str, ...] = ()     # "ENV.JUDGE=MODEL": that judge calls the job's server of MODEL


@dataclass(frozen=True)
class ModelServerStep:
    """A judge / GenRM model server of the job (trainer/model_servers.py decides which)."""
    model: str
    argv: tuple[str, ...] = ()   # the serving command ({host}, {port}, {ready_file}); empty: external
    url: str | None = None       # external: checked, not started
    nodes: int = 0               # whole nodes of its own; 0: runs on the first fleet node
    ready_timeout_s: float = 1800.0


@dataclass(frozen=True)
class JobSpec:
    name: str
    job_dir: Path                      # absolute, on a filesystem every node sees: script, logs, fleet files
    trainer_command: tuple[str, ...]   # argv, run on the first node after the gate
    fleet: FleetSpec = field(default_factory=FleetSpec)
    env: Mapping[str, str] = field(default_factory=dict)  # exported to every step
    workdir: Path = field(default_factory=Path.cwd)       # every step starts here
    nodes: int | None = None           # overrides the profile's nodes (a stage that needs 109)
    python: str | None = None          # interpreter of the helper steps; default: this one, "python3" in a container
    model_servers: tuple[ModelServerStep, ...] = ()  # started (or checked) before the fleet, on nodes of their own

    @property
    def model_nodes(self) -> int:
        return sum(m.nodes for m in self.model_servers)

    @property
    def script_path(self) -> Path:
        return self.job_dir / "job.sh"

    @property
    def fleet_file(self) -> Path:
        """Where the gate writes ``{env: [url, ...]}`` before the trainer starts."""
        return self.job_dir / FLEET_FILE_NAME


def model_server_steps(plan: ModelServerPlan, *, python: str, vllm: tuple[str, ...] = ("vllm",),
                       multi_node: bool = True, in_ray: bool = False) -> tuple[ModelServerStep, ...]:
    """The job's model-server steps for ``plan`` (trainer/model_servers.py): started or checked."""
    steps = []
    for server in plan.servers:
        if server.how == "external":
            steps.append(ModelServerStep(server.model, url=server.url))
            continue
        if server.nodes > 1 and not multi_node:
            raise ModelServerError(f"{server.model}: {server.nodes} nodes: a model server across nodes needs vLLM's Ray "
                                   "data-parallel backend, which the NeMo-RL backend's job runs; here give it one node "
                                   "(fewer replicas) or url = ...")
        steps.append(ModelServerStep(server.model, argv=tuple(serve_argv(server, python=python, vllm=vllm, in_ray=in_ray)),
                                     nodes=server.nodes))
    return tuple(steps)


def _q(value: object) -> str:
    return shlex.quote(str(value))


def _sbatch_header(profile: SlurmProfile, job: JobSpec, attached: bool) -> list[str]:
    nodes = (job.nodes or profile.nodes) + job.model_nodes
    opts = [f"--job-name={job.name}", f"--nodes={nodes}", f"--ntasks-per-node={profile.ntasks_per_node}",
            f"--time={profile.time}", f"--output={job.job_dir}/slurm-%j.log"]
    if profile.account:
        opts.append(f"--account={profile.account}")
    if profile.partition_for(attached):
        opts.append(f"--partition={profile.partition_for(attached)}")
    if profile.gpus_per_node:
        opts.append(f"--gpus-per-node={profile.gpus_per_node}")
    if profile.cpus_per_task:
        opts.append(f"--cpus-per-task={profile.cpus_per_task}")
    if profile.mem is not None:
        opts.append(f"--mem={profile.mem}")
    if profile.exclusive:
        opts.append("--exclusive")
    return [f"#SBATCH {o}" for o in opts]


def _container_flags(profile: SlurmProfile, image: str | None, name: str, workdir: Path) -> str:
    """Pyxis flags of a step. Named (``--container-name``): every step of the job on a node with this
    name shares one container, so its ``/tmp`` too (an unnamed Pyxis container per step has a
    private ``/tmp``, and Ray's sockets in the Ray step would be invisible to the trainer step:
    NeMo-RL's ray.sub names its containers for the same reason)."""
    if not image:
        return ""
    flags = [_q(f"--container-image={image}"), f'--container-name="{name}"', _q(f"--container-workdir={workdir}")]
    if profile.mounts:
        flags.append(_q("--container-mounts=" + ",".join(profile.mounts)))
    return " ".join(flags)


def _model_server_lines(job: JobSpec) -> list[str]:
    """Step 1b: the judge / GenRM model servers, each ready (``/health`` and ``/v1/models`` lists its
    model) before the fleet starts; an external URL is checked the same way."""
    if not job.model_servers:
        return []
    lines = ["# 1b. Model servers (judges, GenRM): ready = /health 200 and /v1/models lists the model, else the job fails here.",
             'mkdir -p "$RUN/models"']
    offset = 0
    for i, m in enumerate(job.model_servers):
        ready = f'"$RUN/models/{i}.json"'
        if not m.argv:
            lines.append(f'(step gate "$HEAD" "$PY" -m trainer.launch.model_steps check --model {_q(m.model)} --url {_q(m.url)} '
                         f'--ready-file {ready}) || {{ log "model server {m.model} is not usable (see above)"; exit 1; }}')
            continue
        node = f'"${{MODEL_NODES[{offset}]:-$HEAD}}"' if m.nodes else '"${FLEET_NODES[0]}"'
        offset += m.nodes
        lines.append(f'step model {node} "$PY" -m trainer.launch.model_steps serve --model {_q(m.model)} '
                     f'--route-to "${{RAY_ADDRESS%:*}}" --ready-file {ready} --stop-file "$RUN/stop-model" '
                     f'--timeout {m.ready_timeout_s:g} -- {shlex.join(m.argv)} & MODEL_PIDS+=($!)')
    started = sum(1 for m in job.model_servers if m.argv)
    if started:
        lines += [
            f'until [ "$(ls "$RUN"/models/[0-9]*.json 2>/dev/null | wc -l)" -ge {len(job.model_servers)} ]; do',
            '  for pid in "${MODEL_PIDS[@]}"; do',
            '    kill -0 "$pid" 2>/dev/null || { log "a model server step exited before it was ready (see above)"; exit 1; }',
            "  done; sleep 1",
            "done",
            'log "model servers ready: $(cat "$RUN"/models/[0-9]*.json | tr -d "\\n")"',
        ]
    return lines


def render_job_script(profile: LocalProfile | SlurmProfile, job: JobSpec, *, attached: bool,
                      wandb: WandbSettings | None = None) -> str:
    slurm = isinstance(profile, SlurmProfile)
    fleet_nodes = profile.fleet_nodes if slurm else 0
    if slurm and fleet_nodes >= (job.nodes or profile.nodes):
        raise ValueError(f"fleet_nodes={fleet_nodes} leaves no node for Ray and the trainer")
    model_nodes = job.model_nodes if slurm else 0
    in_container = slurm and bool(profile.container_image)
    py = job.python or ("python3" if in_container else sys.executable)
    main_flags = _container_flags(profile, profile.container_image, "verigym-$JOB_ID", job.workdir) if slurm else ""
    fleet_flags = (_container_flags(profile, profile.fleet_container_image or profile.container_image,
                                    "verigym-fleet-$JOB_ID", job.workdir) if slurm else "")
    env = dict(job.env)
    if wandb and wandb.project:
        env.setdefault("WANDB_PROJECT", wandb.project)
    if wandb and wandb.entity:
        env.setdefault("WANDB_ENTITY", wandb.entity)
    envs = " ".join(_q(e) for e in job.fleet.envs)
    overrides = " ".join(_q(o) for o in job.fleet.overrides)
    lines = ["#!/bin/bash"]
    if slurm:
        lines += _sbatch_header(profile, job, attached)
    lines += [
        f"# verigym job {job.name!r}: Ray over the allocation -> environment fleet -> readiness gate -> trainer.",
        "# Written by `driver run --run/--batch` (trainer/launch/job_script.py); safe to read, edit and resubmit.",
        "set -uo pipefail",
        f"cd {_q(job.workdir)}",
        *profile.startup_commands,
        f"export VERIGYM_JOB_DIR={_q(job.job_dir)}",
        f"export VERIGYM_FLEET_FILE={_q(job.fleet_file)}",
        *(f"export {k}={_q(v)}" for k, v in env.items()),
        f"PY={_q(py)}",
        'JOB_ID=${SLURM_JOB_ID:-local-$$}',
        'RUN="$VERIGYM_JOB_DIR/run-$JOB_ID"',
        'mkdir -p "$RUN/fleet" && rm -f "$VERIGYM_FLEET_FILE"',
        'log() { echo "[verigym-job $(date -u +%H:%M:%S)] $*"; }',
        "",
        "# step ROLE NODE CMD...: CMD on NODE as a Slurm step named verigym-ROLE (locally: a plain process).",
        "# exec, so that `step ... &` leaves the step's own pid in $!.",
        'if [ -n "${SLURM_JOB_ID:-}" ]; then',
        '  mapfile -t NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")',
        "  # Ray gets every CPU of its node (a one-CPU step would make Ray see one CPU); the fleet and model",
        "  # servers run in the fleet's image when the profile names one (fleet_container_image).",
        f"  MAIN_CONTAINER=({main_flags})",
        f"  FLEET_CONTAINER=({fleet_flags})",
        '  step() {',
        '    local role=$1 node=$2; shift 2; local extra=() image=("${MAIN_CONTAINER[@]}")',
        '    [ "$role" = ray ] && extra=(--cpus-per-task="${SLURM_CPUS_ON_NODE:-1}")',
        '    case $role in fleet|model) image=("${FLEET_CONTAINER[@]}");; esac',
        '    exec srun --overlap --nodes=1 --ntasks=1 --nodelist="$node" --job-name="verigym-$role" "${extra[@]}" '
        '"${image[@]}" "$@"',
        '  }',
        "  # srun answers SIGTERM by killing its step: the ray/fleet leaders watch RUN/stop-ROLE instead;",
        "  # the trainer step gets SIGTERM through scancel (the driver checkpoints and stops its Ray actors)",
        '  signal_role() {',
        '    if [ "$1" = trainer ]; then',
        '      local ids; ids=$(squeue -h -s -j "$SLURM_JOB_ID" -o "%i %j" | awk \'$2 == "verigym-trainer" {print $1}\')',
        '      [ -n "$ids" ] && scancel --signal=TERM $ids',
        '    else touch "$RUN/stop-$1"; fi',
        '  }',
        "else",
        '  NODES=("$(hostname)")',
        '  step() { shift 2; exec "$@"; }',
        '  signal_role() { shift; [ $# -gt 0 ] && kill -TERM "$@" 2>/dev/null; }',
        "fi",
        f"N_FLEET={fleet_nodes}",
        f"N_MODEL={model_nodes}",
        "# the allocation, in order: Ray nodes, model-server nodes (N_MODEL), fleet nodes (the last N_FLEET)",
        'HEAD=${NODES[0]}',
        'if [ "$N_FLEET" -gt 0 ] && [ "$N_FLEET" -lt "${#NODES[@]}" ]; then',
        '  FLEET_NODES=("${NODES[@]: -$N_FLEET}"); REST=("${NODES[@]:0:${#NODES[@]}-$N_FLEET}")',
        "else",
        '  FLEET_NODES=("$HEAD"); REST=("${NODES[@]}")',
        "fi",
        'if [ "$N_MODEL" -gt 0 ]; then',
        '  MODEL_NODES=("${REST[@]: -$N_MODEL}"); RAY_NODES=("${REST[@]:0:${#REST[@]}-$N_MODEL}")',
        "else",
        '  MODEL_NODES=(); RAY_NODES=("${REST[@]}")',
        "fi",
        'log "job $JOB_ID: nodes ${NODES[*]}; Ray on ${RAY_NODES[*]}; environment servers on ${FLEET_NODES[*]}'
        '${MODEL_NODES[*]:+; model servers on ${MODEL_NODES[*]}}"',
        "",
        "RAY_PIDS=(); MODEL_PIDS=(); FLEET_PIDS=(); TRAINER_PID=",
        "stop_role() {  # stop_role ROLE GRACE PIDS...: SIGTERM the role's processes, wait up to GRACE s, then SIGKILL",
        '  local role=$1 grace=$2; shift 2; local pid; [ $# -eq 0 ] && return',
        '  signal_role "$role" "$@"',
        '  for _ in $(seq $((grace * 5))); do',
        '    local alive=0; for pid in "$@"; do kill -0 "$pid" 2>/dev/null && alive=1; done',
        '    [ $alive = 0 ] && break; sleep 0.2',
        "  done",
        '  for pid in "$@"; do kill -KILL "$pid" 2>/dev/null; done; wait "$@" 2>/dev/null',
        "}",
        "cleanup() {",
        "  local rc=$?; trap - EXIT; trap '' INT TERM  # a second signal must not cut the stop short (Ray left running)",
        '  [ -n "$TRAINER_PID" ] && stop_role trainer 60 "$TRAINER_PID"  # the trainer checkpoints on SIGTERM',
        '  log "stopping the environment servers and Ray"',
        '  stop_role fleet 45 "${FLEET_PIDS[@]}"',
        '  stop_role model 45 "${MODEL_PIDS[@]}"',
        '  stop_role ray 45 "${RAY_PIDS[@]}"',
        '  rm -f "$VERIGYM_FLEET_FILE" "$RUN/ray_token"',
        '  log "job exit status $rc"',
        "  exit $rc",
        "}",
        "trap cleanup EXIT",
        "trap 'log \"SIGTERM: stopping\"; exit 143' TERM",
        "trap 'exit 130' INT",
        "",
        "# 1. Ray. A per-job token: on a shared node no one else's driver can join this cluster.",
        '(umask 077; "$PY" -c "import secrets; print(secrets.token_hex(32))" > "$RUN/ray_token") || exit 1',
        'export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH="$RUN/ray_token"',
        'step ray "$HEAD" "$PY" -m trainer.launch.ray_node head --temp-dir "/tmp/verigym-ray-$JOB_ID-0" '
        '--address-file "$RUN/ray_address" --stop-file "$RUN/stop-ray" & RAY_PIDS+=($!)',
        'for _ in $(seq 900); do [ -s "$RUN/ray_address" ] && break; kill -0 "${RAY_PIDS[0]}" 2>/dev/null || break; sleep 0.2; done',
        '[ -s "$RUN/ray_address" ] || { log "the Ray head did not start (see above)"; exit 1; }',
        'export RAY_ADDRESS=$(cat "$RUN/ray_address")',
        'log "Ray head at $RAY_ADDRESS"',
        'for i in $(seq 1 $((${#RAY_NODES[@]} - 1))); do',
        '  step ray "${RAY_NODES[$i]}" "$PY" -m trainer.launch.ray_node worker --address "$RAY_ADDRESS" '
        '--temp-dir "/tmp/verigym-ray-$JOB_ID-$i" --stop-file "$RUN/stop-ray" & RAY_PIDS+=($!)',
        "done",
        '(step wait "$HEAD" "$PY" -m trainer.launch.ray_node wait --nodes "${#RAY_NODES[@]}" --timeout 600) '
        '|| { log "Ray did not reach ${#RAY_NODES[@]} nodes"; exit 1; }',
        "",
    ]
    lines += _model_server_lines(job)
    judges = " ".join(f"--judge {_q(j)}" for j in job.fleet.judges)
    lines += [
        "",
        "# 2. The environment fleet: each server binds port 0 on its node and reports the URL it got.",
    ]
    if job.fleet.envs:
        lines += [
            'for node in "${FLEET_NODES[@]}"; do',
            f'  step fleet "$node" "$PY" -m trainer.launch.fleet_steps serve --route-to "${{RAY_ADDRESS%:*}}" '
            f'--ready-file "$RUN/fleet/$node.json" --stop-file "$RUN/stop-fleet" --models-dir "$RUN/models" {judges} '
            f'-- {envs} {overrides} & FLEET_PIDS+=($!)',
            "done",
            "# 3. The gate: every node reported and every server answers /health, else the job fails here.",
            f'(step gate "$HEAD" "$PY" -m trainer.launch.fleet_steps gate --ready-dir "$RUN/fleet" --nodes "${{FLEET_NODES[@]}}" '
            f'--envs {envs} --out "$VERIGYM_FLEET_FILE" --timeout {job.fleet.ready_timeout_s:g}) & GATE_PID=$!',
            'while kill -0 "$GATE_PID" 2>/dev/null; do',
            '  for pid in "${FLEET_PIDS[@]}"; do',
            '    kill -0 "$pid" 2>/dev/null || { log "an environment server step exited before the fleet was ready"; '
            'kill "$GATE_PID" 2>/dev/null; exit 1; }',
            "  done; sleep 0.5",
            "done",
            'wait "$GATE_PID" || { log "the environment fleet did not become ready"; exit 1; }',
        ]
    else:
        lines += ['echo "{}" > "$VERIGYM_FLEET_FILE"  # no environment servers to start']
    lines += [
        "",
        "# 4. The trainer; its exit status is the job's. A server step that exits while it trains ends the job",
        "#    (status 1; the EXIT trap stops the trainer, which checkpoints): no training on with its samples masked.",
        'log "starting the trainer"',
        f'step trainer "$HEAD" {shlex.join(job.trainer_command)} & TRAINER_PID=$!',
        'while kill -0 "$TRAINER_PID" 2>/dev/null; do',
        '  for pid in "${FLEET_PIDS[@]}" "${MODEL_PIDS[@]}"; do',
        '    kill -0 "$pid" 2>/dev/null && continue',
        '    wait "$pid"; src=$?; role="an environment server step"; [[ " ${MODEL_PIDS[*]} " == *" $pid "* ]] && role="a model server step"',
        '    log "$role (pid $pid) exited with $src during training (its output is above); stopping the job: '
        'the trainer checkpoints, resubmit to resume"',
        "    exit 1",
        "  done",
        "  sleep 1",
        "done",
        'wait "$TRAINER_PID"; rc=$?; TRAINER_PID=',
        'log "trainer exited with $rc"',
        "exit $rc",
        "",
    ]
    return "\n".join(lines)
