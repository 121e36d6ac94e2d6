"""Reasoning control in the training data (the Nemotron 3 recipe): reasoning on/off and token budgets.

A blend's ``reasoning_control`` picks train rows with a seeded RNG and rewrites them:

* **reasoning off** (``off_fraction``, the recipe's 10%): every reasoning trace in the row's
  conversation history is stripped (Responses-API ``reasoning`` items, ``<think>...</think>`` spans
  and ``reasoning_content`` of assistant turns) and ``off_string`` is appended to the system turn
  (one is added when the row has none), so the policy learns to answer without thinking when told.
* **reasoning budget** (``budget_fraction``, the recipe's 3%): of the rows that still carry a
  reasoning trace, each trace is cut to a budget drawn from ``budgets`` (counted in
  whitespace-separated words: data prep has no tokenizer) and the cut trace is closed, as a run
  that hit its thinking budget would be.

Each rewritten row is tagged ``_verigym_reasoning: {"mode": "off"}`` or ``{"mode": "budget",
"budget_words": N}`` (environments keep unknown row fields and ignore them), so the manifest
counts them and the trainer's step metrics report their share (``train/prompts/reasoning_*_frac``,
trainer/grpo/effort.py). Rows of environments outside ``envs`` are never touched.
"""

from __future__ import annotations

import random
import re
from typing import Any, Callable, Iterable

from pydantic import BaseModel, ConfigDict, Field, model_validator

REASONING_KEY = "_verigym_reasoning"
THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL)


class ReasoningControl(BaseModel):
    model_config = ConfigDict(extra="forbid")

    off_fraction: float = Field(0.0, ge=0.0, le=1.0, description="Share of rows with reasoning stripped (recipe: 0.10)")
    off_string: str = Field("/no_think", description="Appended to the system turn of a reasoning-off row")
    budget_fraction: float = Field(0.0, ge=0.0, le=1.0,
                                   description="Share of rows (with a reasoning trace) cut to a budget (recipe: 0.03)")
    budgets: list[int] = Field(default_factory=lambda: [128, 512, 1024, 2048],
                               description="Budgets in words; each cut row draws one")
    envs: list[str] | None = Field(None, description="Only rows of these environments (null = every environment)")
    seed: int = 0

    @model_validator(mode="after")
    def _check(self) -> "ReasoningControl":
        if self.off_fraction + self.budget_fraction > 1.0:
            raise ValueError("reasoning_control.off_fraction + budget_fraction must be <= 1")
        if not self.budgets or min(self.budgets) < 1:
            raise ValueError("reasoning_control.budgets must be a non-empty list of positive word counts")
        return self


# ---- one row -----------------------------------------------------------------------------------
def _items(row: dict[str, Any]) -> list[Any] | None:
    items = (row.get("responses_create_params") or {}).get("input")
    return items if isinstance(items, list) else None


def has_reasoning(row: dict[str, Any]) -> bool:
    for item in _items(row) or []:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "reasoning" or item.get("reasoning_content"):
            return True
        if item.get("role") == "assistant" and isinstance(item.get("content"), str) and THINK.search(item["content"]):
            return True
    return False


def _cut_words(text: str, budget: int) -> str:
    words = text.split()
    return text if len(words) <= budget else " ".join(words[:budget])


def _rewrite_traces(items: list[Any], edit: Callable[[str], str | None]) -> list[Any]:
    """Apply ``edit`` to every reasoning trace; ``None`` removes it."""
    out: list[Any] = []
    for item in items:
        if not isinstance(item, dict):
            out.append(item)
            continue
        if item.get("type") == "reasoning":
            summary = [dict(p, text=edit(p.get("text", ""))) for p in item.get("summary") or [] if isinstance(p, dict)]
            summary = [p for p in summary if p["text"] is not None]
            if summary:
                out.append({**item, "summary": summary})
            continue
        item = dict(item)
        if item.get("reasoning_content"):
            cut = edit(item["reasoning_content"])
            if cut is None:
                item.pop("reasoning_content")
            else:
                item["reasoning_content"] = cut
        if item.get("role") == "assistant" and isinstance(item.get("content"), str) and THINK.search(item["content"]):
            def sub(m: re.Match[str]) -> str:
                cut = edit(m.group(1))
                return "" if cut is None else f"<think>{cut}</think>"

            item["content"] = THINK.sub(sub, item["content"]).lstrip("\n")
        out.append(item)
    return out


def reasoning_off(row: dict[str, Any], off_string: str) -> dict[str, Any]:
    """The row with every reasoning trace stripped and ``off_string`` on its system turn."""
    params = dict(row.get("responses_create_params") or {})
    items = params.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    items = _rewrite_traces(list(items or []), lambda _text: None)
    system = next((i for i, m in enumerate(items) if isinstance(m, dict) and m.get("role") in ("system", "developer")
                   and isinstance(m.get("content"), str)), None)
    if system is None:
        items.insert(0, {"role": "system", "content": off_string})
    else:
        items[system] = {**items[system], "content": f"{items[system]['content']} {off_string}".strip()}
    params["input"] = items
    return {**row, "responses_create_params": params, REASONING_KEY: {"mode": "off"}}


def reasoning_budget(row: dict[str, Any], budget: int) -> dict[str, Any]:
    """The row with every reasoning trace cut to its first ``budget`` words."""
    params = dict(row.get("responses_create_params") or {})
    params["input"] = _rewrite_traces(list(params.get("input") or []), lambda text: _cut_words(text, budget))
    return {**row, "responses_create_params": params, REASONING_KEY: {"mode": "budget", "budget_words": budget}}


# ---- a split -----------------------------------------------------------------------------------
def apply_reasoning_control(rows: Iterable[Any], cfg: ReasoningControl, env_of: Callable[[dict[str, Any]], str | None],
                            get: Callable[[Any], dict[str, Any]] = lambda r: r,
                            put: Callable[[Any, dict[str, Any]], None] | None = None) -> dict[str, int]:
    """Rewrite rows in place (``get``/``put`` reach the row inside a wrapper); returns the counts
    ``{"reasoning_off": n, "reasoning_budget": m}``. One draw per eligible row decides off / budget
    / untouched, so the result depends only on the rows and the seed."""
    counts = {"reasoning_off": 0, "reasoning_budget": 0}
    if cfg.off_fraction <= 0 and cfg.budget_fraction <= 0:
        return counts
    rng = random.Random(cfg.seed)
    for wrapped in rows:
        row = get(wrapped)
        if cfg.envs is not None and env_of(row) not in cfg.envs:
            continue
        draw, budget = rng.random(), rng.choice(cfg.budgets)
        if draw < cfg.off_fraction:
            new, key = reasoning_off(row, cfg.off_string), "reasoning_off"
        elif draw < cfg.off_fraction + cfg.budget_fraction and has_reasoning(row):
            new, key = reasoning_budget(row, budget), "reasoning_budget"
        else:
            continue
        if put is None:
            row.clear()
            row.update(new)
        else:
            put(wrapped, new)
        counts[key] += 1
    return counts
