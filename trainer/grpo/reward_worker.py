"""The engine's reward actor: the verify step of one-turn episodes, group scoring, the collector hand-off.

The generators hand it finished groups. Session rollouts come back verified (their verify ran on
the session, inside the episode); one-turn episodes stop right before it, and this actor runs that
step — :func:`trainer.agent_loop.verify_rollout`, the same verify / retry / failure function the
episodes use — concurrently with the next decode batch. Samples still failing keep their failure
class and are masked in the loss. An environment that serves ``POST /compare`` (genrm: rewards
relative to the group) gets the whole group in one call, or with ``env.group_scoring=verify`` every
sample through ``/verify`` tagged with its group (task index, rollout index, group size) for the
server's cohort buffer. Then low-effort length shaping, and the groups go to the replay buffer.
"""

from __future__ import annotations

import asyncio
import time
import traceback
from typing import Any

from trainer.agent_loop import PROMPT_TOO_LONG
from trainer.config import MasterConfig
from trainer.grpo.decode import to_response
from trainer.grpo.effort import apply_effort_shaping
from trainer.grpo.replay_buffer import Group, Sample
from trainer.rollout.task import Task


class RewardWorker:
    """Async actor: many groups are scored concurrently while generators keep decoding."""

    def __init__(self, cfg_data: dict[str, Any], urls: dict[str, Any], buffer: Any, tasks: list[Task]):
        from servers.client import EnvClient

        self.cfg = MasterConfig.model_validate(cfg_data)
        self.buffer, self.tasks = buffer, tasks  # the train tasks: a group names its own by index
        e = self.cfg.env
        self.client = EnvClient(urls, max_concurrency_per_server=e.max_concurrency_per_server, timeout_s=e.verify_timeout_s,
                                retries=1, backoff_s=0.1, max_backoff_s=0.5)
        self.stats = {"reward_seconds": 0.0, "scored": 0, "failed": 0, "retried": 0, "failures_by_class": {}}
        self.error: str | None = None  # the traceback of an exception in our own scoring code
        self._policy_name = self.cfg.policy.model_name
        self._group_envs: dict[str, bool] = {}  # env -> serves POST /compare (from its /info)

    def _response(self, s: Sample, row: dict[str, Any]) -> dict[str, Any]:
        """The episode's response; a sample built from text alone (a test, a rollouts file) gets one."""
        return s.response if s.response is not None else to_response(_NameOnly(self._policy_name), s, row)

    async def _score(self, task: Task, s: Sample, row: dict[str, Any] | None = None) -> None:
        from servers.wire import FAILURE_CLASS_KEY
        from trainer.agent_loop import verify_rollout

        env, row = task.env, task.row if row is None else row
        s.env = env
        if s.failure == PROMPT_TOO_LONG or s.scored:  # never generated, or a session rollout verified already
            self.stats["retried"] += s.verify_retries
            if s.failure:
                self._count_failure(s.failure)
            return
        reply, retried = await verify_rollout(self.client, env, row, self._response(s, row),
                                              retries=self.cfg.env.failed_rollout_retries)
        self.stats["retried"] += retried
        failure = reply.get(FAILURE_CLASS_KEY)
        s.reward, s.failure, s.response, s.scored = (float(reply.get("reward", 0.0)) if failure is None else 0.0,
                                                     None if failure is None else str(failure), None, True)
        if s.failure is not None:
            self._count_failure(s.failure)

    async def _scores_groups(self, env: str) -> bool:
        """Whether ``env``'s server scores whole groups (it publishes a ``compare`` endpoint on /info)."""
        if env not in self._group_envs:
            try:
                status, info = await self.client.get(env, "/info")
            except Exception:  # noqa: BLE001 - unreachable now: ask again next time, score per sample meanwhile
                return False
            self._group_envs[env] = status == 200 and "compare" in (info.get("endpoints") or {})
        return self._group_envs[env]

    async def _compare(self, task: Task, samples: list[Sample]) -> None:
        """One ``POST /compare`` for the group; per-response failure classes come back masked."""
        from servers.client import EnvClientError

        env, row = task.env, task.row
        for s in samples:
            s.env = env
        todo = [s for s in samples if s.failure != PROMPT_TOO_LONG]
        for s in samples:
            if s.failure == PROMPT_TOO_LONG:
                self._count_failure(s.failure)
        if len(todo) < 2:  # nothing to compare a lone response with
            for s in todo:
                s.reward, s.failure = 0.0, "group_too_small"
                self._count_failure(s.failure)
            return
        params = row.get("responses_create_params", {})
        history = params.get("input", [])
        history = [{"role": "user", "content": history}] if isinstance(history, str) else list(history)
        if params.get("instructions"):
            history.insert(0, {"role": "system", "content": params["instructions"]})
        body: dict[str, Any] = {"conversation_history": history,
                                "response_objs": [self._response(s, row) for s in todo]}
        if row.get("principle") is not None:
            body["principle"] = row["principle"]
        retries = self.cfg.env.failed_rollout_retries
        rewards: list[float] = [0.0] * len(todo)
        failures: list[str | None] = ["no_reply"] * len(todo)
        for attempt in range(retries + 1):
            try:
                status, reply = await self.client.post(env, "/compare", body)
            except EnvClientError as exc:  # retries on 503 / connection errors ran out
                failures = [exc.failure_class.value if exc.failure_class else "connection_error"] * len(todo)
            else:
                if status == 200:
                    rewards = [float(r) for r in reply["rewards"]]
                    failures = [f and str(f.get("_ng_failure_class")) for f in reply.get("failures") or [None] * len(todo)]
                else:  # a 4xx/5xx: the server could not score the group
                    failures = [f"http_error:{status}"] * len(todo)
            if not any(failures) or attempt == retries:
                break
            self.stats["retried"] += 1
            await asyncio.sleep(0.2 * 2 ** attempt)
        for s, reward, failure in zip(todo, rewards, failures):
            s.reward, s.failure = (reward, None) if failure is None else (0.0, failure)
            s.response, s.scored = None, True
            if failure is not None:
                self._count_failure(failure)

    async def _score_group(self, task: Task, samples: list[Sample], group_id: int) -> None:
        from servers.wire import ROLLOUT_INDEX_KEY, TASK_INDEX_KEY

        if any(s.scored for s in samples):  # session rollouts: verified at the end of each episode
            await asyncio.gather(*(self._score(task, s) for s in samples))
            return
        if await self._scores_groups(task.env):
            if self.cfg.env.group_scoring == "compare":
                return await self._compare(task, samples)
            # cohort /verify: the server groups the samples by task index and waits for all of them
            sent = [s for s in samples if s.failure != PROMPT_TOO_LONG]
            tagged = {**task.row, TASK_INDEX_KEY: group_id, "num_rollouts_per_prompt": len(sent)}
            await asyncio.gather(*(self._score(task, s, {**tagged, ROLLOUT_INDEX_KEY: j}) for j, s in enumerate(samples)))
            return
        await asyncio.gather(*(self._score(task, s) for s in samples))

    def _count_failure(self, failure: str) -> None:
        self.stats["failed"] += 1
        self.stats["failures_by_class"][failure] = self.stats["failures_by_class"].get(failure, 0) + 1

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
        t0 = time.perf_counter()
        tasks = [self.tasks[g.ticket.prompt_index] for g in groups]
        await asyncio.gather(*(self._score_group(task, g.samples, g.ticket.slot) for g, task in zip(groups, tasks)))
        for g, task in zip(groups, tasks):  # after the env reward: low-effort length shaping, prompt-kind tags
            apply_effort_shaping(g.samples, task, self.cfg.env.effort_levels)
        self.stats["reward_seconds"] += time.perf_counter() - t0
        self.stats["scored"] += sum(len(g.samples) for g in groups)
        await self.buffer.put.remote(groups)
        return len(groups)

    async def score_samples(self, samples: list[Sample], tasks: list[Task]) -> list[Sample]:
        """Validation: samples one by one, except consecutive samples of one task for an environment
        that scores groups, which go together through /compare."""
        runs: list[tuple[Task, list[Sample]]] = []
        for s, t in zip(samples, tasks):
            if runs and runs[-1][0] is t:
                runs[-1][1].append(s)
            else:
                runs.append((t, [s]))
        jobs = []
        for task, run in runs:
            if not any(s.scored for s in run) and await self._scores_groups(task.env):
                jobs.append(self._compare(task, run))
            else:
                jobs += [self._score(task, s) for s in run]
        await asyncio.gather(*jobs)
        return samples

    def get_stats(self) -> dict[str, Any]:
        return {**self.stats, "error": self.error}


class _NameOnly:
    def __init__(self, name: str):
        self.name = name
