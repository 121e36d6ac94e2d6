"""Check a NeMo-RL GRPO config against NeMo-RL's key schema recorded in ``schema.json``.

``schema.json`` is written by ``scripts/record_nemo_rl_schema.py`` from NeMo-RL's own config
classes (``MasterConfig`` and everything it references) at the commit it names. NeMo-RL itself
accepts unknown keys silently (pydantic ``extra="allow"`` and TypedDicts that nobody enforces), so
a misspelled key there is a key that does nothing. Here every key of an emitted config must be
one NeMo-RL declares, with a value of the declared type; an unknown key names the closest valid
key, or the section where that key does live.

Values may be OmegaConf interpolations (``${policy.precision}``, ``${mul:a,b}``): NeMo-RL resolves
them when it loads the file, so they are accepted for any type.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from trainer.recipe_names import renamed_key

SCHEMA_PATH = Path(__file__).with_name("schema.json")
GYM_SERVER_TYPES = ("responses_api_models", "resources_servers", "responses_api_agents")
GYM_DIRECTIVES = ("_copy", "_inherit_from", "_delete_key")


class SchemaError(ValueError):
    """One or more keys of a NeMo-RL config are unknown or of the wrong type."""

    def __init__(self, problems: list[str], source: str = "NeMo-RL config"):
        self.problems = problems
        super().__init__(f"{source}: {len(problems)} problem(s) against NeMo-RL's schema "
                         f"({schema_version()}):\n" + "\n".join(f"  {p}" for p in problems))


@dataclass(frozen=True)
class _Problem:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


@lru_cache(maxsize=1)
def load_schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text())


def schema_version() -> str:
    info = load_schema()["nemo_rl"]
    return f"{info['repo']}@{info['commit'][:12]}" + (f", {info['describe']}" if info.get("describe") else "")


@lru_cache(maxsize=1)
def _key_index() -> dict[str, list[str]]:
    """key name -> the section paths that declare it (for 'did you mean section.key')."""
    models = load_schema()["models"]
    index: dict[str, list[str]] = {}

    def walk(type_: dict[str, Any], path: str, depth: int) -> None:
        if depth > 6:
            return
        for model in _models_in(type_):
            for key, field in models[model]["fields"].items():
                full = f"{path}.{key}" if path else key
                index.setdefault(key, [])
                if full not in index[key]:
                    index[key].append(full)
                walk(field["type"], full, depth + 1)

    walk({"t": "model", "name": load_schema()["root"]}, "", 0)
    return index


def _models_in(type_: dict[str, Any]) -> list[str]:
    if type_["t"] == "model":
        return [type_["name"]]
    if type_["t"] == "union":
        return [m for o in type_["of"] for m in _models_in(o)]
    return []


def _describe(type_: dict[str, Any]) -> str:
    t = type_["t"]
    if t == "model":
        return "a mapping (section)"
    if t == "union":
        return " or ".join(dict.fromkeys(_describe(o) for o in type_["of"]))
    if t == "list":
        return f"a list of {_describe(type_['of'])}"
    if t == "dict":
        return "a mapping"
    if t == "literal":
        return "one of " + ", ".join(repr(v) for v in type_["values"])
    return {"none": "null", "int": "an integer", "float": "a number", "bool": "true/false", "str": "a string"}.get(t, t)


def _is_interpolation(value: Any) -> bool:
    return isinstance(value, str) and "${" in value


class _Checker:
    def __init__(self) -> None:
        self.models = load_schema()["models"]

    def value(self, value: Any, type_: dict[str, Any], path: str) -> list[_Problem]:
        t = type_["t"]
        if t == "any" or _is_interpolation(value):
            return []
        if t == "union":
            return self.union(value, type_["of"], path)
        if t == "model":
            return self.model(value, [type_["name"]], path)
        ok = {
            "none": lambda v: v is None,
            "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
            "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
            "bool": lambda v: isinstance(v, bool),
            "str": lambda v: isinstance(v, str),
            "literal": lambda v: v in type_["values"],
            "list": lambda v: isinstance(v, list),
            "dict": lambda v: isinstance(v, dict),
        }[t](value)
        if not ok:
            return [_Problem(path, f"expected {_describe(type_)}, got {value!r}")]
        if t == "list":
            return [p for i, item in enumerate(value) for p in self.value(item, type_["of"], f"{path}[{i}]")]
        if t == "dict":
            return [p for k, v in value.items() for p in self.value(v, type_["value"], f"{path}.{k}")]
        return []

    def union(self, value: Any, options: list[dict[str, Any]], path: str) -> list[_Problem]:
        models = [o["name"] for o in options if o["t"] == "model"]
        if isinstance(value, dict) and models:
            return self.model(value, models, path)
        best: list[_Problem] | None = None
        for option in options:
            if option["t"] == "model":
                continue
            problems = self.value(value, option, path)
            if not problems:
                return []
            best = problems if best is None or len(problems) < len(best) else best
        if models or best is None or all(o["t"] not in ("list", "dict") for o in options):
            return [_Problem(path, f"expected {_describe({'t': 'union', 'of': options})}, got {value!r}")]
        return best

    def model(self, value: Any, names: list[str], path: str) -> list[_Problem]:
        """A section; with several variants (``enabled: true`` / ``enabled: false`` TypedDicts, the
        generation backends) a key is known when any variant declares it."""
        if not isinstance(value, dict):
            return [_Problem(path, f"expected a mapping (section), got {value!r}")]
        fields: dict[str, dict[str, Any]] = {}
        for name in names:
            for key, field in self.models[name]["fields"].items():
                if key in fields and fields[key]["type"] != field["type"]:  # enabled: true | false
                    merged = [o for f in (fields[key], field)
                              for o in (f["type"]["of"] if f["type"]["t"] == "union" else [f["type"]])]
                    field = {**field, "type": {"t": "union", "of": merged}}
                fields[key] = field
        extra = {self.models[n].get("extra") for n in names}
        problems: list[_Problem] = []
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if key in fields:
                problems += self.value(item, fields[key]["type"], where)
            elif "gym_instances" in extra and _is_gym_instance(item):
                continue  # a NeMo-Gym server instance (or an override of one): Gym validates it
            else:
                renamed = renamed_key(where, "nemo-rl")  # a Nemotron recipe spelling (trainer/recipe_names.py)
                problems.append(_Problem(where, f"unknown key; {renamed}" if renamed
                                         else _unknown_hint(str(key), list(fields), path)))
        return problems


def _is_gym_instance(item: Any) -> bool:
    return isinstance(item, dict) and bool(item) and (
        any(k in GYM_SERVER_TYPES for k in item) or any(k in GYM_DIRECTIVES for k in item))


def _unknown_hint(key: str, valid: list[str], section: str) -> str:
    # a near spelling here, and the exact key where it does live (written in the wrong section)
    elsewhere = sorted(p for p in _key_index().get(key, []) if p.rsplit(".", 1)[0] != section)[:3]
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    if close:
        also = f" ({key!r} is a key of {', '.join(elsewhere)})" if elsewhere else ""
        return f"unknown key; did you mean {(section + '.' if section else '') + close[0]!r}?{also}"
    if elsewhere:
        return f"unknown key in {section or 'the top level'}; {key!r} is a key of {', '.join(elsewhere)}"
    shown = ", ".join(sorted(valid)[:40]) + (" ..." if len(valid) > 40 else "")
    return f"unknown key; valid keys{' of ' + section if section else ''}: {shown}"


def check_config(config: dict[str, Any], source: str = "NeMo-RL config") -> None:
    """Raise :class:`SchemaError` listing every unknown, misspelled or mistyped key."""
    root = load_schema()["root"]
    problems = _Checker().model(config, [root], "")
    missing = [s for s, f in load_schema()["models"][root]["fields"].items() if f["required"] and s not in config]
    problems += [_Problem(s, "missing section (NeMo-RL requires it)") for s in missing]
    if problems:
        raise SchemaError([str(p) for p in problems], source)


def is_nemo_rl_key(dotted: str) -> bool:
    """Whether ``a.b.c`` is a key path NeMo-RL declares (used to say why the built-in engine
    rejects a key: it is NeMo-RL's, but that engine cannot act on it)."""
    return dotted in _key_index().get(dotted.rsplit(".", 1)[-1], [])
