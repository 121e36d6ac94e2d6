"""Row -> task: the one record a rollout starts from, routed once.

A :class:`Task` is (``id``, ``env``, ``row``): the environment the row routes to and the row
exactly as that environment receives it. Data prep routes every row with :class:`Routes` (the
agent names the installed environments declare, the blend's ``agent_map`` on top, the blend's
``default_env`` for rows without ``agent_ref``) and writes the routes into ``manifest.json``;
``driver run``, ``driver rollout``, the engine's generators, its validation and its reward actor
read them back from there and use ``task.env``. :meth:`Routes.env_for` is the only place a row
is routed.

The trainer adds nothing to a row. Data prep's own annotations of a row (``_verigym_*`` keys,
e.g. the reasoning-control tag) are lifted into ``task.tags`` when the task is built, so what a
server receives is the row without them (NeMo-Gym's own ``_ng_*`` keys stay).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

PRIVATE_PREFIX = "_verigym_"  # data prep's annotations of a row: kept on the task, never sent to a server
MANIFEST = "manifest.json"


class TaskError(ValueError):
    """A row that cannot become a task (it routes to no environment)."""


def agent_name(row: Mapping[str, Any]) -> str | None:
    """The NeMo-Gym agent a row names (``agent_ref.name``), if any."""
    ref = row.get("agent_ref")
    name = ref.get("name") if isinstance(ref, dict) else None
    return name if isinstance(name, str) and name else None


@dataclass(frozen=True)
class Routes:
    """``agent_ref.name`` -> environment, and the environment of rows without ``agent_ref``.

    A row's ``agent_ref.name`` is looked up in ``agents``; a name no route declares is taken as the
    environment's own name. A row without ``agent_ref`` may name its environment in an ``env``
    field (files given with ``data.train_data_path``), else it goes to ``default_env``."""

    agents: Mapping[str, str] = field(default_factory=dict)
    default_env: str | None = None

    def env_for(self, row: Mapping[str, Any]) -> str | None:
        name = agent_name(row)
        if name:
            return self.agents.get(name, name)
        named = row.get("env")
        return named if isinstance(named, str) and named else self.default_env

    def to_manifest(self) -> dict[str, Any]:
        """The keys data prep writes into ``manifest.json`` (read back by :meth:`from_manifest`)."""
        return {"agent_map": dict(sorted(self.agents.items())), "default_env": self.default_env}

    @classmethod
    def from_manifest(cls, manifest: Mapping[str, Any], default_env: str | None = None) -> "Routes":
        """The routes data prep wrote; ``default_env``: the blend's, for a manifest written before
        data prep recorded its own."""
        return cls(dict(manifest.get("agent_map") or {}), manifest.get("default_env", default_env))


@dataclass(frozen=True)
class Task:
    id: str                     # the row's _ng_task_index, else its position in the split
    env: str                    # the environment it routes to
    row: dict[str, Any]         # what the environment receives (no _verigym_* keys)
    tags: dict[str, Any] = field(default_factory=dict)  # data prep's _verigym_* annotations of the row

    @property
    def create_params(self) -> dict[str, Any]:
        return self.row.get("responses_create_params") or {}


def make_task(row: Mapping[str, Any], index: int, routes: Routes) -> Task:
    env = routes.env_for(row)
    if not env:
        raise TaskError(f"row {index + 1} routes to no environment (no agent_ref.name, no env field, and no "
                        f"default_env): {json.dumps(row, default=str)[:200]}")
    public = {k: v for k, v in row.items() if not k.startswith(PRIVATE_PREFIX)}
    tags = {k: v for k, v in row.items() if k.startswith(PRIVATE_PREFIX)}
    return Task(id=str(row.get("_ng_task_index", index)), env=env, row=public, tags=tags)


def make_tasks(rows: Iterable[Mapping[str, Any]], routes: Routes) -> list[Task]:
    return [make_task(row, i, routes) for i, row in enumerate(rows)]


def routes_of(folder: Path, default_env: str | None = None) -> Routes | None:
    """The routes data prep wrote next to its splits (:meth:`Routes.from_manifest`), or None when
    ``folder`` has no manifest."""
    path = folder / MANIFEST
    if not path.is_file():
        return None
    return Routes.from_manifest(json.loads(path.read_text()), default_env)
