"""Record the official Nemotron 3 Super RL stage configs as facts: trainer/nemo_rl/super_recipe.json.

    python scripts/record_super_recipe.py --nemotron ~/src/Nemotron --nemo-rl ~/src/NeMo-RL [--rev HEAD]

Two sources, both "official" and not identical: Nemotron's recipe
(``src/nemotron/recipes/super3/stage2_rl/<stage>/config/{default,small}.yaml``, what the seeds run
and what verigym's presets follow) and NeMo-RL's own Super YAMLs
(``examples/nemo_gym/nemotron-3-super/stage*.yaml``, larger generation pools). Each config is read
from git at the given revision (``git -C REPO show REV:PATH``; a checkout or a bare mirror both
work), its ``defaults:`` merged underneath, the launcher's ``run:`` section dropped, and flattened to
``{"a.b.c": value}``. tests/trainer/test_nemo_rl_parity.py compares trainer/configs/ against it
key by key. Rerun for a new recipe and review the diff.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

OUTPUT = Path(__file__).resolve().parent.parent / "trainer" / "nemo_rl" / "super_recipe.json"
NEMOTRON = "src/nemotron/recipes/super3/stage2_rl"
NEMOTRON_CONFIGS = {
    "rlvr": f"{NEMOTRON}/stage1_rlvr/config/default.yaml", "rlvr_small": f"{NEMOTRON}/stage1_rlvr/config/small.yaml",
    "swe1": f"{NEMOTRON}/stage2_swe1/config/default.yaml", "swe1_small": f"{NEMOTRON}/stage2_swe1/config/small.yaml",
    "swe2": f"{NEMOTRON}/stage2_swe2/config/default.yaml",
    "rlhf": f"{NEMOTRON}/stage3_rlhf/config/default.yaml", "rlhf_small": f"{NEMOTRON}/stage3_rlhf/config/small.yaml",
}
NEMO_RL = "examples/nemo_gym/nemotron-3-super"
NEMO_RL_CONFIGS = {"rlvr": f"{NEMO_RL}/stage1_rlvr.yaml", "swe1": f"{NEMO_RL}/stage2_swe1.yaml",
                   "swe2": f"{NEMO_RL}/stage2_swe2.yaml", "rlhf": f"{NEMO_RL}/stage3_rlhf.yaml"}


class _OmegaConfLoader(yaml.SafeLoader):
    """YAML as OmegaConf (and so NeMo-RL) reads it: ``3e-7`` is a float (YAML 1.1 wants ``3.0e-7``)."""


_OmegaConfLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?|[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
               |\.[0-9_]+(?:[eE][-+][0-9]+)?|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*|[-+]?\.(?:inf|Inf|INF)
               |\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."))


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load(repo: Path, rev: str, path: str) -> dict[str, Any]:
    data = yaml.load(_git(repo, "show", f"{rev}:{path}"), Loader=_OmegaConfLoader) or {}
    parent = data.pop("defaults", None)
    if parent:
        data = _merge(load(repo, rev, str(Path(path).parent / parent)), data)
    data.pop("run", None)
    return data


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict) and data:
        out: dict[str, Any] = {}
        for k, v in data.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: data}


def record(nemotron: Path, nemo_rl: Path, rev_nemotron: str, rev_nemo_rl: str) -> dict[str, Any]:
    def source(repo: Path, rev: str, name: str) -> dict[str, str]:
        commit = _git(repo, "rev-parse", rev).strip()
        date = _git(repo, "show", "-s", "--format=%cs", commit).strip()
        return {"repo": name, "commit": commit, "date": date}

    return {
        "sources": {"nemotron": source(nemotron, rev_nemotron, "NVIDIA-NeMo/Nemotron"),
                    "nemo_rl": source(nemo_rl, rev_nemo_rl, "NVIDIA-NeMo/RL")},
        "nemotron": {name: {"path": path, "values": flatten(load(nemotron, rev_nemotron, path))}
                     for name, path in NEMOTRON_CONFIGS.items()},
        "nemo_rl": {name: {"path": path, "values": flatten(load(nemo_rl, rev_nemo_rl, path))}
                    for name, path in NEMO_RL_CONFIGS.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nemotron", type=Path, required=True, help="a clone (or mirror) of NVIDIA-NeMo/Nemotron")
    parser.add_argument("--nemo-rl", type=Path, required=True, help="a clone (or mirror) of NVIDIA-NeMo/RL")
    parser.add_argument("--rev-nemotron", default="HEAD")
    parser.add_argument("--rev-nemo-rl", default="HEAD")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()
    data = record(args.nemotron, args.nemo_rl, args.rev_nemotron, args.rev_nemo_rl)
    args.output.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")
    counts = {k: len(v["values"]) for src in ("nemotron", "nemo_rl") for k, v in ((f"{src}:{n}", c) for n, c in data[src].items())}
    print(json.dumps({"output": str(args.output), "keys": counts}))


if __name__ == "__main__":
    main()
