"""The judge and GenRM model servers a blend's environments need, and how a run gets each one.

Judged environments (equivalence, IF, safety, GenRM, ...) call an OpenAI-compatible model at their
judges' ``base_url`` under the judges' ``model`` name. Before anything starts, this module asks the
environments which judges they will call (``envs judges --json``: their own config loading, with
``env.server_config`` applied, in a child process: the trainer imports no environment) and decides,
per model:

- **external**: the profile names a ``url`` for it, or ``env.server_config`` points the judge at a
  URL: nothing is started; the job checks the URL serves that model before the fleet starts;
- **started by the job**: the profile (``[PROFILE.model_servers.NAME]``) or the stage preset
  (``model_servers:``, the recipe's models and parallelism) says how: ``envs model serve SOURCE``
  (CPU or one GPU; the tiny models of one-machine runs) or ``vllm serve`` (tensor parallel x
  replicas on GPU nodes). The job gates on its ``/health`` and on ``/v1/models`` listing the model
  name, then gives its URL to every judge of that model;
- **missing**: neither: the plan says which environments need it and what to add, and a run
  refuses to start (no ~200 s wait for a fleet that cannot become healthy).

Without a job (``driver run`` on this machine) nothing is started: the judges' URLs are checked
up front (:func:`check_endpoints`) and the plan lists the unreachable ones.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field

from trainer.fleet import override_pairs

Engine = Literal["vllm", "envs-model"]


class ModelServerError(ValueError):
    pass


class ModelServerSetting(BaseModel):
    """One model server, as a stage preset (``model_servers: {NAME: {...}}``) or an env.toml
    profile (``[PROFILE.model_servers.NAME]``) describes it; the profile's fields win."""
    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(description="the model name the judges send (and the server serves)")
    url: str | None = Field(None, description="an OpenAI-compatible API root that already serves it: nothing is started")
    engine: Engine | None = Field(None, description="vllm (GPU nodes) or envs-model (`envs model serve`, CPU or one GPU)")
    source: str | None = Field(None, description="weights: a checkpoint folder or hub id (default: the model name)")
    tensor_parallel: int = Field(1, ge=1)
    replicas: int = Field(1, ge=1, description="data-parallel copies behind the one URL")
    nodes: int | None = Field(None, ge=0, description="nodes it occupies (default: tensor_parallel x replicas / gpus per node)")
    vllm_args: list[str] = Field(default_factory=list, description="extra `vllm serve` arguments (engine vllm)")
    cpu_threads: int | None = Field(None, ge=0, description="engine envs-model: torch's CPU threads (--cpu-threads; "
                                    "default: torch's own choice, one per core). A server beside the fleet shares "
                                    "the node's cores: 1-2 avoid threads spinning against the environment servers")


@dataclass(frozen=True)
class JudgeUse:
    """One environment's named judge."""
    env: str
    judge: str
    model: str
    base_url: str
    set_by_user: bool  # env.server_config names its base_url (else config.yaml's default)

    @property
    def key(self) -> str:
        return f"{self.env}.{self.judge}"


@dataclass(frozen=True)
class ModelServer:
    """A model the run's judges need, and how the run gets it."""
    model: str
    how: Literal["job", "external"]
    users: tuple[JudgeUse, ...]
    name: str = ""
    url: str | None = None            # external
    engine: Engine | None = None      # job
    source: str | None = None
    tensor_parallel: int = 1
    replicas: int = 1
    nodes: int = 0                    # whole nodes it takes (0: runs beside the fleet, CPU)
    vllm_args: tuple[str, ...] = ()
    cpu_threads: int | None = None    # envs-model: --cpu-threads

    def describe(self) -> str:
        envs = ", ".join(u.key for u in self.users)
        if self.how == "external":
            return f"{self.model}: external at {self.url} (checked before the fleet starts) <- {envs}"
        where = f"{self.nodes} node(s)" if self.nodes else "beside the fleet"
        size = f"tensor parallel {self.tensor_parallel} x {self.replicas} replica(s)" if self.engine == "vllm" else "1 process"
        return (f"{self.model}: started by the job ({self.engine} {self.source or self.model}, {size}, {where}) "
                f"<- {envs}")


@dataclass
class ModelServerPlan:
    servers: list[ModelServer] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)   # one line each: who needs what, what to add

    @property
    def nodes(self) -> int:
        return sum(s.nodes for s in self.servers)

    def lines(self) -> list[str]:
        if not self.servers and not self.missing:
            return ["model servers: none (no environment of this run calls a judge)"]
        return ([f"model servers: {len(self.servers)} ({self.nodes} node(s))"]
                + [f"  {s.describe()}" for s in self.servers]
                + [f"  MISSING: {m}" for m in self.missing])

    def judge_routes(self) -> list[tuple[str, str, str]]:
        """``(env, judge, model)`` for every judge whose URL the job fills in."""
        return [(u.env, u.judge, s.model) for s in self.servers for u in s.users]


def judge_uses(envs: list[str], server_config: Mapping[str, Mapping[str, Any]] | None = None) -> list[JudgeUse]:
    """The judges ``envs`` will call, with ``server_config`` (``{env: {key: value}}``) applied."""
    if not envs:
        return []
    pairs = [f"{env}.{pair}" for env in envs for pair in override_pairs(dict((server_config or {}).get(env, {})))]
    done = subprocess.run([sys.executable, "-m", "servers.cli", "judges", *envs, *pairs, "--json"], capture_output=True,
                          text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    if done.returncode != 0:
        raise ModelServerError((done.stderr.strip().splitlines() or [f"envs judges exited {done.returncode}"])[-1])
    found = json.loads(done.stdout)
    return [JudgeUse(env, judge, cfg["model"], cfg["base_url"], bool(cfg.get("set")))
            for env in envs for judge, cfg in found.get(env, {}).items()]


def _merge(preset: Mapping[str, Any], profile: Mapping[str, ModelServerSetting]
           ) -> tuple[dict[str, ModelServerSetting], dict[str, str]]:
    """``({model: setting}, {model: name})``: the preset's entries, then the profile's, field by field."""
    merged: dict[str, dict[str, Any]] = {}
    names: dict[str, str] = {}
    for source in (preset, profile):
        for name, setting in source.items():
            data = setting.model_dump(exclude_unset=True) if isinstance(setting, ModelServerSetting) else dict(setting)
            try:
                checked = ModelServerSetting.model_validate(data)
            except Exception as exc:  # noqa: BLE001 - pydantic's message, on one line
                raise ModelServerError(f"model_servers.{name}: {str(exc).splitlines()[-1].strip()}") from None
            merged[checked.model] = {**merged.get(checked.model, {}), **data}
            names.setdefault(checked.model, name)
    return {model: ModelServerSetting.model_validate(data) for model, data in merged.items()}, names


def plan_model_servers(uses: list[JudgeUse], *, preset: Mapping[str, Any] | None = None,
                       profile: Mapping[str, ModelServerSetting] | None = None, gpus_per_node: int | None = None,
                       where: str = "PROFILE", job: bool = True) -> ModelServerPlan:
    """How the run gets every model its judges need. Per model, first match wins: the profile's
    entry (where this cluster serves it: a ``url``, or how to start it); a judge ``base_url`` that
    ``env.server_config`` sets (used as given); the stage preset's entry (the recipe's parallelism,
    started by the job); else missing. ``job=False`` (a run on this machine): every judge URL is
    used as configured."""
    settings, names = _merge(preset or {}, profile or {})
    profiled = {ModelServerSetting.model_validate(dict(v) if not isinstance(v, ModelServerSetting) else v).model
                for v in (profile or {}).values()}
    plan = ModelServerPlan()
    by_model: dict[str, list[JudgeUse]] = {}
    for use in uses:
        by_model.setdefault(use.model, []).append(use)
    for model, users in by_model.items():
        setting = settings.get(model)
        if not job or (model not in profiled and any(u.set_by_user for u in users)):
            pointed = users if not job else [u for u in users if u.set_by_user]
            for url in sorted({u.base_url for u in pointed}):
                plan.servers.append(ModelServer(model, "external", tuple(u for u in pointed if u.base_url == url),
                                                url=url.rstrip("/")))
            users = [u for u in users if u not in pointed]
            if not users:
                continue
        if setting is not None and setting.url:
            plan.servers.append(ModelServer(model, "external", tuple(users), names.get(model, ""), url=setting.url.rstrip("/")))
            continue
        if setting is None:
            keys = ", ".join(u.key for u in users)
            plan.missing.append(
                f"{keys}: judge model {model!r}: nothing serves it: add [{where}.model_servers.NAME] with "
                f"model = \"{model}\" and source = \"PATH\" (the job starts it) or url = \"http://HOST:PORT/v1\" "
                f"(an OpenAI-compatible server), or set env.server_config.{users[0].env}.judges.{users[0].judge}.base_url")
            continue
        # vLLM where there are GPUs or the setting asks for parallelism; else one `envs model serve` process
        engine = setting.engine or ("vllm" if gpus_per_node or setting.tensor_parallel * setting.replicas > 1
                                    else "envs-model")
        foreign = "vllm_args" if engine == "envs-model" and setting.vllm_args else \
            "cpu_threads" if engine == "vllm" and setting.cpu_threads is not None else None
        if foreign:
            plan.missing.append(f"{model}: {foreign} is not an option of engine {engine} (vllm_args: engine vllm; "
                                "cpu_threads: engine envs-model)")
            continue
        if engine == "vllm" and not gpus_per_node:
            plan.missing.append(f"{model}: engine vllm needs GPU nodes; this profile has no gpus_per_node "
                                "(use engine = \"envs-model\" for a CPU model, or url = ...)")
            continue
        gpus = setting.tensor_parallel * setting.replicas
        nodes = setting.nodes if setting.nodes is not None else (math.ceil(gpus / gpus_per_node) if engine == "vllm" else 0)
        if engine == "vllm" and nodes * (gpus_per_node or 0) < gpus:
            plan.missing.append(f"{model}: tensor_parallel {setting.tensor_parallel} x replicas {setting.replicas} = "
                                f"{gpus} GPUs do not fit on nodes = {nodes} x {gpus_per_node} GPUs")
            continue
        plan.servers.append(ModelServer(model, "job", tuple(users), names.get(model, ""), engine=engine,
                                        source=resolve_source(setting.source) or model,
                                        tensor_parallel=setting.tensor_parallel, replicas=setting.replicas, nodes=nodes,
                                        vllm_args=tuple(setting.vllm_args), cpu_threads=setting.cpu_threads))
    return plan


def serve_argv(server: ModelServer, *, python: str, vllm: tuple[str, ...] = ("vllm",), in_ray: bool = False) -> list[str]:
    """The command that serves ``server`` (``{host}``, ``{port}``, ``{ready_file}`` are filled in on
    its node by trainer/launch/model_steps.py). ``in_ray``: vLLM runs inside the job's Ray cluster and
    places its engines there (NeMo-RL's jobs: every GPU the judges use is then one Ray knows is taken)."""
    if server.engine == "envs-model":
        threads = ["--cpu-threads", str(server.cpu_threads)] if server.cpu_threads is not None else []
        return [python, "-m", "servers.cli", "model", "serve", str(server.source), "--served-model-name", server.model,
                "--host", "{host}", "--port", "0", "--ready-file", "{ready_file}", *threads]
    argv = [*vllm, "serve", str(server.source), "--served-model-name", server.model, "--host", "{host}", "--port", "{port}",
            "--tensor-parallel-size", str(server.tensor_parallel)]
    if server.replicas > 1:
        argv += ["--data-parallel-size", str(server.replicas)]
    if in_ray or server.nodes > 1:  # vLLM places its engines with Ray, as NeMo-Gym's local_vllm_model does
        argv += ["--data-parallel-backend", "ray", "--distributed-executor-backend", "ray"]
    return argv + list(server.vllm_args)


def served_models(base_url: str, timeout_s: float = 5.0) -> list[str]:
    """The model ids ``GET {base_url}/models`` lists; OSError/ValueError when it does not answer with that list."""
    with urllib.request.urlopen(base_url.rstrip("/") + "/models", timeout=timeout_s) as reply:
        data = json.loads(reply.read())
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise ValueError(f"{base_url}/models is not an OpenAI model list")
    return [str(m.get("id")) for m in data["data"] if isinstance(m, dict)]


def endpoint_problem(base_url: str, model: str, timeout_s: float = 5.0) -> str | None:
    """None when ``base_url`` serves ``model``; else why not, in a few words."""
    try:
        ids = served_models(base_url, timeout_s)
    except urllib.error.HTTPError as exc:
        return f"{base_url}/models answered HTTP {exc.code}"
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return f"{base_url} does not answer ({reason})"
    if model not in ids:
        return f"{base_url} serves {ids}, not {model!r}"
    return None


def check_endpoints(plan: ModelServerPlan) -> list[str]:
    """For a run on this machine: one line per external model that is not served where its judges look."""
    problems = []
    for server in plan.servers:
        if server.how == "external" and server.url:
            why = endpoint_problem(server.url, server.model)
            if why:
                first = server.users[0]
                problems.append(f"{', '.join(u.key for u in server.users)}: judge model {server.model!r}: {why}; start "
                                f"it there (`envs model serve PATH --served-model-name {server.model}` or `vllm serve`) "
                                f"or point env.server_config.{first.env}.judges.{first.judge}.base_url=URL at a server of it")
    return problems


def resolve_source(source: str | None) -> str | None:
    """A local checkpoint folder as an absolute path (the job may start elsewhere); a hub id as is."""
    from pathlib import Path

    if source and Path(source).expanduser().exists():
        return str(Path(source).expanduser().resolve())
    return source


def local_report(envs: list[str], server_config: Mapping[str, Mapping[str, Any]]) -> tuple[list[str], list[str]]:
    """A run on this machine starts no model server: ``(plan lines, problems)``, where problems are the
    judges whose URL does not serve their model (each a line saying who needs what, and what to do)."""
    plan = plan_model_servers(judge_uses(envs, server_config), job=False)
    lines = ["judge endpoints: none (no environment of this run calls a judge)"] if not plan.servers else (
        ["judge endpoints (checked now):"] + [f"  {s.model} at {s.url} <- {', '.join(u.key for u in s.users)}"
                                                for s in plan.servers])
    return lines, check_endpoints(plan)
