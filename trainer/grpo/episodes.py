"""The engine's rollouts: every sample is one run of :func:`trainer.agent_loop.run_episode`.

The generators and validation hand each row (repeated K times for a group) to
:func:`rollout_samples`. A row whose environment is stateful (``/info``: ``stateful`` — it serves
tools or keeps per-rollout state) runs seed_session -> model turn -> tool calls -> tool outputs ->
... -> verify, at most ``grpo.max_rollout_turns`` model turns, and comes back scored. Any other
row is the one-turn case of the same function, stopped right before its verify step
(``verify=False``): the reward actor runs that step (:func:`trainer.agent_loop.verify_rollout`,
the same function) while the generator decodes the next batch, or scores the whole group
through ``/compare``. Rows that offer tools to a stateless environment (tool_call, next_action:
one call scored against the expected one) are such one-turn episodes, their calls sent as
``function_call`` items.

Model turns of all live episodes decode together: :class:`LockstepGenerator` runs a batch when
every live episode is waiting for its turn, in episode order and chunks of ``max_batch``, so the
batches (and the sampled tokens) are the same on every run, and a batch of one-turn episodes is
exactly the old single batch (one RNG seeded by the first ticket). The in-flight weight hook runs
before every decode step. Tool outputs are in ``gen_ids`` with ``gen_mask`` 0 (no loss, version -1).
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from trainer.grpo.replay_buffer import Sample
from trainer.rollout.task import Task


class SessionRouter:
    """Which rows need a session, from each environment's ``/info`` (asked once per environment)."""

    def __init__(self, urls: dict[str, Any]):
        self.urls = urls
        self._stateful: dict[str, bool] = {}

    def stateful(self, env: str) -> bool:
        if env not in self._stateful:
            from trainer.fleet import fetch_info

            url = self.urls.get(env)
            if url is None:
                return False  # no server for it here: the reward worker reports the routing error
            try:
                info = fetch_info(url if isinstance(url, str) else url[0])
            except (OSError, ValueError):
                return False  # unreachable now: ask again next time; its rollouts fail with a class meanwhile
            self._stateful[env] = bool(info.get("stateful"))
        return self._stateful[env]


class LockstepGenerator:
    """Model turns of concurrent episodes decoded in deterministic batches (see the module docstring).

    ``decode(prompts, params)`` decodes one batch (blocking; run on a worker thread). Each episode
    takes its turns through ``for_episode(i)``; :meth:`finished` tells the batcher an episode
    will ask for no more turns."""

    def __init__(self, policy: Any, decode: Callable[[list[list[int]], list[Any]], list[Any]], live: int,
                 max_batch: int):
        self.policy, self.decode, self.live, self.max_batch = policy, decode, live, max(1, max_batch)
        self._pending: list[tuple[int, list[int], Any, asyncio.Future]] = []
        self._task: asyncio.Task | None = None

    def for_episode(self, index: int) -> "_EpisodeTurns":
        return _EpisodeTurns(self, index)

    async def generate(self, index: int, prompt_ids: list[int], params: Any) -> Any:
        future = asyncio.get_running_loop().create_future()
        self._pending.append((index, list(prompt_ids), params, future))
        self._kick()
        return await future

    def finished(self) -> None:
        self.live -= 1
        self._kick()

    def _kick(self) -> None:
        if self._task is None and self._pending and len(self._pending) >= self.live:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        batch, self._pending = sorted(self._pending, key=lambda p: p[0]), []
        try:
            for start in range(0, len(batch), self.max_batch):
                chunk = batch[start:start + self.max_batch]
                try:
                    results = await asyncio.to_thread(self.decode, [c[1] for c in chunk], [c[2] for c in chunk])
                except BaseException as exc:  # noqa: BLE001 - a decode error fails every waiting episode
                    for c in chunk:
                        c[3].set_exception(exc)
                    continue
                for c, res in zip(chunk, results):
                    c[3].set_result(res)
        finally:
            self._task = None
        await asyncio.sleep(0)  # let the episodes take their results before the next batch is formed
        self._kick()


class _EpisodeTurns:
    """The generator one episode sees: ``policy`` and ``generate`` (trainer.agent_loop.Generator)."""

    def __init__(self, batcher: LockstepGenerator, index: int):
        self.batcher, self.index, self.policy = batcher, index, batcher.policy

    async def generate(self, prompt_ids: list[int], params: Any) -> Any:
        return await self.batcher.generate(self.index, prompt_ids, params)


def episode_sample(episode: Any, env: str, max_total_sequence_length: int) -> Sample:
    """The replay-buffer sample of one episode; unverified episodes keep their ``response`` for
    the reward actor, a too-long prompt keeps its last tokens so a (masked) forward pass fits."""
    from servers.wire import FAILURE_CLASS_KEY
    from trainer.agent_loop import PROMPT_TOO_LONG

    failure = episode.reply.get(FAILURE_CLASS_KEY) if episode.verified else None
    prompt = list(episode.prompt_ids)
    if failure == PROMPT_TOO_LONG:
        prompt = prompt[-(max_total_sequence_length - 1):]
    mask = list(episode.completion_mask)
    return Sample(prompt_ids=prompt, gen_ids=list(episode.completion_ids),
                  gen_logprobs=list(episode.completion_logprobs), versions=list(episode.completion_versions),
                  truncated=episode.truncated, reward=episode.reward if episode.verified and not failure else 0.0,
                  failure=str(failure) if failure else None, env=env, text=episode.text,
                  gen_mask=mask if 0 in mask else None, scored=episode.verified,
                  response=None if episode.verified else episode.response, verify_retries=episode.verify_retries)


async def _rollouts(policy: Any, urls: dict[str, Any], jobs: list[tuple[Task, bool]], params: Any, *,
                    max_turns: int, context_limit: int, total_limit: int, rng: Any, hook: Any, timeout_s: float,
                    max_concurrency: int, retries: int, max_batch: int) -> list[Sample]:
    from servers.client import EnvClient
    from trainer.agent_loop import run_episode
    from trainer.generation import decode_batch

    batcher = LockstepGenerator(policy, lambda p, s: decode_batch(policy, p, s, rng=rng, on_step=hook), len(jobs),
                                max_batch)

    async def one(i: int, task: Task, stateful: bool, client: Any) -> Any:
        try:
            return await run_episode(batcher.for_episode(i), client, task, params, stateful=stateful,
                                     max_steps=max_turns, context_limit=context_limit,
                                     verify=False, verify_retries=retries)
        finally:
            batcher.finished()

    if any(stateful for _, stateful in jobs):
        async with EnvClient(urls, max_concurrency_per_server=max_concurrency, timeout_s=timeout_s, retries=1,
                             backoff_s=0.1, max_backoff_s=0.5) as client:
            episodes = await asyncio.gather(*(one(i, task, st, client) for i, (task, st) in enumerate(jobs)))
    else:  # one-turn episodes only: no server is called before the reward actor's verify step
        episodes = await asyncio.gather(*(one(i, task, False, None) for i, (task, _) in enumerate(jobs)))
    return [episode_sample(e, task.env, total_limit) for e, (task, _) in zip(episodes, jobs)]


def rollout_samples(policy: Any, urls: dict[str, Any], tasks: list[Task], router: SessionRouter | None,
                    cfg: Any, params: Any, rng: Any, *, hook: Any = None, step: int | None = None,
                    max_batch: int | None = None) -> list[Sample]:
    """One sample per task (repeat a task for K samples), from a synchronous caller. ``step`` (the
    step these rollouts train at) picks the context limit from
    ``policy.max_total_sequence_length_schedule``; ``rng`` drives sampling."""
    p = cfg.policy
    limit = p.max_total_sequence_length if step is None else p.max_sequence_length_at(step)
    jobs = [(task, bool(router and router.stateful(task.env))) for task in tasks]
    return asyncio.run(_rollouts(policy, urls, jobs, params, max_turns=cfg.grpo.max_rollout_turns, context_limit=limit,
                                 total_limit=p.max_total_sequence_length, rng=rng, hook=hook,
                                 timeout_s=cfg.env.verify_timeout_s, max_concurrency=cfg.env.max_concurrency_per_server,
                                 retries=cfg.env.failed_rollout_retries, max_batch=max_batch or len(tasks) or 1))
