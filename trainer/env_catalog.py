"""What the installed environments publish — agent names and row schemas — read across a
process boundary, so the trainer never imports an environment.

``envs info --json`` gives each environment's ``describe()`` (the object its server returns
on ``/info``); routing comes from the ``agent_names`` there. Rows are validated by ``envs
validate``, which parses them with the environment's own ``Row`` model exactly as ``POST
/verify`` does: data prep accepts what the server accepts, no more, no less.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping


class CatalogError(RuntimeError):
    pass


def _envs(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "servers.cli", *args], capture_output=True, text=True,
                          check=False, env={**os.environ, "PYTHONWARNINGS": "ignore"})


@dataclass
class EnvCatalog:
    """``{env name: describe()}``; broken environments carry ``{"error": ...}``."""

    described: Mapping[str, Mapping[str, Any]]
    _routes: dict[str, str] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_info(cls, described: Mapping[str, Mapping[str, Any]]) -> "EnvCatalog":
        """From ``/info`` objects of a served fleet, or ``envs info --json`` output."""
        return cls(dict(described))

    @property
    def names(self) -> list[str]:
        return sorted(self.described)

    def routes(self) -> dict[str, str]:
        """NeMo-Gym agent name -> environment, from each environment's ``agent_names``; an
        environment's own name routes to itself. Two environments claiming one agent name is an
        error naming both (a row must route to exactly one place)."""
        if self._routes is not None:
            return self._routes
        out: dict[str, str] = {name: name for name in self.described}
        claimed: dict[str, str] = {}
        for env, info in sorted(self.described.items()):
            for agent in info.get("agent_names", ()):
                if agent in claimed and claimed[agent] != env:
                    raise CatalogError(f"agent name {agent!r} is claimed by environments {claimed[agent]!r} and "
                                       f"{env!r}: remove it from one of their agent_names")
                claimed[agent] = env
        out.update(claimed)
        self._routes = out
        return out

    def error_of(self, env: str) -> str | None:
        info = self.described.get(env)
        return None if info is None else info.get("error")

    def row_schema(self, env: str) -> dict[str, Any]:
        return dict(self.described[env].get("row_fields", {}))


_loaded: dict[str, EnvCatalog] = {}


def installed() -> EnvCatalog:
    """The catalog of this installation (``envs info --json`` in a child process), read once per
    process and per ``VERIGYM_ENV_PATH``."""
    key = os.environ.get("VERIGYM_ENV_PATH", "")
    if key not in _loaded:
        done = _envs("info", "--json")
        if done.returncode != 0:
            raise CatalogError(f"`envs info --json` failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
        try:
            _loaded[key] = EnvCatalog(json.loads(done.stdout))
        except ValueError as exc:
            raise CatalogError(f"`envs info --json` printed something that is not JSON ({exc}): "
                               f"{done.stdout[:300]!r}") from None
    return _loaded[key]


def validate_rows(routed: Iterable[tuple[str, dict[str, Any]]]) -> list[str | None]:
    """One entry per ``(env, row)``: None when the environment's server would accept the row,
    else the reason (field path and message) it would not."""
    items = list(routed)
    if not items:
        return []
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as fh:
        for env, row in items:
            fh.write(json.dumps({"env": env, "row": row}) + "\n")
        path = Path(fh.name)
    try:
        done = _envs("validate", "--data", str(path), "--json")
    finally:
        path.unlink(missing_ok=True)
    verdicts = []
    for line in done.stdout.splitlines():
        try:
            verdicts.append(json.loads(line))
        except ValueError:
            continue
    if len(verdicts) != len(items):
        raise CatalogError(f"`envs validate` answered {len(verdicts)} of {len(items)} rows (exit {done.returncode}):\n"
                           f"{done.stderr[-2000:]}")
    return [None if v["ok"] else _reason(env, v) for (env, _), v in zip(items, verdicts)]


def _reason(env: str, verdict: dict[str, Any]) -> str:
    detail = verdict.get("detail") or []
    if not detail:
        return f"{env}: {verdict.get('error')}"
    shown = "; ".join(f"{d.get('loc') or '(row)'}: {d.get('msg')}" for d in detail[:3])
    return f"does not match {env}'s row fields: {shown[:300]}"
