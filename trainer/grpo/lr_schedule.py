"""``policy.scheduler``: NeMo-RL's learning-rate schedule list (DTensor policy), built with torch.

The format is NeMo-RL's: a list of ``{name: torch.optim.lr_scheduler.X, kwargs: {...}}`` entries
and, with more than one, a ``{milestones: [...]}`` entry (optimizer steps at which the next
scheduler takes over, ``SequentialLR``). Example, linear warm-up then linear decay to 10%::

    scheduler:
      - {name: torch.optim.lr_scheduler.LinearLR, kwargs: {start_factor: 0.1, end_factor: 1.0, total_iters: 10}}
      - {name: torch.optim.lr_scheduler.LinearLR, kwargs: {start_factor: 1.0, end_factor: 0.1, total_iters: 150}}
      - {milestones: [10]}

It steps once per optimizer step; its state is checkpointed with the trainer's.
"""

from __future__ import annotations

from typing import Any

import torch

SCHEDULERS = {name: getattr(torch.optim.lr_scheduler, name) for name in
              ("LinearLR", "ConstantLR", "CosineAnnealingLR", "ExponentialLR", "StepLR", "MultiStepLR", "PolynomialLR")}
PREFIX = "torch.optim.lr_scheduler."


def check_entries(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Validate the list (config time): names, kwargs, one milestone per scheduler after the first."""
    scheds = [e for e in entries if "milestones" not in e]
    marks = [e for e in entries if "milestones" in e]
    for e in scheds:
        if set(e) - {"name", "kwargs"} or "name" not in e:
            raise ValueError(f"policy.scheduler entry {e}: expected {{name, kwargs}} or {{milestones}}")
        short = str(e["name"]).removeprefix(PREFIX)
        if short not in SCHEDULERS:
            raise ValueError(f"policy.scheduler name {e['name']!r}: one of {', '.join(PREFIX + n for n in SCHEDULERS)}")
        if not isinstance(e.get("kwargs", {}), dict):
            raise ValueError(f"policy.scheduler {e['name']}: kwargs must be a mapping")
    if len(marks) > 1 or (len(scheds) > 1 and not marks):
        raise ValueError("policy.scheduler: with several schedulers, give exactly one {milestones: [...]} entry")
    if marks and len(marks[0]["milestones"]) != len(scheds) - 1:
        raise ValueError(f"policy.scheduler: {len(scheds)} schedulers need {len(scheds) - 1} milestone(s), "
                         f"got {marks[0]['milestones']}")
    return entries


def build_scheduler(optimizer: torch.optim.Optimizer, entries: list[dict[str, Any]] | None) -> Any:
    """The torch scheduler for ``entries`` (None when there are none)."""
    if not entries:
        return None
    scheds = [SCHEDULERS[str(e["name"]).removeprefix(PREFIX)](optimizer, **e.get("kwargs", {}))
              for e in entries if "milestones" not in e]
    if len(scheds) == 1:
        return scheds[0]
    milestones = next(e["milestones"] for e in entries if "milestones" in e)
    return torch.optim.lr_scheduler.SequentialLR(optimizer, scheds, milestones=list(milestones))
