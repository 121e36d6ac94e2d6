"""Runs INSIDE a NeMo-Gym venv (scripts/gym_venvs.sh), started by tests/gym/: NeMo-Gym's own
code as the client of verigym's fleet config and servers. Standard library + NeMo-Gym only.

    python gym_driver.py parse   CONFIG [--strict]         Gym's config parser; prints JSON
    python gym_driver.py models  REPLIES.json              Gym's response models on saved replies
    python gym_driver.py run     CONFIG ROWS OUT [--strict] RunHelper.start as NeMo-RL's Gym actor
                                                           calls it, then ng_collect_rollouts
Each prints one line ``GYM_DRIVER_RESULT <json>`` (Gym and Ray print around it).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path

import nemo_gym
from omegaconf import DictConfig

RESULT_MARK = "GYM_DRIVER_RESULT "
GYM_ROOT = Path(nemo_gym.__file__).resolve().parent.parent  # Gym's PARENT_DIR
VERSION = tuple(int(x) for x in nemo_gym.__version__.split(".")[:2])
COLLECT_TIMEOUT_S = float(os.environ.get("COLLECT_TIMEOUT_S", 600))
POLICY = {"policy_base_url": os.environ.get("POLICY_BASE_URL", "http://127.0.0.1:9/v1"),
          "policy_api_key": "dummy_key", "policy_model_name": os.environ.get("POLICY_MODEL", "tiny")}


class Captured(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def initial_config(config: str, strict: bool, vllm_config: str = "vllm_model.yaml") -> dict:
    model = GYM_ROOT / "responses_api_models" / "vllm_model" / "configs" / vllm_config
    cfg = {"config_paths": [str(model), config], **POLICY}
    if strict:
        cfg["error_on_agent_without_environment_server"] = True
    return cfg


def parse(config: str, strict: bool) -> dict:
    from nemo_gym.global_config import GlobalConfigDictParser

    handler = Captured()
    logging.getLogger().addHandler(handler)
    parser = GlobalConfigDictParser()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        merged = parser.parse_no_environment(initial_global_config_dict=DictConfig(initial_config(config, strict)))
        kinds: dict[str, int] = {}
        for server in parser.filter_for_server_instance_configs(merged):
            kinds[server.SERVER_TYPE] = kinds.get(server.SERVER_TYPE, 0) + 1
    messages = handler.messages + [str(w.message) for w in caught]
    return {"version": nemo_gym.__version__, "kinds": kinds,
            "deprecations": [m for m in messages if "DEPRECATED" in m or "deprecat" in m.lower()]}


def models(path: str) -> dict:
    """Validate saved verigym replies with the installed Gym's own models."""
    from nemo_gym import base_resources_server as brs
    from nemo_gym import config_types

    checked: dict[str, int] = {}
    data = json.loads(Path(path).read_text())
    for reply in data["verify"]:
        brs.BaseVerifyResponse.model_validate(reply)
        checked["BaseVerifyResponse"] = checked.get("BaseVerifyResponse", 0) + 1
    if hasattr(config_types, "AggregateMetrics"):  # Gym >= 0.3
        for reply in data.get("aggregate", []):
            config_types.AggregateMetrics.model_validate(reply)
            checked["AggregateMetrics"] = checked.get("AggregateMetrics", 0) + 1
    if hasattr(brs, "ResourcesSeedSessionResponse"):  # Gym >= 0.7
        for reply in data.get("seed07", []):
            brs.ResourcesSeedSessionResponse.model_validate(reply)
            checked["ResourcesSeedSessionResponse"] = checked.get("ResourcesSeedSessionResponse", 0) + 1
        for reply in data.get("close07", []):
            brs.ResourcesCloseSessionResponse.model_validate(reply)
            checked["ResourcesCloseSessionResponse"] = checked.get("ResourcesCloseSessionResponse", 0) + 1
    for reply in data.get("seed_legacy", []):
        brs.BaseSeedSessionResponse.model_validate(reply)
        checked["BaseSeedSessionResponse"] = checked.get("BaseSeedSessionResponse", 0) + 1
    masked = [r for r in data["verify"] if r.get("mask_sample")]
    if masked and hasattr(brs.BaseVerifyResponse, "model_fields") and "mask_sample" in brs.BaseVerifyResponse.model_fields:
        parsed = [brs.BaseVerifyResponse.model_validate(r) for r in masked]
        assert all(p.mask_sample and p.failure_kind for p in parsed), "a masked reply lost its failure fields"
    return {"version": nemo_gym.__version__, "checked": checked}


def _one_agent_per_collection() -> bool:
    from nemo_gym.rollout_collection import RolloutCollectionConfig

    field = RolloutCollectionConfig.model_fields.get("agent_name")
    return field is not None and field.is_required()


def run(config: str, rows: str, out: str, strict: bool) -> dict:
    """Gym's spinup the way NeMo-RL's NemoGym actor does it (``RunHelper().start`` with the config
    as ``initial_global_config_dict``, dotenv off, CLI off), then ``ng_collect_rollouts`` against
    the running head server, as a user collects rollouts."""
    import socket

    from nemo_gym.cli import GlobalConfigDictParserConfig, RunHelper

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        head_port = s.getsockname()[1]
    cfg = initial_config(config, strict)
    cfg.update({"head_server": {"host": "127.0.0.1", "port": head_port}, "default_host": "127.0.0.1"})
    helper = RunHelper()
    helper.start(global_config_dict_parser_config=GlobalConfigDictParserConfig(
        dotenv_path=Path(out).with_suffix(".env.yaml"), initial_global_config_dict=DictConfig(cfg),
        skip_load_from_cli=True))
    try:
        collect = Path(sys.executable).with_name("ng_collect_rollouts")
        head = [f"+head_server.host=127.0.0.1", f"+head_server.port={head_port}"]
        if _one_agent_per_collection():
            # Gym 0.2's collection takes one agent (+agent_name): one run per agent the rows name
            by_agent: dict[str, list[str]] = {}
            for line in Path(rows).read_text().splitlines():
                by_agent.setdefault(json.loads(line)["agent_ref"]["name"], []).append(line)
            outputs, done = [], None
            for agent, lines in by_agent.items():
                part_in = Path(out).with_name(f"{Path(out).stem}-{agent}-in.jsonl")
                part_out = Path(out).with_name(f"{Path(out).stem}-{agent}.jsonl")
                part_in.write_text("\n".join(lines) + "\n")
                done = subprocess.run([str(collect), f"+agent_name={agent}", f"+input_jsonl_fpath={part_in}",
                                       f"+output_jsonl_fpath={part_out}", *head],
                                      capture_output=True, text=True, timeout=COLLECT_TIMEOUT_S)
                if done.returncode != 0:
                    break
                outputs.append(part_out.read_text())
            Path(out).write_text("".join(outputs))
        else:
            done = subprocess.run([str(collect), f"+input_jsonl_fpath={rows}", f"+output_jsonl_fpath={out}", *head],
                                  capture_output=True, text=True, timeout=COLLECT_TIMEOUT_S)
    finally:
        helper.shutdown()
    results = [json.loads(line) for line in Path(out).read_text().splitlines()] if Path(out).exists() else []
    failures = Path(out).with_name(Path(out).stem + "_failures.jsonl")
    failed = [json.loads(line) for line in failures.read_text().splitlines()] if failures.exists() else []
    return {"version": nemo_gym.__version__, "returncode": done.returncode, "results": results, "failures": failed,
            "stderr_tail": done.stderr[-4000:], "stdout_tail": done.stdout[-2000:]}


def main() -> int:
    command, *rest = sys.argv[1:]
    strict = "--strict" in rest
    rest = [a for a in rest if a != "--strict"]
    if command == "parse":
        result = parse(rest[0], strict)
    elif command == "models":
        result = models(rest[0])
    elif command == "run":
        result = run(rest[0], rest[1], rest[2], strict)
    else:
        raise SystemExit(f"unknown command {command!r}")
    print(RESULT_MARK + json.dumps(result, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
