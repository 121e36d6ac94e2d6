"""The NeMo-Gym config that points NeMo-RL's Gym integration at the verigym fleet.

NeMo-RL starts NeMo-Gym inside its run (``env.nemo_gym`` is Gym's global config): Gym spawns every
server instance that has an ``entrypoint`` and routes each row to the agent named by its
``agent_ref.name``. Per environment the fleet serves, this file declares

* a resources-server instance named after the environment, whose ``host``/``port`` are the
  address the verigym server bound and reported, and whose implementation is
  ``verigym_remote`` (``gym_root/resources_servers/verigym_remote``): Gym needs a process per
  instance, and that one only watches the verigym server's ``/health`` and exits when it stops
  answering, so Gym sees a dead environment as dead. Agents POST to host:port directly.
* one ``simple_agent`` instance per agent name the environment answers (its class's
  ``agent_names`` plus the blend's own ``agent_map`` entries), pointing at that resources server
  and at ``policy_model`` (NeMo-RL's vLLM, from ``vllm_model_for_training.yaml``).

The addresses exist only once the fleet is up, so the driver writes a template (host/port null)
and the job runs ``python -m trainer.nemo_rl.gym_config --fleet FILE`` after the readiness gate.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import yaml

GYM_ROOT = Path(__file__).resolve().parent / "gym_root"  # NEMO_GYM_EXTRA_ROOTS for the job
REMOTE_IMPL = "verigym_remote"
# NeMo-Gym's Domain enum (nemo_gym/config_types.py); a resources server must name one.
GYM_DOMAINS = ("math", "coding", "agent", "knowledge", "instruction_following", "long_context", "safety", "games",
               "translation", "e2e", "rlhf", "other")


@dataclass(frozen=True)
class FleetEnv:
    """One environment the fleet serves, as the Gym config needs it."""
    name: str
    domain: str
    agent_names: tuple[str, ...]


def gym_domain(domain: str) -> str:
    return domain if domain in GYM_DOMAINS else "other"


def render_template(envs: list[FleetEnv]) -> dict[str, Any]:
    """Gym instances for the fleet, with host/port left null until the fleet reports them."""
    config: dict[str, Any] = {}
    for env in envs:
        config[env.name] = {"resources_servers": {REMOTE_IMPL: {
            "entrypoint": "app.py", "domain": gym_domain(env.domain), "host": None, "port": None,
            "verigym_env": env.name, "health_poll_s": 5.0, "health_failures_to_exit": 6}}}
        for agent in env.agent_names:
            if agent in config:
                raise ValueError(f"agent name {agent!r} is also an environment name or is answered by two environments")
            config[agent] = {"responses_api_agents": {"simple_agent": {
                "entrypoint": "app.py",
                "resources_server": {"type": "resources_servers", "name": env.name},
                "model_server": {"type": "responses_api_models", "name": "policy_model"}}}}
    return config


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
        inner = instance.get("resources_servers", {}).get(REMOTE_IMPL)
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
    parser = argparse.ArgumentParser(prog="python -m trainer.nemo_rl.gym_config",
                                     description="Fill the fleet's reported addresses into the NeMo-Gym config template.")
    parser.add_argument("--template", required=True, type=Path)
    parser.add_argument("--fleet", required=True, type=Path, help="the fleet's address report (JSON)")
    parser.add_argument("--output", required=True, type=Path)
    args = parser.parse_args(argv)
    try:
        filled = fill_addresses(yaml.safe_load(args.template.read_text()), read_fleet_addresses(args.fleet))
    except (FleetAddressError, OSError, json.JSONDecodeError) as exc:
        print(f"gym_config: {exc}", file=sys.stderr)
        return 2
    args.output.write_text(yaml.safe_dump(filled, sort_keys=False))
    print(f"{args.output}: {sum(1 for v in filled.values() if 'resources_servers' in v)} environment servers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
