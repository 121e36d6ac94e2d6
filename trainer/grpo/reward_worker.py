"""The engine's reward actor: scores the generators' groups and the trainer's validation samples.

It holds the train and validation tasks (put into Ray's object store once by the driver); a group
names its task by index, so no row travels with a batch. Scoring itself is
trainer.rollout.scoring's: session rollouts come back verified from their episode, one-turn
episodes stop right before verify and this actor runs that step (one retry policy) concurrently
with the next decode batch, and an environment that serves ``POST /compare`` (genrm) gets the
whole group in one call (or, with ``env.group_scoring=verify``, every sample through a cohort
``/verify``). Samples still failing keep their failure class and are masked in the loss. Then
low-effort length shaping, and the groups go to the replay buffer.
"""

from __future__ import annotations

import time
import traceback
from typing import Any

from trainer.config import MasterConfig
from trainer.grpo.effort import apply_effort_shaping
from trainer.rollout.sample import Group, Sample
from trainer.rollout.scoring import EnvCalls, EnvInfo, RetryPolicy, Scorer
from trainer.rollout.task import Task


class RewardWorker:
    """Async actor: many groups are scored concurrently while generators keep decoding."""

    def __init__(self, cfg: MasterConfig, urls: dict[str, Any], buffer: Any, train: list[Task],
                 val: list[Task] | None = None):
        e = cfg.env
        self.cfg, self.buffer, self.train, self.val = cfg, buffer, train, val or []
        self.env = EnvCalls(urls, retry=RetryPolicy(e.failed_rollout_retries), timeout_s=e.verify_timeout_s,
                            max_concurrency_per_server=e.max_concurrency_per_server)
        self.scorer = Scorer(self.env, EnvInfo(urls), model=cfg.policy.model_name, group_scoring=e.group_scoring)
        self.stats = {"reward_seconds": 0.0, "scored": 0}
        self.error: str | None = None  # the traceback of an exception in our own scoring code

    async def score_groups(self, groups: list[Group]) -> int:
        """Score and hand to the buffer. Called fire-and-forget by the generators, so an exception
        here (a bug of ours, not an environment's failure: those are failure classes) is kept with
        its traceback for the driver, which stops the run with it (engine._check_health)."""
        try:
            return await self._score_groups(groups)
        except Exception:
            self.error = self.error or traceback.format_exc()
            raise

    async def _score_groups(self, groups: list[Group]) -> int:
        import asyncio

        t0 = time.perf_counter()
        tasks = [self.train[g.ticket.prompt_index] for g in groups]
        await asyncio.gather(*(self.scorer.score_group(task, g.samples, g.ticket.slot) for g, task in zip(groups, tasks)))
        for g, task in zip(groups, tasks):  # after the env reward: low-effort length shaping, prompt-kind tags
            apply_effort_shaping(g.samples, task, self.cfg.env.effort_levels)
        self.stats["reward_seconds"] += time.perf_counter() - t0
        self.stats["scored"] += sum(len(g.samples) for g in groups)
        await self.buffer.put.remote(groups)
        return len(groups)

    async def score_validation(self, groups: list[Group]) -> dict[str, float]:
        """The validation metrics of the trainer's validation groups (one per validation task, in
        order): each sample through ``/verify``, or a group through ``/compare`` for an environment
        that scores groups. Validation rewards are what the verifier said (no effort shaping)."""
        import asyncio

        await asyncio.gather(*(self.scorer.score_group(self.val[g.ticket.prompt_index], g.samples, g.ticket.slot,
                                                       cohorts=False) for g in groups))
        return validation_metrics([s for g in groups for s in g.samples])

    def get_stats(self) -> dict[str, Any]:
        return {**self.stats, **self.scorer.stats, "error": self.error}


def validation_metrics(samples: list[Sample]) -> dict[str, float]:
    """Mean reward over the scored samples, overall and per environment, and the failed share."""
    ok = [s for s in samples if s.failure is None]
    out = {"validation/reward": sum(s.reward for s in ok) / max(len(ok), 1),
           "validation/failed_frac": 1 - len(ok) / max(len(samples), 1)}
    for env in sorted({s.env for s in ok}):
        rewards = [s.reward for s in ok if s.env == env]
        out[f"validation/reward/{env}"] = sum(rewards) / len(rewards)
    return out
