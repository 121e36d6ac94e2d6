"""Stand-in for NeMo-RL's Gym GRPO runner (tests only): at the point where NeMo-RL would start, check
what verigym's job gave it, print one ``STAND-IN NEMO-RL OK {json}`` line and exit 0 (any failed
check: a traceback and exit 1). Nothing here trains."""
import argparse
import glob
import json
import os
import sys
import urllib.request
from pathlib import Path

import yaml


def get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=10) as reply:
        return reply.status, reply.read()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    args, rest = parser.parse_known_args()
    overrides = dict(o.split("=", 1) for o in rest)
    report: dict = {"cwd": os.getcwd(), "overrides": overrides}
    # the seeds' contract, as super_launch.sh passes it on
    assert args.config == os.environ["CONFIG_PATH"], (args.config, os.environ["CONFIG_PATH"])
    assert overrides["policy.model_name"] == os.environ["MODEL_PATH"]
    assert overrides["data.train.data_path"] == os.environ["TRAIN_PATH"]
    assert overrides["data.validation.data_path"] == os.environ["VAL_PATH"]
    assert overrides["logger.wandb.name"] == os.environ["EXP_NAME"]
    for key in ("checkpointing.checkpoint_dir", "logger.log_dir"):
        assert Path(overrides[key]).is_absolute(), overrides[key]
    for var in ("NRL_WG_USE_RAY_REF", "NRL_IGNORE_VERSION_MISMATCH", "VLLM_ATTENTION_BACKEND"):
        assert os.environ.get(var), var
    assert Path(os.environ["NEMO_GYM_EXTRA_ROOTS"], "resources_servers", "verigym_remote").is_dir()
    assert not any(k.startswith("SLURM_") for k in os.environ)  # ray.sub unsets them before COMMAND
    cfg = yaml.safe_load(Path(args.config).read_text())
    assert cfg["data"]["train"]["data_path"] == os.environ["TRAIN_PATH"]
    assert "model_servers" not in cfg and "server_config" not in cfg["env"]
    # the job's Ray cluster: every node of the job joined it
    import ray

    ray.init(address="auto", log_to_driver=False)
    report["ray_nodes"] = sum(n["Alive"] for n in ray.nodes())
    report["worker_units"] = ray.cluster_resources().get("worker_units")
    # the fleet: every environment of the Gym config answers at the address filled in
    gym_file = cfg["env"]["nemo_gym"]["config_paths"][-1]
    gym = yaml.safe_load(Path(gym_file).read_text())
    fleet = {}
    report["gym_globals"] = {k: v for k, v in gym.items() if not isinstance(v, dict)}  # Gym's global settings
    for name, inst in gym.items():
        if not isinstance(inst, dict):
            continue
        server = (inst.get("resources_servers") or {}).get("verigym_remote")
        if server:
            status, _ = get(f"http://{server['host']}:{server['port']}/health")
            fleet[name] = f"http://{server['host']}:{server['port']}"
            assert status == 200
    report["fleet"] = fleet
    # the judges: each model server the job started serves its model
    judges = {}
    for f in glob.glob(os.path.join(os.environ["VERIGYM_JOB_DIR"], "run-*", "models", "[0-9]*.json")):
        data = json.loads(Path(f).read_text())
        _, body = get(data["base_url"].rstrip("/") + "/models")
        assert data["model"] in [m["id"] for m in json.loads(body)["data"]]
        judges[data["model"]] = data["base_url"]
    report["judges"] = judges
    print("STAND-IN NEMO-RL OK " + json.dumps(report, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
