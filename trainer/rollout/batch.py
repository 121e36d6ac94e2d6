"""Tasks x K -> samples: a batch of episodes as the engine's generators and its validation run it.

Each task is rolled out K times, every sample one run of :func:`trainer.rollout.episode.run_episode`.
A task whose environment is stateful (``/info``: ``stateful`` — it serves tools or keeps
per-rollout state) runs seed_session -> model turn -> tool calls -> tool outputs -> ... -> verify,
at most ``grpo.max_rollout_turns`` model turns, and comes back scored. Any other task is the
one-turn case of the same function, stopped right before its verify step (``verify=False``): the
reward actor runs that step while the generator decodes the next batch, or scores the whole group
through ``/compare``. Rows that offer tools to a stateless environment (tool_call, next_action:
one call scored against the expected one) are such one-turn episodes, their calls sent as
``function_call`` items.

The model turns of all live episodes decode together (``Generator.episodes``: the same batches and
tokens on every run for one seed). Tool outputs are in ``gen_ids`` with ``gen_mask`` 0 (no loss,
version -1).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Sequence

from trainer.config import MasterConfig
from trainer.rollout.episode import run_episode, to_sample
from trainer.rollout.generator import Generator, SamplingParams
from trainer.rollout.sample import Sample
from trainer.rollout.scoring import EnvCalls, EnvInfo, RetryPolicy
from trainer.rollout.task import Task


@dataclass(frozen=True)
class BatchSettings:
    max_turns: int         # grpo.max_rollout_turns
    context_limit: int     # prompt + everything generated, at the step these rollouts train at
    total_limit: int       # policy.max_total_sequence_length: a too-long prompt is cut to fit a masked pass
    retry: RetryPolicy     # env.failed_rollout_retries
    timeout_s: float       # env.verify_timeout_s
    max_concurrency: int   # env.max_concurrency_per_server

    @classmethod
    def from_config(cls, cfg: MasterConfig, step: int | None = None) -> "BatchSettings":
        """``step`` (the step these rollouts train at) picks the context limit from
        ``policy.max_total_sequence_length_schedule``."""
        p = cfg.policy
        limit = p.max_total_sequence_length if step is None else p.max_sequence_length_at(step)
        return cls(max_turns=cfg.grpo.max_rollout_turns, context_limit=limit, total_limit=p.max_total_sequence_length,
                   retry=RetryPolicy(cfg.env.failed_rollout_retries), timeout_s=cfg.env.verify_timeout_s,
                   max_concurrency=cfg.env.max_concurrency_per_server)


def run_batch(generator: Generator, envs: EnvInfo, tasks: Sequence[Task], k: int, params: SamplingParams,
              settings: BatchSettings, *, seed: int, max_batch: int | None = None) -> list[list[Sample]]:
    """K samples of each task, in task order (the task's group), from a synchronous caller; ``seed``
    drives sampling, ``max_batch`` bounds the sequences decoded at once (default: all of them)."""
    jobs = [(task, envs.stateful(task.env)) for task in tasks for _ in range(k)]
    samples = asyncio.run(_episodes(generator, envs.urls, jobs, params, settings, seed, max_batch or len(jobs) or 1))
    return [samples[i * k:(i + 1) * k] for i in range(len(tasks))]


async def _episodes(generator: Generator, urls: dict, jobs: list[tuple[Task, bool]], params: SamplingParams,
                    settings: BatchSettings, seed: int, max_batch: int) -> list[Sample]:
    turns = generator.episodes(len(jobs), seed, max_batch)

    async def one(i: int, task: Task, stateful: bool, env: EnvCalls | None) -> Sample:
        try:
            episode = await run_episode(turns.for_episode(i), env, task, params, stateful=stateful,
                                        max_steps=settings.max_turns, context_limit=settings.context_limit, verify=False)
        finally:
            turns.finished()
        return to_sample(episode, task.env, settings.total_limit)

    if any(stateful for _, stateful in jobs):
        async with EnvCalls(urls, retry=settings.retry, timeout_s=settings.timeout_s,
                            max_concurrency_per_server=settings.max_concurrency) as env:
            return list(await asyncio.gather(*(one(i, task, st, env) for i, (task, st) in enumerate(jobs))))
    # one-turn episodes only: no server is called before the reward actor's verify step
    return list(await asyncio.gather(*(one(i, task, False, None) for i, (task, _) in enumerate(jobs))))
