"""``env.toml``: where a job runs, as the Nemotron recipes define it (nemo_runspec profiles).

    [wandb]                       # optional: project/entity for every job
    project = "verigym"
    entity = "my-team"

    [my-cluster]                  # a profile: `driver run ... --run my-cluster`
    executor = "slurm"
    account = "my-account"
    partition = "batch"
    nodes = 2
    gpus_per_node = 8
    time = "04:00:00"

    [big]
    extends = "my-cluster"        # inherit, then override
    nodes = 16

Every key is checked: an unknown key is an error naming the closest valid one (a misspelled
``partion`` must not silently submit to the default partition). Keys of Nemotron's profiles
that verigym does not implement (the SSH tunnel, other executors, the packagers) are errors that
say so, never accepted and ignored.

Where the file is found: ``--env-file PATH``, else ``$VERIGYM_ENV_FILE``, else the first
``env.toml`` walking up from the current directory (Nemotron looks it up the same way).
"""

from __future__ import annotations

import os
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from servers.config_loader import did_you_mean
from trainer.model_servers import ModelServerSetting

ENV_FILE_VAR = "VERIGYM_ENV_FILE"

# Nemotron profile keys verigym does not implement, with what to do instead.
_NOT_SUPPORTED = {
    "tunnel": "verigym submits with the sbatch of the machine it runs on: run `driver` on the cluster's login node",
    "host": "verigym submits from the machine it runs on (no SSH tunnel): run `driver` on the login node",
    "user": "verigym submits from the machine it runs on (no SSH tunnel): run `driver` on the login node",
    "identity": "verigym submits from the machine it runs on (no SSH tunnel): run `driver` on the login node",
    "remote_job_dir": "jobs write to logger.log_dir, which must be on a filesystem every node sees",
    "packager": "verigym runs from the working tree on a shared filesystem (or inside container_image); no packaging",
    "nproc_per_node": "the local executor runs the job script once on this machine; the trainer places its own workers",
}
_RESERVED_SECTIONS = {"artifacts", "cache", "cli"}  # Nemotron system sections verigym has no use for


class ProfileError(ValueError):
    pass


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WandbSettings(_Strict):
    """``[wandb]``: exported to the job as WANDB_PROJECT / WANDB_ENTITY (wandb reads both)."""
    project: str | None = None
    entity: str | None = None


class LocalProfile(_Strict):
    """Run the job script on this machine (no scheduler): one node, same script as on Slurm."""
    executor: Literal["local"]
    startup_commands: list[str] = Field(default_factory=list)  # shell lines run before anything else
    # [PROFILE.model_servers.NAME]: judge / GenRM models the job starts or finds (trainer/model_servers.py)
    model_servers: dict[str, ModelServerSetting] = Field(default_factory=dict)
    gpus_per_node: int | None = Field(None, ge=0)  # GPUs of this machine the model servers may use
    vllm_command: list[str] = Field(default_factory=lambda: ["vllm"])  # how `vllm serve` is run here


class SlurmProfile(_Strict):
    executor: Literal["slurm"]
    account: str | None = None
    partition: str | None = None
    run_partition: str | None = None    # used by --run (attached) instead of partition
    batch_partition: str | None = None  # used by --batch (detached) instead of partition
    nodes: int = Field(1, ge=1)
    ntasks_per_node: int = Field(1, ge=1)
    gpus_per_node: int | None = Field(None, ge=0)
    cpus_per_task: int | None = Field(None, ge=1)
    mem: str | None = None              # per node, Slurm syntax ("0" = all of it, "200G")
    exclusive: bool = False
    time: str = "04:00:00"
    container_image: str | None = Field(None, alias="container")  # needs Pyxis/enroot on the cluster
    # the environment fleet and model servers run in this image instead (verigym's own: a NeMo-RL
    # image lacks the fleet's packages); default: container_image
    fleet_container_image: str | None = Field(None, alias="fleet_container")
    mounts: list[str] = Field(default_factory=list)  # "/host:/container", container_image only
    startup_commands: list[str] = Field(default_factory=list)
    # verigym: how many of the allocation's last nodes run the environment servers (0 = the first
    # node, beside the trainer). Those nodes do not join the Ray cluster.
    fleet_nodes: int = Field(0, ge=0)
    # [PROFILE.model_servers.NAME]: judge / GenRM models the job starts (on nodes of their own, or
    # beside the fleet) or finds at a URL (trainer/model_servers.py; docs/cluster.md)
    model_servers: dict[str, ModelServerSetting] = Field(default_factory=dict)
    vllm_command: list[str] = Field(default_factory=lambda: ["vllm"])  # `vllm serve` = this + ["serve", ...]
    # The NeMo-RL backend (trainer/nemo_rl/launch.py): the job is NeMo-RL's own ray.sub from this
    # checkout, with the seeds' super_launch.sh contract (container_image = CONTAINER, mounts =
    # EXTRA_MOUNTS, account / partition = SLURM_ACCOUNT / SLURM_PARTITION, and these two).
    nemo_rl_dir: str | None = None         # NeMo-RL's checkout on the login node (shared filesystem)
    sandbox_container: str | None = None   # SANDBOX_CONTAINER: NeMo-Skills sandbox sidecar on every node
    persistent_cache: str | None = None    # PERSISTENT_CACHE: vLLM / FlashInfer / Megatron caches, Gym venvs
    # verigym's own Python for the fleet and the model servers inside NeMo-RL's container (a venv on
    # shared storage with verigym installed: NeMo-RL's image lacks the fleet's packages). Default:
    # the Python running `driver`.
    fleet_python: str | None = None

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _check(self) -> "SlurmProfile":
        if self.fleet_container_image and not self.container_image:
            raise ValueError("fleet_container_image needs container_image (the image of the Ray and trainer steps)")
        if self.mounts and not self.container_image:
            raise ValueError("mounts apply to the container: set container_image too (or remove mounts)")
        if self.fleet_nodes >= self.nodes:
            raise ValueError(f"fleet_nodes={self.fleet_nodes} leaves no node for Ray and the trainer (nodes={self.nodes})")
        for m in self.mounts:
            if ":" not in m:
                raise ValueError(f"mount {m!r} is not /host/path:/container/path")
        return self

    def partition_for(self, attached: bool) -> str | None:
        return (self.run_partition if attached else self.batch_partition) or self.partition


Profile = Annotated[Union[LocalProfile, SlurmProfile], Field(discriminator="executor")]
_PROFILE = TypeAdapter(Profile)


@dataclass(frozen=True)
class EnvFile:
    path: Path
    wandb: WandbSettings = field(default_factory=WandbSettings)
    profiles: dict[str, LocalProfile | SlurmProfile] = field(default_factory=dict)
    # Profiles that did not validate, with why: asking for one is an error, the others only warn
    # (one mistyped key in an unrelated profile must not block every profile of the file).
    broken: dict[str, ProfileError] = field(default_factory=dict)

    def profile(self, name: str) -> LocalProfile | SlurmProfile:
        if name in self.broken:
            raise self.broken[name]
        if name not in self.profiles:
            names = [*self.profiles, *self.broken]
            hint = did_you_mean(name, names) or f"profiles: {', '.join(names) or 'none'}"
            raise ProfileError(f"{self.path}: no profile [{name}]; {hint}")
        return self.profiles[name]

    def warnings(self, chosen: str | None = None) -> list[str]:
        """One line per broken profile other than ``chosen``."""
        return [f"warning: ignoring profile [{name}] of {self.path}: {str(exc).split(': ', 1)[-1]}"
                for name, exc in self.broken.items() if name != chosen]


def find_env_file(explicit: str | Path | None = None, start: Path | None = None) -> Path:
    """``--env-file``, else ``$VERIGYM_ENV_FILE``, else ``env.toml`` in the cwd or a parent."""
    chosen = explicit or os.environ.get(ENV_FILE_VAR)
    if chosen:
        path = Path(chosen).expanduser()
        if not path.is_file():
            raise ProfileError(f"env file {path} does not exist"
                               + ("" if explicit else f" (from ${ENV_FILE_VAR})"))
        return path
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "env.toml").is_file():
            return folder / "env.toml"
    raise ProfileError(f"no env.toml in {here} or its parents; write one (example: examples/env.toml) "
                       f"or pass --env-file PATH / set ${ENV_FILE_VAR}")


def _resolve_extends(name: str, tables: dict[str, dict[str, Any]], path: Path, seen: tuple[str, ...] = ()) -> dict[str, Any]:
    if name in seen:
        raise ProfileError(f"{path}: profiles extend each other in a loop: {' -> '.join((*seen, name))}")
    table = dict(tables[name])
    parent = table.pop("extends", None)
    if parent is None:
        return table
    if parent not in tables:
        close = did_you_mean(str(parent), tables)
        raise ProfileError(f"{path}: [{name}] extends unknown profile {parent!r}" + (f"; {close}" if close else ""))
    return {**_resolve_extends(parent, tables, path, (*seen, name)), **table}


def _error(path: Path, section: str, exc: ValidationError, model: type[BaseModel]) -> ProfileError:
    lines = []
    for e in exc.errors():
        loc = [str(x) for x in e["loc"] if x not in ("local", "slurm")]
        key = loc[0] if loc else ""
        if e["type"] == "extra_forbidden" and loc[:1] == ["model_servers"] and len(loc) == 3:
            valid = list(ModelServerSetting.model_fields)
            lines.append(f"model_servers.{loc[1]}: unknown key {loc[-1]!r}: "
                         + (did_you_mean(loc[-1], valid, cutoff=0.5) or f"valid keys: {', '.join(valid)}"))
        elif e["type"] == "extra_forbidden":
            if key in _NOT_SUPPORTED:
                lines.append(f"{key!r} is not supported: {_NOT_SUPPORTED[key]}")
                continue
            valid = [n for n in model.model_fields] + [f.alias for f in model.model_fields.values() if f.alias]
            valid += ["extends"] if section != "wandb" else []
            lines.append(f"unknown key {key!r}: " + (did_you_mean(key, valid, cutoff=0.5) or f"valid keys: {', '.join(valid)}"))
        else:
            lines.append(f"{'.'.join(loc) or 'profile'}: {e['msg']}")
    return ProfileError(f"{path} [{section}]: " + "; ".join(lines))


def load_env_file(path: str | Path) -> EnvFile:
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{path}: not valid TOML: {exc}") from None
    wandb = WandbSettings()
    tables: dict[str, dict[str, Any]] = {}
    for name, table in data.items():
        if not isinstance(table, dict):
            raise ProfileError(f"{path}: top-level key {name!r} is not a [table]; every profile is a table")
        if name == "wandb":
            try:
                wandb = WandbSettings.model_validate(table)
            except ValidationError as exc:
                raise _error(path, "wandb", exc, WandbSettings) from None
        elif name in _RESERVED_SECTIONS:
            raise ProfileError(f"{path}: [{name}] is a Nemotron system section verigym does not use; remove it")
        else:
            tables[name] = table
    profiles: dict[str, LocalProfile | SlurmProfile] = {}
    broken: dict[str, ProfileError] = {}
    for name in tables:
        try:
            profiles[name] = _validate_profile(name, tables, path)
        except ProfileError as exc:
            broken[name] = exc
    return EnvFile(path=path, wandb=wandb, profiles=profiles, broken=broken)


def _validate_profile(name: str, tables: dict[str, dict[str, Any]], path: Path) -> LocalProfile | SlurmProfile:
    merged = _resolve_extends(name, tables, path)
    executor = merged.get("executor", "local")
    model = {"slurm": SlurmProfile, "local": LocalProfile}.get(executor)
    if model is None:
        raise ProfileError(f"{path} [{name}]: executor {executor!r} is not supported; use \"slurm\" or \"local\"")
    try:
        return _PROFILE.validate_python({**merged, "executor": executor})
    except ValidationError as exc:
        raise _error(path, name, exc, model) from None


def load_profile(name: str, env_file: str | Path | None = None) -> tuple[LocalProfile | SlurmProfile, WandbSettings, Path]:
    """The profile ``name`` from the env.toml found by :func:`find_env_file`."""
    found = load_env_file(find_env_file(env_file))
    profile = found.profile(name)
    for line in found.warnings(chosen=name):
        print(line, file=sys.stderr)
    return profile, found.wandb, found.path
