"""``envs bench``: the load generator against a URL, or against a server it starts itself.

The server runs in its own process (never in the load generator's), so the numbers are a
real server's: its event loop, its CPU pool, its HTTP stack.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tqdm import tqdm

from servers.cli_serve import spawn_servers, stop_servers
from servers.loadgen import encode_bodies, run_load


def bench_rows(entry: Any, data: Path | None) -> list[dict[str, Any]]:
    """Rows from ``data``, or the environment's examples that should be scored (status 200)."""
    path = data or entry.example_path
    rows = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(row, dict) or "response" not in row:
            continue
        expected = row.get("_expected", {})
        if expected.get("status", 200) != 200 or "failure_class" in expected:
            continue  # rejected or deliberately slow rows would measure the wrong thing
        rows.append(row)
    if not rows:
        raise ValueError(f"{path}: no rows with a 'response' that are expected to be scored")
    return rows


async def run_bench(name: str, rows: list[dict[str, Any]], *, url: str | None = None, concurrency: int = 64,
                    requests: int = 5000, overrides: list[str] | None = None, show_progress: bool = True,
                    warmup: int | None = None) -> dict[str, Any]:
    bodies = encode_bodies(rows)
    children = []
    if url is None:
        children = await spawn_servers([name], overrides=overrides or [])
        url = children[0].url
    assert url is not None
    try:
        with tqdm(total=requests, desc=f"bench {name}", unit="req", disable=not show_progress) as bar:
            result = await run_load(url, bodies, concurrency=concurrency, requests=requests,
                                    warmup=min(requests, 2 * concurrency) if warmup is None else warmup,
                                    progress=bar if show_progress else None)
    finally:
        if children:
            await stop_servers(children)
    return {"env": name, "rows": len(bodies), **result.summary()}
