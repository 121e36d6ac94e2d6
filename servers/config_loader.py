"""The one config loader of ``envs`` and ``driver``: YAML files, ``key.sub=value`` overrides and the
closest-key hint of an error.

A value on the command line reads as the same text would in a YAML file, with two additions, so
that ``envs serve math x=...`` and ``driver run x=...`` take a value alike:

* ``none`` (any case), ``null`` and ``~`` are null (Python ``None``): ``x=none`` clears an optional
  key, and a key that takes no null refuses it by name. An empty value (``x=``) is null too, as
  ``x:`` is in YAML; a text key that should be empty is written ``x=''``.
* ``1e-6`` is a float (YAML 1.1 reads it as text; OmegaConf and NeMo-RL as a number).

Everything else is YAML's reading: ``true``/``false``, numbers, ``[a, b]``, ``{k: v}``, else text.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any, Iterable

import yaml


class ConfigError(ValueError):
    """A config that cannot be read or validated; its message is one line saying what to change."""


_NULL = ("none", "null", "~", "")
_FLOAT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$")


def parse_value(text: str) -> Any:
    """One override's value (the text after ``=``); see the module's docstring."""
    if text.strip().lower() in _NULL:
        return None
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"value {text!r} is not valid YAML ({getattr(exc, 'problem', None) or 'unreadable'}); "
                          "quote text: key='...'") from None
    if isinstance(value, str) and _FLOAT.match(value):
        return float(value)
    return value


def apply_overrides(data: dict[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """``data`` with ``a.b.c=value`` overrides applied (a copy; ``data`` is left as it was). A key
    whose parent is not a mapping makes it one."""
    data = deep_merge({}, data)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not key=value (e.g. a.b=1)")
        dotted, raw = item.split("=", 1)
        parts = dotted.strip().split(".")
        node = data
        for part in parts[:-1]:
            nxt = node.get(part)
            if not isinstance(nxt, dict):
                nxt = node[part] = {}
            node = nxt
        try:
            node[parts[-1]] = parse_value(raw)
        except ConfigError as exc:
            raise ConfigError(f"override {item!r}: {exc}") from None
    return data


def parse_overrides(pairs: Iterable[str]) -> dict[str, Any]:
    """``["a=1", "b.c=x"]`` -> ``{"a": 1, "b": {"c": "x"}}``."""
    return apply_overrides({}, pairs)


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` on top of ``base``, mappings merged key by key (nested mappings are copied)."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict):
            value = deep_merge(out[key] if isinstance(out.get(key), dict) else {}, value)
        out[key] = value
    return out


def read_yaml_mapping(path: str | Path) -> dict[str, Any]:
    """A YAML file holding a mapping (an empty file: ``{}``)."""
    path = Path(path)
    try:
        loaded = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise ConfigError(f"{path}: not valid YAML{where}: {getattr(exc, 'problem', None) or exc}; "
                          "fix the file") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ConfigError(f"{path}: expected a mapping of config keys (key: value lines), got a "
                          f"{type(loaded).__name__}")
    return loaded


def load_yaml_with_defaults(path: str | Path) -> dict[str, Any]:
    """A YAML config whose ``defaults: other.yaml`` (NeMo-RL / Nemotron style, relative to the file)
    is read first and merged underneath."""
    path = Path(path)
    data = read_yaml_mapping(path)
    parent = data.pop("defaults", None)
    if parent:
        base = load_yaml_with_defaults(Path(parent) if Path(parent).is_absolute() else path.parent / parent)
        data = deep_merge(base, data)
    return data


def did_you_mean(word: str, choices: Iterable[str], *, n: int = 1, cutoff: float = 0.6, prefix: str = "",
                 quote: bool = True, capital: bool = False) -> str:
    """``"did you mean 'x'?"`` for the closest choices (``prefix`` put before each, e.g. the section
    of a dotted key), or ``""`` when none is close: the one wording of the hint in every error.
    Closest: ``difflib``'s similarity ratio, at least ``cutoff``, best first."""
    found = difflib.get_close_matches(str(word), list(choices), n=n, cutoff=cutoff)
    if not found:
        return ""
    names = ", ".join(repr(prefix + c) if quote else prefix + c for c in found)
    return f"{'D' if capital else 'd'}id you mean {names}?"
