"""Environment discovery and configuration.

An environment is a folder ``environments/<name>/`` with a ``verifier.py`` that defines
one :class:`servers.environment.Environment` subclass whose ``name`` equals the folder
name. Nothing else lists environments: adding the folder is enough. Extra folders of
environments can be added with ``VERIGYM_ENV_PATH`` (``os.pathsep``-separated), each laid
out like ``environments/``.

Importing a verifier is deferred until it is needed, so ``envs list`` stays fast and one
broken environment cannot take the others down.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import logging
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from servers.config_loader import ConfigError, deep_merge, did_you_mean, read_yaml_mapping
from servers.environment import EnvConfig, Environment

log = logging.getLogger("verigym.registry")


class UnknownEnvironment(KeyError):
    def __str__(self) -> str:  # KeyError quotes its message; we want it readable
        return str(self.args[0])


@dataclass(frozen=True)
class EnvEntry:
    name: str
    folder: Path
    module: str  # import path of the verifier module
    shadowed: tuple[Path, ...] = ()  # later folders with the same name, ignored (see discover)

    @property
    def example_path(self) -> Path:
        return self.folder / "data" / "example.jsonl"

    @property
    def config_path(self) -> Path:
        return self.folder / "config.yaml"

    def load_class(self) -> type[Environment]:
        module = importlib.import_module(self.module)
        found = [
            obj
            for obj in vars(module).values()
            if inspect.isclass(obj) and issubclass(obj, Environment) and obj.__module__ == module.__name__ and obj.name
        ]
        if len(found) != 1:
            raise ImportError(f"{self.module} must define exactly one Environment subclass with a name, found {len(found)}")
        cls = found[0]
        if cls.name != self.name:
            raise ImportError(f"{self.module}: class {cls.__name__}.name is {cls.name!r}, folder is {self.name!r}")
        return cls


def builtin_root() -> Path:
    """The folder of the built-in ``environments`` package (found, not imported)."""
    spec = importlib.util.find_spec("environments")
    if not spec or not spec.submodule_search_locations:
        raise ImportError("the environments package is not installed next to servers/")
    return Path(list(spec.submodule_search_locations)[0])


def _roots() -> list[tuple[Path, str | None]]:
    """(folder, package prefix) pairs to scan. Extra roots are imported by file path."""
    spec = importlib.util.find_spec("environments")
    roots: list[tuple[Path, str | None]] = []
    if spec and spec.submodule_search_locations:
        roots += [(Path(p), "environments") for p in spec.submodule_search_locations]
    for extra in filter(None, os.environ.get("VERIGYM_ENV_PATH", "").split(os.pathsep)):
        roots.append((Path(extra), None))
    return roots


def discover() -> dict[str, EnvEntry]:
    """Every environment by name. A name found again in a later root (``environments/``
    first, then ``VERIGYM_ENV_PATH`` in order) keeps the first folder; the later one is
    listed in the entry's ``shadowed`` and logged once as a warning, since serving a
    different folder than the one being edited is otherwise silent."""
    entries: dict[str, EnvEntry] = {}
    for root, package in _roots():
        if not root.is_dir():
            continue
        for folder in sorted(root.iterdir()):
            if not (folder / "verifier.py").is_file() or folder.name.startswith(("_", ".")):
                continue
            known = entries.get(folder.name)
            if known is not None:
                if folder.resolve() != known.folder.resolve():
                    _warn_shadowed(folder.name, known.folder, folder)
                    entries[folder.name] = replace(known, shadowed=(*known.shadowed, folder))
                continue
            module = f"{package}.{folder.name}.verifier" if package is not None else _import_external(folder)
            entries[folder.name] = EnvEntry(folder.name, folder, module)
    return entries


_warned_shadowed: set[tuple[Path, Path]] = set()


def _warn_shadowed(name: str, kept: Path, ignored: Path) -> None:
    if (kept, ignored) not in _warned_shadowed:  # discover() runs on every lookup: say it once
        _warned_shadowed.add((kept, ignored))
        log.warning("environment %r in %s is ignored: %s has the same name and comes first", name, ignored, kept)


def _import_external(folder: Path) -> str:
    """Make an environment folder outside the package importable under a private name."""
    module_name = f"verigym_external_{folder.name}"
    if module_name not in sys.modules:
        pkg_spec = importlib.util.spec_from_file_location(
            module_name, folder / "__init__.py" if (folder / "__init__.py").exists() else folder / "verifier.py",
            submodule_search_locations=[str(folder)],
        )
        assert pkg_spec and pkg_spec.loader
        pkg = importlib.util.module_from_spec(pkg_spec)
        sys.modules[module_name] = pkg
        if (folder / "__init__.py").exists():
            pkg_spec.loader.exec_module(pkg)
    return f"{module_name}.verifier"


def get(name: str) -> EnvEntry:
    entries = discover()
    if name not in entries:
        close = did_you_mean(name, entries, n=3, quote=False, capital=True)
        hint = f" {close}" if close else ""
        raise UnknownEnvironment(f"unknown environment {name!r}.{hint} Known: {', '.join(sorted(entries))}. "
                                 "See `envs list`.")
    return entries[name]


def load_config(entry: EnvEntry, env_cls: type[Environment], *, config_file: str | Path | None = None,
                overrides: dict[str, Any] | None = None) -> EnvConfig:
    """Defaults from the environment's ``config.yaml``, then ``config_file``, then overrides."""
    data: dict[str, Any] = {}
    for path in (entry.config_path, config_file):
        if path is None or not Path(path).exists():
            if path is not None and path != entry.config_path:
                raise ConfigError(f"config file {path} does not exist")
            continue
        loaded = read_yaml_mapping(path)
        # A shared fleet config may hold several environments: {math: {...}, code: {...}}.
        if entry.name in loaded and isinstance(loaded[entry.name], dict) and path != entry.config_path:
            loaded = loaded[entry.name]
        data = deep_merge(data, loaded)
    data = deep_merge(data, overrides or {})
    return validate_config(env_cls, data, source=entry.name)


def validate_config(env_cls: type[Environment], data: dict[str, Any], *, source: str) -> EnvConfig:
    valid = list(env_cls.Config.model_fields)
    for key in data:
        if key not in env_cls.Config.model_fields:
            close = did_you_mean(key, valid, capital=True)
            hint = f" {close}" if close else ""
            raise ConfigError(f"{source}: unknown config key {key!r}.{hint} Valid keys: {', '.join(valid)}")
    try:
        return env_cls.Config(**data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"{source}: invalid config: {problems}") from None


def instantiate(name: str, *, config_file: str | Path | None = None, overrides: dict[str, Any] | None = None,
                runtime: Any = None) -> Environment:
    """Build an environment in-process (``envs verify``, tests). Call ``await env.setup()`` next."""
    entry = get(name)
    cls = entry.load_class()
    config = load_config(entry, cls, config_file=config_file, overrides=overrides)
    from servers.environment import Runtime

    return cls(config, runtime or Runtime(folder=entry.folder))
