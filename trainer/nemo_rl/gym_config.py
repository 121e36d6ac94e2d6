"""The NeMo-Gym config that points NeMo-Gym (inside NeMo-RL, or ``ng_run`` by hand) at the
verigym fleet.

Gym spawns every server instance that has an ``entrypoint`` and routes each row to the agent
named by its ``agent_ref.name``. Per environment the fleet serves, this file declares

* a resources-server instance named after the environment, whose ``host``/``port`` are the
  address the verigym server bound and reported, and whose implementation is
  ``verigym_remote`` (``gym_root/resources_servers/verigym_remote``): Gym needs a process per
  instance, and that one only watches the verigym server's ``/health`` and exits when it stops
  answering, so Gym sees a dead environment as dead. Agents POST to host:port directly.
* one ``simple_agent`` instance per agent name the environment answers (its class's
  ``agent_names`` plus the blend's own ``agent_map`` entries), pointing at that resources server
  and at ``policy_model`` (NeMo-RL's vLLM, from ``vllm_model_for_training.yaml``), with the
  agent settings (``max_steps``) the environment declares or the blend's ``agent_settings`` set;
* for Gym >= 0.7, one environment server per agent (``single_agent_turn_legacy``: rollout
  collection reaches an agent only through one; it seeds the resources session in Gym 0.7's
  contract and takes the flat rows the data carries), so the config passes Gym's strict mode
  (``error_on_agent_without_environment_server``) with no deprecation warning. Older Gyms know
  no environment servers: :func:`for_gym_version` leaves those blocks out.

The addresses exist only once the fleet is up, so the driver writes a template (host/port null)
and the job runs ``python3 trainer/nemo_rl/gym_config.py --template T --fleet F --output O``
after the readiness gate; with ``--gym-root`` (the Gym the job runs) it also writes the form that
Gym accepts and installs the stand-in where that Gym looks (trainer/nemo_rl/gym_install.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import urlparse

import yaml

if __package__ in (None, ""):  # run as a script in the job (python3 .../gym_config.py): no package context
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from trainer.nemo_rl.gym_install import GymInstallError, gym_version, install_stand_in  # noqa: E402

GYM_ROOT = Path(__file__).resolve().parent / "gym_root"  # NEMO_GYM_EXTRA_ROOTS for the job (Gym >= 0.5)
REMOTE_IMPL = "verigym_remote"
ENVIRONMENT_SERVER_IMPL = "single_agent_turn_legacy"
ENVIRONMENT_SERVERS = "environment_servers"
FIRST_ENVIRONMENT_SERVER_GYM = (0, 7)
# NeMo-Gym's Domain enum (nemo_gym/config_types.py); a resources server must name one. Gym 0.2
# (NeMo-RL v0.5.0's container) has no "rlhf": an instance naming it is refused as an almost-server.
GYM_DOMAINS = ("math", "coding", "agent", "knowledge", "instruction_following", "long_context", "safety", "games",
               "translation", "e2e", "rlhf", "other")
FIRST_RLHF_DOMAIN_GYM = (0, 3)
# The simple_agent keys an environment or a blend may set (trainer.blends.AgentSettings).
AGENT_SETTING_KEYS = ("max_steps",)


@dataclass(frozen=True)
class FleetEnv:
    """One environment the fleet serves, as the Gym config needs it."""
    name: str
    domain: str
    agent_names: tuple[str, ...]
    agent_settings: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # agent -> simple_agent keys


def fleet_env(name: str, info: Mapping[str, Any], agent_names: tuple[str, ...],
              blend_settings: Mapping[str, Any] | None = None) -> FleetEnv:
    """A :class:`FleetEnv` from what the environment publishes (``envs info --json``: domain,
    ``max_steps``) and the blend's ``agent_settings`` (keyed by environment or agent name; an
    agent's own entry wins, then the environment's, then what the environment declares)."""
    blend_settings = blend_settings or {}

    def settings_of(key: str) -> dict[str, Any]:
        entry = blend_settings.get(key)
        if entry is None:
            return {}
        data = entry.model_dump(exclude_unset=True) if hasattr(entry, "model_dump") else dict(entry)
        return {k: v for k, v in data.items() if k in AGENT_SETTING_KEYS}

    declared = {k: info[k] for k in AGENT_SETTING_KEYS if info.get(k) is not None}
    per_agent = {}
    for agent in agent_names:
        merged = {**declared, **settings_of(name), **settings_of(agent)}
        per_agent[agent] = {k: v for k, v in merged.items() if v is not None}
    return FleetEnv(name, str(info.get("domain", "")), agent_names, per_agent)


def gym_domain(domain: str) -> str:
    return domain if domain in GYM_DOMAINS else "other"


def environment_server_name(agent: str) -> str:
    """Gym's own name for an agent's environment server (``legacy_environment_server_name``):
    ``math_with_judge_simple_agent`` -> ``math_with_judge_environment_server``."""
    stem = agent.removesuffix("_simple_agent").removesuffix("simple_agent").rstrip("_")
    if stem == agent:
        stem = agent.removesuffix("_agent").rstrip("_")
    return f"{stem or 'simple_agent'}_environment_server"


def render_template(envs: list[FleetEnv]) -> dict[str, Any]:
    """Gym instances for the fleet, with host/port left null until the fleet reports them."""
    config: dict[str, Any] = {}

    def claim(name: str, what: str) -> None:
        if name in config:
            raise ValueError(f"{what} {name!r} is also an environment, agent or environment-server name, or is "
                             f"answered by two environments")

    for env in envs:
        claim(env.name, "environment")
        config[env.name] = {"resources_servers": {REMOTE_IMPL: {
            "entrypoint": "app.py", "domain": gym_domain(env.domain), "host": None, "port": None,
            "verigym_env": env.name, "health_poll_s": 5.0, "health_failures_to_exit": 6}}}
    for env in envs:
        resources = {"type": "resources_servers", "name": env.name}
        for agent in env.agent_names:
            claim(agent, "agent name")
            config[agent] = {"responses_api_agents": {"simple_agent": {
                "entrypoint": "app.py", "resources_server": resources,
                "model_server": {"type": "responses_api_models", "name": "policy_model"},
                **dict(env.agent_settings.get(agent, {}))}}}
            server = environment_server_name(agent)
            if server in config:  # two agents with one stem (calendar_agent, calendar_simple_agent): Gym's rule
                server = f"{agent}_environment_server"
            claim(server, "environment server")
            config[server] = {ENVIRONMENT_SERVERS: {ENVIRONMENT_SERVER_IMPL: {
                "entrypoint": "app.py", "resources_server": resources,
                "agent_server": {"type": "responses_api_agents", "name": agent},
                # the agent reaches the environment's tools over HTTP with the session's cookie
                "resources_tool_transports": ["direct_http"],
                "max_concurrent_episodes": None, "queue_timeout_seconds": None,
                "default_episode_timeout_seconds": 21600, "cleanup_timeout_seconds": 180}}}
    return config


def for_gym_version(config: dict[str, Any], version: tuple[int, ...]) -> dict[str, Any]:
    """The config in the form Gym ``version`` accepts: Gym < 0.7 has no environment servers
    (it would try to start ``environment_servers/...`` and find no such folder); Gym < 0.3 has no
    ``rlhf`` domain (``other`` there)."""
    if tuple(version[:2]) >= FIRST_ENVIRONMENT_SERVER_GYM:
        return config
    out = {k: v for k, v in config.items() if not (isinstance(v, dict) and ENVIRONMENT_SERVERS in v)}
    if tuple(version[:2]) < FIRST_RLHF_DOMAIN_GYM:
        out = json.loads(json.dumps(out))
        for instance in out.values():
            inner = instance.get("resources_servers", {}).get(REMOTE_IMPL) if isinstance(instance, dict) else None
            if inner is not None and inner.get("domain") == "rlhf":
                inner["domain"] = "other"
    return out


class FleetAddressError(ValueError):
    pass


def read_fleet_addresses(path: Path) -> dict[str, str]:
    """``{"math": "http://host:port", ...}`` from the fleet's report: env -> URL or [URL, ...]
    (the launch module's gate), or ``{"servers": {...}}``, or ``{"servers": [{"env": .., "url": ..}]}``."""
    data = json.loads(path.read_text())
    servers = data.get("servers", data) if isinstance(data, dict) else data
    if isinstance(servers, list):
        servers = {s["env"]: s["url"] for s in servers}
    if not isinstance(servers, dict):
        raise FleetAddressError(f"{path}: expected env -> URL mapping, got {str(data)[:200]}")
    out = {}
    for env, urls in servers.items():
        # the launch module's gate writes {env: [url, ...]} (one per fleet node). A Gym instance has
        # one host:port, so Gym's agents use the first replica.
        url = urls[0] if isinstance(urls, list) and urls else urls
        if not isinstance(url, str):
            raise FleetAddressError(f"{path}: environment {env!r}: expected a URL or a list of URLs, got {urls!r}")
        out[env] = url
    return out


def fill_addresses(template: dict[str, Any], addresses: dict[str, str]) -> dict[str, Any]:
    out = json.loads(json.dumps(template))
    missing = []
    for name, instance in out.items():
        inner = instance.get("resources_servers", {}).get(REMOTE_IMPL) if isinstance(instance, dict) else None
        if inner is None:
            continue
        url = addresses.get(inner["verigym_env"])
        if url is None:
            missing.append(inner["verigym_env"])
            continue
        parsed = urlparse(url)
        if not parsed.hostname or not parsed.port:
            raise FleetAddressError(f"environment {name!r}: address {url!r} has no host:port")
        inner["host"], inner["port"] = parsed.hostname, parsed.port
    if missing:
        raise FleetAddressError(f"the fleet reported no address for: {', '.join(missing)} "
                                f"(reported: {', '.join(sorted(addresses)) or 'none'})")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 trainer/nemo_rl/gym_config.py",
        description="Fill the fleet's reported addresses into the NeMo-Gym config template; with --gym-root, "
                    "write the form that Gym accepts and install verigym's stand-in server where it looks.")
    parser.add_argument("--template", required=True, type=Path)
    parser.add_argument("--fleet", required=True, type=Path, help="the fleet's address report (JSON)")
    parser.add_argument("--output", required=True, type=Path)
    parser.add_argument("--gym-root", type=Path, help="the folder holding the job's nemo_gym package (a Gym "
                        "checkout, or site-packages): its version picks the config form and where the stand-in goes")
    parser.add_argument("--grpo", type=Path, help="the NeMo-RL config (grpo.yaml): its env.nemo_gym.uv_venv_dir and "
                        "skip_venv_if_present say where Gym looks for the stand-in's venv")
    args = parser.parse_args(argv)
    try:
        filled = fill_addresses(yaml.safe_load(args.template.read_text()), read_fleet_addresses(args.fleet))
        notes: list[str] = []
        if args.gym_root is not None:
            version = gym_version(args.gym_root)
            filled = for_gym_version(filled, version)
            grpo = yaml.safe_load(args.grpo.read_text()) if args.grpo else {}
            settings, notes = install_stand_in(args.gym_root, version, GYM_ROOT,
                                               ((grpo or {}).get("env") or {}).get("nemo_gym") or {})
            filled.update(settings)
    except (FleetAddressError, GymInstallError, OSError, json.JSONDecodeError, yaml.YAMLError) as exc:
        print(f"gym_config: {exc}", file=sys.stderr)
        return 2
    args.output.write_text(yaml.safe_dump(filled, sort_keys=False))
    servers = sum(1 for v in filled.values() if isinstance(v, dict) and "resources_servers" in v)
    print(f"{args.output}: {servers} environment servers")
    for note in notes:
        print(f"gym_config: {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
