"""The weight version, one number: how many GRPO steps the weights have been trained for.

Three places keep a copy because three actors act on it: the trainer's policy (``version`` after
each train step), each generator's policy (the version its tokens are stamped with) and the replay
buffer (batches handed out for training, ``len(consumed) / num_prompts_per_step``). The driver's
step counter is the source of truth; after every step :func:`check_versions` compares the copies
with it and stops the run with :class:`WeightVersionMismatch` when they disagree (a generator
ahead of the trainer, a buffer that handed out a batch twice, a trainer that skipped an update),
so a mismatch can never go unnoticed. The buffer also refuses, at the moment it happens, a
``take`` for a step it is not at (a batch handed out twice, or one skipped).
"""

from __future__ import annotations


class WeightVersionMismatch(RuntimeError):
    """Two components disagree on the weight version: a bug in the engine, never a data problem."""


def check_versions(expected: int, *, trainer: int, buffer_trained: int, generators: list[int]) -> dict[str, float]:
    """Compare every copy of the weight version with ``expected`` (steps trained). Generators may
    lag (they apply new weights between decode steps) but never lead. Returns the metrics."""
    problems = []
    if trainer != expected:
        problems.append(f"the trainer's weights are at version {trainer}")
    if buffer_trained != expected:
        problems.append(f"the replay buffer handed out {buffer_trained} batches")
    ahead = [(i, v) for i, v in enumerate(generators) if v > expected]
    if ahead:
        problems.append("generator(s) " + ", ".join(f"{i} at version {v}" for i, v in ahead))
    if problems:
        raise WeightVersionMismatch(f"after {expected} trained steps " + "; ".join(problems))
    lowest = min(generators, default=expected)
    return {"weights/version": float(expected), "weights/generator_version_min": float(lowest),
            "weights/generator_lag_max": float(expected - lowest)}
