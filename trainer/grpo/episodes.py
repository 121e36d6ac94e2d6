"""Rollouts of session environments inside the engine, through the one rollout function.

A row needs a session when its environment is stateful (``/info``: ``stateful`` — it serves
tools or keeps per-rollout state). Rows that offer tools to a stateless environment (tool_call,
next_action: one call scored against the expected one) stay one-turn, their calls sent as
``function_call`` items. A session row's K samples are then K runs of
:func:`trainer.agent_loop.run_episode` — seed_session -> model turn -> tool calls -> tool
outputs -> ... -> verify, at most ``grpo.max_rollout_turns`` model turns — the same function
``driver rollout`` uses. Their decode steps are batched together on the generator's policy
(with its in-flight weight hook), tokens stay contiguous across turns, and each sample comes
back already scored: tool outputs are in ``gen_ids`` with ``gen_mask`` 0 (no loss), the
reward or failure class from ``/verify`` (or from the seed/tool call that failed) is set, and
``scored`` tells the reward worker not to verify again.
"""

from __future__ import annotations

import asyncio
from typing import Any

from trainer.grpo.replay_buffer import Sample


def row_env(row: dict[str, Any], route_map: dict[str, str] | None = None) -> str:
    """The environment a prepared row routes to (``driver run`` sets ``_verigym_env`` once)."""
    if row.get("_verigym_env"):
        return row["_verigym_env"]
    name = (row.get("agent_ref") or {}).get("name", "")
    return (route_map or {}).get(name, name)


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

    def needs_session(self, row: dict[str, Any]) -> bool:
        return self.stateful(row_env(row))


def episode_sample(episode: Any, env: str) -> Sample:
    from servers.wire import FAILURE_CLASS_KEY

    failure = episode.reply.get(FAILURE_CLASS_KEY)
    text = "".join(c.get("text", "") for it in (episode.reply.get("response") or {}).get("output", [])
                   if it.get("type") == "message" for c in it.get("content", []))
    return Sample(prompt_ids=list(episode.prompt_ids), gen_ids=list(episode.completion_ids),
                  gen_logprobs=list(episode.completion_logprobs), versions=list(episode.completion_versions),
                  truncated=episode.truncated, reward=0.0 if failure else episode.reward,
                  failure=str(failure) if failure else None, env=env, text=text,
                  gen_mask=list(episode.completion_mask), scored=True)


async def _run(policy: Any, urls: dict[str, Any], jobs: list[tuple[dict[str, Any], bool]], params: Any,
               max_turns: int, seed: int, hook: Any, timeout_s: float, max_concurrency: int) -> list[Sample]:
    from servers.client import EnvClient
    from trainer.agent_loop import run_episode
    from trainer.generation import BatchedGenerator

    async with EnvClient(urls, max_concurrency_per_server=max_concurrency, timeout_s=timeout_s, retries=1,
                         backoff_s=0.1, max_backoff_s=0.5) as client, \
            BatchedGenerator(policy, max_batch=max(len(jobs), 1), seed=seed, on_step=hook) as generator:
        episodes = await asyncio.gather(*(run_episode(generator, client, row_env(row), row, params, stateful=stateful,
                                                      max_steps=max_turns) for row, stateful in jobs))
    return [episode_sample(e, row_env(row)) for e, (row, _) in zip(episodes, jobs)]


def run_session_rollouts(policy: Any, urls: dict[str, Any], rows: list[dict[str, Any]], router: SessionRouter,
                         cfg: Any, params: Any, seed: int, hook: Any = None) -> list[Sample]:
    """One scored sample per row (repeat a row for K samples), from a synchronous caller."""
    jobs = [(row, router.stateful(row_env(row))) for row in rows]
    return asyncio.run(_run(policy, urls, jobs, params, cfg.grpo.max_rollout_turns, seed, hook,
                            cfg.env.verify_timeout_s, cfg.env.max_concurrency_per_server))
