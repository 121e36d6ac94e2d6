"""Record NeMo-RL's GRPO config schema (key names and types) into trainer/nemo_rl/schema.json.

    python scripts/record_nemo_rl_schema.py --repo /path/to/NVIDIA-NeMo/RL [--output FILE]

NeMo-RL declares its config as TypedDicts and pydantic models (``MasterConfig`` in
``nemo_rl/algorithms/grpo.py`` and what it references). This script reads those class
bodies with ``ast`` (nothing of NeMo-RL is imported: it needs GPUs and Megatron) and writes
every key path with its type, whether it is required, and the source file, plus the commit it
was read from. ``trainer/nemo_rl/schema.py`` checks emitted configs against that file.

The ``env`` section is ``dict[str, Any]`` in MasterConfig; its NeMo-Gym keys are read where
NeMo-RL reads them (``nemo_rl/environments/nemo_gym.py``, the Gym runner) and are listed
below by hand, with the file they come from. Rerun this script when moving to a new NeMo-RL
release and review the diff of schema.json.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

ROOT_FILE = "nemo_rl/algorithms/grpo.py"
ROOT_CLASS = "MasterConfig"
OUTPUT = Path(__file__).resolve().parent.parent / "trainer" / "nemo_rl" / "schema.json"
PRIMITIVES = {"int": "int", "float": "float", "bool": "bool", "str": "str", "None": "none", "NoneType": "none",
              "Any": "any", "object": "any", "dict": "dict", "Dict": "dict", "list": "list", "List": "list"}
LIST_LIKE = {"list", "List", "Sequence", "tuple", "Tuple", "set", "Set"}
DICT_LIKE = {"dict", "Dict", "Mapping", "MutableMapping"}
CONFIG_BASES = {"TypedDict", "BaseModel"}
# policy.generation is typed as the base GenerationConfig; the backend sections (vllm_cfg,
# mcore_generation_config, ...) are declared on its subclasses, which are recorded as variants.
GENERATION_BASE = "nemo_rl.models.generation.interfaces:GenerationConfig"

# env.* keys NeMo-RL reads for the NeMo-Gym path (MasterConfig types env as dict[str, Any]).
ENV_SECTION = {
    "origin": "nemo_rl/environments/nemo_gym.py, nemo_rl/experience/rollouts.py, nemo_rl/algorithms/grpo.py",
    "extra": "forbid",
    "fields": {
        "should_use_nemo_gym": {"type": {"t": "bool"}, "required": False},
        "should_log_nemo_gym_responses": {"type": {"t": "bool"}, "required": False},
        "should_mask_flagged_samples": {"type": {"t": "bool"}, "required": False},
        "nemo_gym": {"type": {"t": "model", "name": "env:NemoGymSection"}, "required": False},
    },
}
# env.nemo_gym is NeMo-Gym's initial global config: NeMo-RL's own knobs (stripped before it is
# forwarded), Gym's reserved top-level keys, and per-server-instance overrides (any other key,
# whose value must be a {server_type: {impl: {...}}} mapping; see schema.py).
NEMO_GYM_SECTION = {
    "origin": "nemo_rl/environments/nemo_gym.py (NemoGymConfig, _spinup), nemo_gym/global_config.py "
              "(NEMO_GYM_RESERVED_TOP_LEVEL_KEYS), nemo_rl/experience/rollouts.py (EffortLevelsConfig)",
    "extra": "gym_instances",
    "fields": {
        "config_paths": {"type": {"t": "list", "of": {"t": "str"}}, "required": True},
        "num_gpu_nodes": {"type": {"t": "int"}, "required": False},
        "port_range_low": {"type": {"t": "int"}, "required": False},
        "port_range_high": {"type": {"t": "int"}, "required": False},
        "uv_venv_dir": {"type": {"t": "str"}, "required": False},
        "skip_venv_if_present": {"type": {"t": "bool"}, "required": False},
        "uv_cache_dir": {"type": {"t": "str"}, "required": False},
        "default_host": {"type": {"t": "str"}, "required": False},
        "use_absolute_ip": {"type": {"t": "bool"}, "required": False},
        "model_endpoint_readiness_timeout_seconds": {"type": {"t": "union", "of": [{"t": "int"}, {"t": "float"}]}, "required": False},
        "is_trajectory_collection": {"type": {"t": "bool"}, "required": False},
        "invalid_tool_call_patterns": {"type": {"t": "union", "of": [{"t": "list", "of": {"t": "str"}}, {"t": "none"}]}, "required": False},
        "thinking_tags": {"type": {"t": "union", "of": [{"t": "list", "of": {"t": "str"}}, {"t": "none"}]}, "required": False},
        "use_fastokens": {"type": {"t": "bool"}, "required": False},
        "require_routed_experts": {"type": {"t": "bool"}, "required": False},
        "routed_experts_dtype": {"type": {"t": "str"}, "required": False},
        "pad_dynamic_image_shapes": {"type": {"t": "bool"}, "required": False},
        "effort_levels": {"type": {"t": "union", "of": [{"t": "model", "name": "nemo_rl.experience.rollouts:EffortLevelsConfig"},
                                                       {"t": "none"}]}, "required": False},
    },
}


def _module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


class Collector:
    def __init__(self, repo: Path):
        self.repo = repo
        self.classes: dict[str, tuple[str, ast.ClassDef]] = {}  # "module:Name" -> (module, node)
        self.imports: dict[str, dict[str, str]] = {}  # module -> local name -> "module:Name"
        self.by_name: dict[str, list[str]] = {}
        for path in sorted((repo / "nemo_rl").rglob("*.py")):
            module = _module_name(path, repo)
            tree = ast.parse(path.read_text(), filename=str(path))
            self.imports[module] = {}
            for node in tree.body:
                if isinstance(node, ast.ClassDef):
                    key = f"{module}:{node.name}"
                    self.classes[key] = (module, node)
                    self.by_name.setdefault(node.name, []).append(key)
                elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("nemo_rl"):
                    for alias in node.names:
                        self.imports[module][alias.asname or alias.name] = f"{node.module}:{alias.name}"
        self.models: dict[str, dict[str, Any]] = {}

    def resolve(self, module: str, name: str) -> str | None:
        if f"{module}:{name}" in self.classes:
            return f"{module}:{name}"
        target = self.imports.get(module, {}).get(name)
        if target in self.classes:
            return target
        if target:  # re-exported through a package __init__
            mod, _, cls = target.partition(":")
            return self.resolve(mod, cls) if mod != module else None
        found = self.by_name.get(name, [])
        return found[0] if len(found) == 1 else None

    def subclasses(self, key: str) -> list[str]:
        """Classes that name ``key`` as a direct base (in any module)."""
        out = []
        for other, (module, node) in self.classes.items():
            names = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", None) for b in node.bases]
            if any(n and self.resolve(module, n) == key for n in names):
                out.append(other)
        return out

    def is_config_class(self, key: str, seen: frozenset[str] = frozenset()) -> bool:
        module, node = self.classes[key]
        for base in node.bases:
            name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else None
            if name in CONFIG_BASES:
                return True
            target = self.resolve(module, name) if name else None
            if target and target not in seen and self.is_config_class(target, seen | {key}):
                return True
        return False

    def convert(self, module: str, ann: ast.expr) -> tuple[dict[str, Any], bool]:
        """(type, required) for an annotation; NotRequired makes required False."""
        if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
            return self.convert(module, ast.parse(ann.value, mode="eval").body)
        if isinstance(ann, ast.Constant) and ann.value is None:
            return {"t": "none"}, True
        if isinstance(ann, ast.BinOp) and isinstance(ann.op, ast.BitOr):
            left, _ = self.convert(module, ann.left)
            right, _ = self.convert(module, ann.right)
            return _union([left, right]), True
        if isinstance(ann, (ast.Name, ast.Attribute)):
            name = ann.id if isinstance(ann, ast.Name) else ann.attr
            if name in PRIMITIVES:
                return {"t": PRIMITIVES[name]}, True
            target = self.resolve(module, name)
            if target and self.is_config_class(target):
                self.add_model(target)
                variants = [{"t": "model", "name": target}]
                if target == GENERATION_BASE:  # each backend's subclass adds its own section (vllm_cfg, ...)
                    for sub in self.subclasses(target):
                        self.add_model(sub)
                        variants.append({"t": "model", "name": sub})
                return _union(variants), True
            return {"t": "any", "note": name}, True
        if isinstance(ann, ast.Subscript):
            head = ann.value.id if isinstance(ann.value, ast.Name) else getattr(ann.value, "attr", "")
            args = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
            if head in ("NotRequired", "Required"):
                inner, _ = self.convert(module, args[0])
                return inner, head == "Required"
            if head == "Annotated":
                return self.convert(module, args[0])
            if head == "Optional":
                return _union([self.convert(module, args[0])[0], {"t": "none"}]), True
            if head == "Union":
                return _union([self.convert(module, a)[0] for a in args]), True
            if head == "Literal":
                return {"t": "literal", "values": [a.value for a in args if isinstance(a, ast.Constant)]}, True
            if head in LIST_LIKE:
                return {"t": "list", "of": self.convert(module, args[0])[0]}, True
            if head in DICT_LIKE:
                return {"t": "dict", "value": self.convert(module, args[-1])[0]}, True
        return {"t": "any", "note": ast.unparse(ann)}, True

    def add_model(self, key: str) -> None:
        if key in self.models:
            return
        module, node = self.classes[key]
        entry: dict[str, Any] = {"origin": module.replace(".", "/") + ".py", "fields": {}}
        self.models[key] = entry  # before recursing: models may refer to themselves
        is_typeddict = False
        extra = "forbid"
        for base in node.bases:
            name = base.id if isinstance(base, ast.Name) else getattr(base, "attr", None)
            if name == "TypedDict":
                is_typeddict = True
            target = self.resolve(module, name) if name and name not in CONFIG_BASES else None
            if target and self.is_config_class(target):
                self.add_model(target)
                entry["fields"].update(self.models[target]["fields"])
                is_typeddict = is_typeddict or self.models[target]["kind"] == "TypedDict"
        total = next((kw.value.value for kw in node.keywords if kw.arg == "total" and isinstance(kw.value, ast.Constant)), True)
        for kw in node.keywords:
            if kw.arg == "extra" and isinstance(kw.value, ast.Constant):
                extra = "allow (NeMo-RL) - checked strictly here"
        entry["kind"] = "TypedDict" if is_typeddict else "BaseModel"
        entry["nemo_rl_extra"] = extra if not is_typeddict else "n/a"
        for stmt in node.body:
            if not isinstance(stmt, ast.AnnAssign) or not isinstance(stmt.target, ast.Name):
                continue
            if "ClassVar" in ast.unparse(stmt.annotation):
                continue
            type_, required = self.convert(module, stmt.annotation)
            if is_typeddict:
                required = required and bool(total)
            else:
                required = stmt.value is None
            entry["fields"][stmt.target.id] = {"type": type_, "required": required}


# YAML 1.1 (PyYAML) reads 1e-8 as a string; OmegaConf, which NeMo-RL uses, reads it as a float.
class _Loader(yaml.SafeLoader):
    pass


_Loader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(
    r"^[-+]?(?:[0-9][0-9_]*\.?[0-9_]*(?:[eE][-+]?[0-9]+)|\.[0-9_]+(?:[eE][-+][0-9]+)?)$"), list("-+0123456789."))


def _inferred(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"t": "bool"}
    if isinstance(value, (int, float)):
        return {"t": "float"}
    if isinstance(value, str) and "${" not in value:
        return {"t": "str"}
    if isinstance(value, list):
        return {"t": "list", "of": {"t": "any"}}
    if isinstance(value, dict):
        return {"t": "dict", "value": {"t": "any"}}
    return {"t": "any"}


def add_example_keys(collector: "Collector", root: str) -> int:
    """Keys NeMo-RL's code reads but its config classes do not declare (``moe_router_dtype`` is
    read by megatron/setup.py, absent from MegatronConfig). A key is added when an example YAML
    of the same commit sets it at a section AND its name occurs in nemo_rl/ source as a string
    or attribute; keys no code reads (``grpo.penalize_invalid_tool_call``) stay unknown."""
    names: set[str] = set()
    for path in (collector.repo / "nemo_rl").rglob("*.py"):
        text = path.read_text()
        names.update(re.findall(r"[\"']([A-Za-z_][A-Za-z0-9_]*)[\"']", text))
        names.update(re.findall(r"\.([A-Za-z_][A-Za-z0-9_]*)", text))
    added = 0

    def walk(data: Any, type_: dict[str, Any], example: str, depth: int = 0) -> None:
        nonlocal added
        if not isinstance(data, dict):
            return
        models = [o["name"] for o in (type_["of"] if type_["t"] == "union" else [type_]) if o["t"] == "model"]
        if not models:
            return
        for key, value in data.items():
            field = next((collector.models[m]["fields"][key] for m in models if key in collector.models[m]["fields"]), None)
            if field is None:
                if depth == 0 or str(key) not in names:  # the top-level sections are MasterConfig's
                    continue
                target = collector.models[models[0]]  # the first variant: the "enabled: true" one
                field = target["fields"][key] = {"type": _inferred(value), "required": False,
                                                 "from_example": example}
                added += 1
            elif field.get("from_example") and field["type"] != _inferred(value):
                field["type"] = _union([field["type"], _inferred(value)])
            walk(value, field["type"], example, depth + 1)

    grpo_examples = [*(collector.repo / "examples" / "configs").glob("grpo*.yaml"),
                     *(collector.repo / "examples" / "nemo_gym").rglob("*.yaml")]
    for path in sorted(grpo_examples):
        try:
            data = yaml.load(path.read_text(), Loader=_Loader)
        except yaml.YAMLError:
            continue
        if isinstance(data, dict):
            walk(data, {"t": "model", "name": root}, str(path.relative_to(collector.repo)))
    return added


def _union(options: list[dict[str, Any]]) -> dict[str, Any]:
    flat: list[dict[str, Any]] = []
    for opt in options:
        for o in (opt["of"] if opt["t"] == "union" else [opt]):
            if o not in flat:
                flat.append(o)
    return flat[0] if len(flat) == 1 else {"t": "union", "of": flat}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo", required=True, help="a checkout (work tree) of NVIDIA-NeMo/RL")
    parser.add_argument("--commit", help="commit id to record (default: git rev-parse HEAD in --repo)")
    parser.add_argument("--describe", default="", help="human note on the release, e.g. 'main after v0.7.0'")
    parser.add_argument("--output", default=str(OUTPUT))
    args = parser.parse_args()
    repo = Path(args.repo)
    commit = args.commit or subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                                           text=True, check=True).stdout.strip()
    collector = Collector(repo)
    root = collector.resolve(_module_name(repo / ROOT_FILE, repo), ROOT_CLASS)
    if root is None:
        raise SystemExit(f"{ROOT_CLASS} not found in {ROOT_FILE}")
    collector.add_model(root)
    effort = "nemo_rl.experience.rollouts:EffortLevelsConfig"
    if effort in collector.classes:
        collector.add_model(effort)
    else:  # an older/newer NeMo-RL without it: the key stays, typed as a plain mapping
        NEMO_GYM_SECTION["fields"]["effort_levels"]["type"] = {"t": "union", "of": [{"t": "dict", "value": {"t": "any"}},
                                                                                   {"t": "none"}]}
    from_examples = add_example_keys(collector, root)
    models = dict(sorted(collector.models.items()))
    models[root]["fields"]["env"] = {"type": {"t": "model", "name": "env:EnvSection"}, "required": True}
    models["env:EnvSection"] = ENV_SECTION
    models["env:NemoGymSection"] = NEMO_GYM_SECTION
    out = {"nemo_rl": {"repo": "NVIDIA-NeMo/RL", "commit": commit, "describe": args.describe},
           "root": root, "models": models}
    Path(args.output).write_text(json.dumps(out, indent=1, sort_keys=False) + "\n")
    n_keys = sum(len(m["fields"]) for m in models.values())
    print(f"{args.output}: {len(models)} sections, {n_keys} keys ({from_examples} read by code, set in examples, "
          f"undeclared in the config classes) from NVIDIA-NeMo/RL@{commit[:12]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
