"""The engine's components as plain classes; :mod:`trainer.grpo.actors` runs them as Ray actors.

* :class:`GeneratorWorker` decodes continuously on its own thread. Before each batch it asks the
  collector for admission; between decode steps the ``on_step`` hook swaps in new weights when
  ``in_flight_weight_updates`` is on, so generation never drains and later tokens carry the new
  version (the decode loop stamps each token and keeps the logprob it was sampled with).
* :class:`RewardWorker` scores finished groups against the environment servers (async HTTP),
  re-scores infrastructure failures ``env.failed_rollout_retries`` times, then hands the groups
  to the collector; samples still failing keep their failure class and are masked in the loss.
  An environment that serves ``POST /compare`` (genrm: rewards relative to the group) gets the
  whole group in one call, or with ``env.group_scoring=verify`` every sample through ``/verify``
  tagged with its group (task index, rollout index, group size) for the server's cohort buffer.
* :class:`TrainerWorker` owns the training copy of the policy and the optimizer.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
import traceback
from typing import Any

import numpy as np
import torch

from trainer.config import MasterConfig
# policy / prompt / decode helpers live in trainer.grpo.decode; re-exported for the tests and actors
from trainer.grpo.decode import (PROMPT_TOO_LONG, decode_within_context, load_policy,  # noqa: F401
                                 prompt_ids_for, sampling_params, to_response)
from trainer.grpo.effort import apply_effort_shaping
from trainer.grpo.lr_schedule import build_scheduler
from trainer.grpo.reference import ReferencePolicy
from trainer.grpo.replay_buffer import Group, Sample, Ticket
from trainer.grpo.train_step import grpo_train_step
from trainer.grpo.weight_sync import WeightTransport


class GeneratorWorker:
    def __init__(self, cfg_data: dict[str, Any], worker_id: int, rows: list[dict[str, Any]], buffer: Any,
                 reward: Any, transport: WeightTransport, urls: dict[str, Any] | None = None):
        from trainer.grpo.episodes import SessionRouter

        self.cfg = MasterConfig.model_validate(cfg_data)
        self.id, self.rows, self.buffer, self.reward, self.transport = worker_id, rows, buffer, reward, transport
        self.urls = urls or {}  # environment servers: session rollouts talk to them from here
        self.sessions = SessionRouter(self.urls) if self.urls else None
        self.policy = load_policy(self.cfg, self.cfg.cluster.torch_threads_per_actor)
        self.policy.version = -1  # no weights from the trainer yet: admission waits for the first push
        self._pending: tuple[int, Any] | None = None
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: str | None = None
        self.stats = {"gen_seconds": 0.0, "idle_seconds": 0.0, "tokens": 0, "groups": 0, "weight_updates": 0,
                      "in_flight_updates": 0, "weight_load_seconds": 0.0}

    # ---- weights ------------------------------------------------------------------------
    def receive_weights(self, version: int, handle: Any) -> int:
        """Control call from the driver: returns at once; the decode loop applies it."""
        with self._lock:
            if self._pending is None or version > self._pending[0]:
                self._pending = (version, handle)
        self._wake.set()
        return self.policy.version

    def _apply_pending(self, in_flight: bool) -> None:
        with self._lock:
            pending, self._pending = self._pending, None
        if pending is None or pending[0] <= self.policy.version:
            return
        t0 = time.perf_counter()
        state = self.transport.fetch(pending[1], self.cfg.cluster.control_timeout_s)
        with self.policy.weights_lock:  # a decode step never runs on half-loaded weights
            self.policy.model.load_state_dict(state)
            self.policy.version = pending[0]
        self.stats["weight_load_seconds"] += time.perf_counter() - t0
        self.stats["weight_updates"] += 1
        self.stats["in_flight_updates"] += int(in_flight)

    def version(self) -> int:
        return self.policy.version

    # ---- the loop ------------------------------------------------------------------------
    def start(self) -> bool:
        self._thread = threading.Thread(target=self._loop, daemon=True, name=f"generator-{self.id}")
        self._thread.start()
        return True

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=self.cfg.cluster.control_timeout_s)
        return self.get_stats()

    def get_stats(self) -> dict[str, Any]:
        return {**self.stats, "version": self.policy.version, "error": self.error}

    def _loop(self) -> None:
        import ray

        try:
            timeout = self.cfg.cluster.control_timeout_s
            in_flight = self.cfg.in_flight_updates
            hook = (lambda _step: self._apply_pending(True)) if in_flight else None
            while not self._stop.is_set():
                self._apply_pending(False)
                tickets = ray.get(self.buffer.admit.remote(self.policy.version, self.cfg.policy.generation_batch_size),
                                  timeout=timeout)
                if not tickets:
                    t0 = time.perf_counter()
                    self._wake.wait(0.05)
                    self._wake.clear()
                    self.stats["idle_seconds"] += time.perf_counter() - t0
                    continue
                groups = self.generate(tickets, hook)
                self.reward.score_groups.remote(groups, [self.rows[t.prompt_index] for t in tickets])
        except Exception as exc:  # surfaced to the driver through get_stats()
            self.error = f"{type(exc).__name__}: {exc}"
            raise

    def generate(self, tickets: list[Ticket], hook: Any = None) -> list[Group]:
        t0 = time.perf_counter()
        K = self.cfg.grpo.num_generations_per_prompt
        params = sampling_params(self.cfg)
        start_version = self.policy.version
        rows = [self.rows[t.prompt_index] for t in tickets]
        # Rows of session environments (tools, per-rollout state) run the one rollout function,
        # trainer.agent_loop.run_episode, K times each; the others decode in one batch.
        session = [self.sessions.needs_session(r) for r in rows] if self.sessions else [False] * len(rows)
        single = [i for i, multi in enumerate(session) if not multi]
        gens: list[Sample] = [None] * (len(rows) * K)  # type: ignore[list-item]
        if single:
            prompts = [prompt_ids_for(self.policy, rows[i]) for i in single]
            # one RNG per batch seeded by its first slot: reproducible for the same admissions
            rng = torch.Generator().manual_seed(tickets[0].seed)
            step = tickets[0].slot // self.cfg.grpo.num_prompts_per_step  # the step these groups train at
            decoded = decode_within_context(self.policy, self.cfg, [p for p in prompts for _ in range(K)], params, rng,
                                            hook, step)
            for n, i in enumerate(single):
                gens[i * K:(i + 1) * K] = decoded[n * K:(n + 1) * K]
        multi = [i for i, m in enumerate(session) if m]
        if multi:
            from trainer.grpo.episodes import run_session_rollouts

            scored = run_session_rollouts(self.policy, self.urls, [rows[i] for i in multi for _ in range(K)],
                                          self.sessions, self.cfg, params, tickets[0].seed, hook)
            for n, i in enumerate(multi):
                gens[i * K:(i + 1) * K] = scored[n * K:(n + 1) * K]
        dt = time.perf_counter() - t0
        groups = []
        for i, t in enumerate(tickets):
            row = self.rows[t.prompt_index]
            groups.append(Group(ticket=t, prompt_id=str(row.get("_verigym_id", t.prompt_index)),
                                start_version=start_version, samples=gens[i * K:(i + 1) * K], gen_seconds=dt / len(tickets)))
        self.stats["gen_seconds"] += dt
        self.stats["tokens"] += sum(len(x.gen_ids) for x in gens)
        self.stats["groups"] += len(tickets)
        return groups


class RewardWorker:
    """Async actor: many groups are scored concurrently while generators keep decoding."""

    def __init__(self, cfg_data: dict[str, Any], urls: dict[str, Any], buffer: Any, route_map: dict[str, str]):
        from servers.client import EnvClient

        self.cfg = MasterConfig.model_validate(cfg_data)
        self.buffer, self.route_map = buffer, route_map
        e = self.cfg.env
        self.client = EnvClient(urls, max_concurrency_per_server=e.max_concurrency_per_server, timeout_s=e.verify_timeout_s,
                                retries=1, backoff_s=0.1, max_backoff_s=0.5)
        self.stats = {"reward_seconds": 0.0, "scored": 0, "failed": 0, "retried": 0, "failures_by_class": {}}
        self.error: str | None = None  # the traceback of an exception in our own scoring code
        self._policy_name = self.cfg.policy.model_name
        self._group_envs: dict[str, bool] = {}  # env -> serves POST /compare (from its /info)

    def env_of(self, row: dict[str, Any]) -> str:
        if row.get("_verigym_env"):
            return row["_verigym_env"]
        if row.get("env"):
            return row["env"]
        name = (row.get("agent_ref") or {}).get("name", "")
        return self.route_map.get(name, name)

    async def _score(self, row: dict[str, Any], s: Sample) -> None:
        from servers.client import EnvClientError
        from servers.wire import FAILURE_CLASS_KEY
        from trainer.responses import public_row

        env = self.env_of(row)
        s.env = env
        if s.failure == PROMPT_TOO_LONG or s.scored:  # never generated, or a session rollout verified already
            if s.failure:
                self._count_failure(s.failure)
            return
        response = to_response(_NameOnly(self._policy_name), s, row)
        for attempt in range(self.cfg.env.failed_rollout_retries + 1):
            try:
                reply = await self.client.verify(env, public_row(row), response)
                failure = reply.get(FAILURE_CLASS_KEY)
            except EnvClientError as exc:  # a 4xx/5xx answer: the server could not score it
                reply, failure = {"reward": 0.0}, f"http_error:{type(exc).__name__}"
            if failure is None:
                s.reward, s.failure = float(reply.get("reward", 0.0)), None
                return
            if attempt < self.cfg.env.failed_rollout_retries:
                self.stats["retried"] += 1
                await asyncio.sleep(0.2 * 2 ** attempt)
        s.reward, s.failure = 0.0, str(failure)
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

    async def _compare(self, row: dict[str, Any], samples: list[Sample]) -> None:
        """One ``POST /compare`` for the group; per-response failure classes come back masked."""
        from servers.client import EnvClientError

        env = self.env_of(row)
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
                                "response_objs": [to_response(_NameOnly(self._policy_name), s, row) for s in todo]}
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
            if failure is not None:
                self._count_failure(failure)

    async def _score_group(self, row: dict[str, Any], samples: list[Sample], group_id: int) -> None:
        from servers.wire import ROLLOUT_INDEX_KEY, TASK_INDEX_KEY

        env = self.env_of(row)
        if any(s.scored for s in samples):  # session rollouts: verified at the end of each episode
            await asyncio.gather(*(self._score(row, s) for s in samples))
            return
        if await self._scores_groups(env):
            if self.cfg.env.group_scoring == "compare":
                return await self._compare(row, samples)
            # cohort /verify: the server groups the samples by task index and waits for all of them
            sent = [s for s in samples if s.failure != PROMPT_TOO_LONG]
            tagged = {**row, TASK_INDEX_KEY: group_id, "num_rollouts_per_prompt": len(sent)}
            await asyncio.gather(*(self._score({**tagged, ROLLOUT_INDEX_KEY: j}, s) for j, s in enumerate(samples)))
            return
        await asyncio.gather(*(self._score(row, s) for s in samples))

    def _count_failure(self, failure: str) -> None:
        self.stats["failed"] += 1
        self.stats["failures_by_class"][failure] = self.stats["failures_by_class"].get(failure, 0) + 1

    async def score_groups(self, groups: list[Group], rows: list[dict[str, Any]]) -> int:
        """Score and hand to the buffer. Called fire-and-forget by the generators, so an exception
        here (a bug of ours, not an environment's failure: those are failure classes) is kept with
        its traceback for the driver, which stops the run with it (engine._check_health)."""
        try:
            return await self._score_groups(groups, rows)
        except Exception:
            self.error = self.error or traceback.format_exc()
            raise

    async def _score_groups(self, groups: list[Group], rows: list[dict[str, Any]]) -> int:
        t0 = time.perf_counter()
        await asyncio.gather(*(self._score_group(row, grp.samples, grp.ticket.slot) for grp, row in zip(groups, rows)))
        for grp, row in zip(groups, rows):  # after the env reward: low-effort length shaping, prompt-kind tags
            apply_effort_shaping(grp.samples, row, self.cfg.env.effort_levels)
        self.stats["reward_seconds"] += time.perf_counter() - t0
        self.stats["scored"] += sum(len(g.samples) for g in groups)
        await self.buffer.put.remote(groups)
        return len(groups)

    async def score_samples(self, samples: list[Sample], rows: list[dict[str, Any]]) -> list[Sample]:
        """Validation: samples one by one, except consecutive samples of one row for an environment
        that scores groups, which go together through /compare."""
        runs: list[tuple[dict[str, Any], list[Sample]]] = []
        for s, r in zip(samples, rows):
            if runs and (runs[-1][0] is r or runs[-1][0] == r):
                runs[-1][1].append(s)
            else:
                runs.append((r, [s]))
        jobs = []
        for row, run in runs:
            if not any(s.scored for s in run) and await self._scores_groups(self.env_of(row)):
                jobs.append(self._compare(row, run))
            else:
                jobs += [self._score(row, s) for s in run]
        await asyncio.gather(*jobs)
        return samples

    def get_stats(self) -> dict[str, Any]:
        return {**self.stats, "error": self.error}


class _NameOnly:
    def __init__(self, name: str):
        self.name = name


class TrainerWorker:
    def __init__(self, cfg_data: dict[str, Any], transport: WeightTransport, urls: dict[str, Any] | None = None):
        from trainer.grpo.episodes import SessionRouter

        self.cfg = MasterConfig.model_validate(cfg_data)
        self.transport = transport
        self.urls = urls or {}  # validation rollouts of session environments talk to the servers from here
        self.sessions = SessionRouter(self.urls) if self.urls else None
        self.policy = load_policy(self.cfg, self.cfg.cluster.torch_threads_per_actor)
        torch.manual_seed(self.cfg.grpo.seed)
        o = self.cfg.policy.optimizer
        cls = {"torch.optim.AdamW": torch.optim.AdamW, "torch.optim.Adam": torch.optim.Adam,
               "torch.optim.SGD": torch.optim.SGD}[o.name]
        kw = dict(o.kwargs)
        if "betas" in kw:
            kw["betas"] = tuple(kw["betas"])
        self.optimizer = cls(self.policy.model.parameters(), **kw)
        self.scheduler = build_scheduler(self.optimizer, self.cfg.policy.scheduler)  # policy.scheduler, or None
        self.pad_id = self.policy.tokenizer.pad_token_id
        self.reference: ReferencePolicy | None = None

    def _ensure_reference(self) -> None:
        # Taken at the first RL step (after warm start / resume), unless a checkpoint brought one.
        if self.cfg.loss_fn.reference_policy_kl_penalty > 0 and self.reference is None:
            self.reference = ReferencePolicy(self.policy.model)

    def train_step(self, groups: list[Group], step: int) -> dict[str, Any]:
        self._ensure_reference()
        m = grpo_train_step(self.policy.model, self.optimizer, groups, step, self.cfg, self.pad_id, self.reference,
                            self.scheduler)
        self.policy.version = step + 1
        return m

    def publish_weights(self, version: int) -> Any:
        return self.transport.publish(version, self.policy.model.state_dict())

    def warm_start(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        from trainer.grpo.warm_start import supervised_warm_start

        return supervised_warm_start(self.policy, rows, self.cfg.policy.warm_start, seed=self.cfg.grpo.seed)

    def generate_validation(self, rows: list[dict[str, Any]], k: int) -> list[Sample]:
        """k greedy samples per row, in row order; session rows through the one rollout function
        (already scored), the others decoded in batches (scored by the reward worker)."""
        params = sampling_params(self.cfg, greedy=True)
        expanded = [r for r in rows for _ in range(k)]
        session = [bool(self.sessions and self.sessions.needs_session(r)) for r in expanded]
        single = [i for i, m in enumerate(session) if not m]
        out: list[Sample] = [None] * len(expanded)  # type: ignore[list-item]
        prompts = [prompt_ids_for(self.policy, expanded[i]) for i in single]
        bs = 64
        for i in range(0, len(prompts), bs):
            decoded = decode_within_context(self.policy, self.cfg, prompts[i:i + bs], params,
                                            torch.Generator().manual_seed(self.cfg.grpo.seed),
                                            step=max(self.policy.version, 0))
            for j, sample in zip(single[i:i + bs], decoded):
                out[j] = sample
        multi = [i for i, m in enumerate(session) if m]
        if multi:
            from trainer.grpo.episodes import run_session_rollouts

            scored = run_session_rollouts(self.policy, self.urls, [expanded[i] for i in multi], self.sessions,
                                          self.cfg, params, self.cfg.grpo.seed)
            for j, sample in zip(multi, scored):
                out[j] = sample
        return out

    def prompts_too_long(self, rows: list[dict[str, Any]]) -> list[str]:
        """Ids of the rows whose prompt leaves no room in ``policy.max_total_sequence_length``."""
        limit = self.cfg.policy.max_total_sequence_length
        return [str(r.get("_verigym_id", i)) for i, r in enumerate(rows)
                if len(prompt_ids_for(self.policy, r)) >= limit]

    def save(self, path: str) -> bool:
        from trainer.grpo.checkpoint import save_trainer_state

        save_trainer_state(path, self.policy.model, self.optimizer if self.cfg.checkpointing.save_optimizer else None,
                           tokenizer=self.policy.tokenizer)
        if self.reference is not None:
            self.reference.save(path)
        if self.scheduler is not None:
            torch.save(self.scheduler.state_dict(), f"{path}/scheduler.pt")
        return True

    def load(self, path: str, version: int) -> bool:
        from trainer.grpo.checkpoint import load_trainer_state

        load_trainer_state(path, self.policy.model, self.optimizer)
        self.policy.version = version
        if self.scheduler is not None:
            from pathlib import Path

            saved = Path(path) / "scheduler.pt"
            if saved.exists():
                self.scheduler.load_state_dict(torch.load(saved, weights_only=False))
            else:  # a checkpoint from a run without the schedule: continue where the step count says
                import warnings

                with warnings.catch_warnings():  # torch warns about stepping before optimizer.step(): intended
                    warnings.simplefilter("ignore")
                    for _ in range(version * (self.cfg.rollout_batch_size // self.cfg.global_batch_size)):
                        self.scheduler.step()
        if self.cfg.loss_fn.reference_policy_kl_penalty > 0:
            self.reference = ReferencePolicy.load(self.policy.model, path)
            if self.reference is None:
                print(f"driver: checkpoint {path} has no reference policy; the KL penalty now uses the "
                      f"resumed weights (step {version}) as its reference", flush=True)
        return True

    def state_digest(self) -> float:
        """A scalar fingerprint of the weights (tests compare runs with it)."""
        return float(sum(p.double().sum() * (i + 1) for i, p in enumerate(self.policy.model.parameters())))


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
