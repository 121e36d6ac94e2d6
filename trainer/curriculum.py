"""Curriculum from the current policy's pass rates (the Nemotron RLVR recipe: prompts the model
always solves are filtered out, the rest ordered by difficulty).

The loop is three commands (blends/README.md, "Curriculum")::

    driver rollout --blend B --split train --model runs/B/checkpoints/latest --num-generations 8
        # -> runs/rollouts_B_train.jsonl and runs/rollouts_B_train_pass_rates.jsonl
    driver data prep --blend B --pass-rates runs/rollouts_B_train_pass_rates.jsonl --force
        # each train row gets its pass rate (curriculum.pass_rate_key); curriculum.max_pass_rate
        # drops the solved ones, curriculum.sort_by_difficulty orders the rest
    driver run --blend B data.shuffle=false   # keep the curriculum's order

Rows are matched by :func:`row_key`, a hash of the row without private (``_``-prefixed) fields
and without the pass-rate field. Data prep stamps the rows its train-only transforms rewrite
(low effort, reasoning control) with the key of the row they came from (:data:`SOURCE_KEY`), so a
pass rate measured on a prepared train row finds its source row in the next prep.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable

SOURCE_KEY = "_verigym_source_key"
TASK_INDEX_KEY = "_ng_task_index"


def row_key(row: dict[str, Any], pass_rate_key: str = "pass_rate") -> str:
    if isinstance(row.get(SOURCE_KEY), str):
        return row[SOURCE_KEY]
    body = {k: v for k, v in row.items() if not k.startswith("_") and k != pass_rate_key}
    return hashlib.sha256(json.dumps(body, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:32]


def pass_rates_path(rollouts: Path) -> Path:
    return rollouts.with_name(rollouts.stem + "_pass_rates.jsonl")


def pass_rates(rows: list[dict[str, Any]], records: Iterable[dict[str, Any]], threshold: float = 1.0,
               pass_rate_key: str = "pass_rate") -> list[dict[str, Any]]:
    """One entry per rolled-out prompt: ``{key, pass_rate, rollouts, env}``; ``records`` are the scored
    rollout rows (``_ng_task_index`` = the prompt's index in ``rows``); failed rollouts never count."""
    by_task: dict[int, list[float]] = defaultdict(list)
    env: dict[int, str] = {}
    for rec in records:
        task = rec.get(TASK_INDEX_KEY)
        if isinstance(task, int) and 0 <= task < len(rows) and isinstance(rec.get("reward"), (int, float)):
            by_task[task].append(float(rec["reward"]))
            env[task] = str(rec.get("_verigym_env", ""))
    return [{"key": row_key(rows[t], pass_rate_key), "pass_rate": sum(r >= threshold for r in rs) / len(rs),
             "rollouts": len(rs), "env": env[t]} for t, rs in sorted(by_task.items())]


def write_pass_rates(path: Path, entries: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    return path


def read_pass_rates(path: Path) -> dict[str, float]:
    """key -> pass rate; a malformed line is an error naming the file and line."""
    out: dict[str, float] = {}
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            out[str(entry["key"])] = float(entry["pass_rate"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}:{n}: not a pass-rate line ({{\"key\", \"pass_rate\"}} expected): {exc}") from None
    return out


def attach_pass_rates(rows: Iterable[dict[str, Any]], rates: dict[str, float], pass_rate_key: str) -> tuple[list[dict[str, Any]], int]:
    """Rows with ``pass_rate_key`` set from ``rates`` where their key matches; returns (rows, matched)."""
    out, matched = [], 0
    for row in rows:
        rate = rates.get(row_key(row, pass_rate_key))
        if rate is not None:
            row, matched = {**row, pass_rate_key: rate}, matched + 1
        out.append(row)
    return out, matched
