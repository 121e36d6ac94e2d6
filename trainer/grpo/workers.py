"""The engine's generator and trainer as plain classes; :mod:`trainer.grpo.actors` runs them (and
:class:`trainer.grpo.reward_worker.RewardWorker`) as Ray actors.

* :class:`GeneratorWorker` decodes continuously on its own thread. Before each batch it asks the
  collector for admission; between decode steps the ``on_step`` hook swaps in new weights when
  ``in_flight_weight_updates`` is on, so generation never drains and later tokens carry the new
  version (the decode loop stamps each token and keeps the logprob it was sampled with).
  Every sample is one run of the one rollout function (trainer.agent_loop.run_episode, through
  trainer.grpo.episodes); one-turn episodes stop before their verify step, which the reward
  actor runs while the next batch decodes.
* :class:`TrainerWorker` owns the training copy of the policy and the optimizer.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import numpy as np
import torch

from trainer.config import MasterConfig
from trainer.grpo.decode import load_policy, prompt_ids_for, sampling_params
from trainer.grpo.lr_schedule import build_scheduler
from trainer.grpo.reference import ReferencePolicy
from trainer.grpo.replay_buffer import Group, Sample, Ticket
from trainer.grpo.train_step import grpo_train_step
from trainer.grpo.weight_sync import WeightTransport
from trainer.rollout.task import Task


class GeneratorWorker:
    def __init__(self, cfg_data: dict[str, Any], worker_id: int, tasks: list[Task], buffer: Any,
                 reward: Any, transport: WeightTransport, urls: dict[str, Any] | None = None):
        from trainer.grpo.episodes import SessionRouter

        self.cfg = MasterConfig.model_validate(cfg_data)
        self.id, self.tasks, self.buffer, self.reward, self.transport = worker_id, tasks, buffer, reward, transport
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
                self.reward.score_groups.remote(groups)  # the reward actor holds the tasks: groups name theirs
        except Exception as exc:  # surfaced to the driver through get_stats()
            self.error = f"{type(exc).__name__}: {exc}"
            raise

    def generate(self, tickets: list[Ticket], hook: Any = None) -> list[Group]:
        from trainer.grpo.episodes import rollout_samples

        t0 = time.perf_counter()
        K = self.cfg.grpo.num_generations_per_prompt
        start_version = self.policy.version
        tasks = [self.tasks[t.prompt_index] for t in tickets]
        # one RNG per batch seeded by its first slot: reproducible for the same admissions
        rng = self.policy.make_rng(tickets[0].seed)
        step = tickets[0].slot // self.cfg.grpo.num_prompts_per_step  # the step these groups train at
        gens = rollout_samples(self.policy, self.urls, [task for task in tasks for _ in range(K)], self.sessions,
                               self.cfg, sampling_params(self.cfg), rng, hook=hook, step=step)
        dt = time.perf_counter() - t0
        groups = [Group(ticket=t, prompt_id=task.id, start_version=start_version, samples=gens[i * K:(i + 1) * K],
                        gen_seconds=dt / len(tickets)) for i, (t, task) in enumerate(zip(tickets, tasks))]
        self.stats["gen_seconds"] += dt
        self.stats["tokens"] += sum(len(x.gen_ids) for x in gens)
        self.stats["groups"] += len(tickets)
        return groups


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
        m["weights/trainer_version"] = self.policy.version  # compared with the driver's step (grpo.versions)
        return m

    def publish_weights(self, version: int) -> Any:
        return self.transport.publish(version, self.policy.model.state_dict())

    def warm_start_begin(self, tasks: list[Task]) -> dict[str, Any]:
        """Prepare the warm start (its examples, its optimizer); ``warm_start_run`` then runs it in pieces."""
        from trainer.grpo.warm_start import warm_start_loop

        self._warm_start = warm_start_loop(self.policy, [t.row for t in tasks], self.cfg.policy.warm_start,
                                           seed=self.cfg.grpo.seed)
        return self._warm_start.progress()

    def warm_start_run(self, max_seconds: float) -> dict[str, Any]:
        """About ``max_seconds`` more of the warm start: its progress, and its summary once done."""
        loop = self._warm_start
        loop.run(max_seconds=max_seconds)
        out = loop.progress()
        if out["done"]:
            out["summary"] = loop.summary()
            self._warm_start = None
        return out

    def generate_validation(self, tasks: list[Task], k: int) -> list[Sample]:
        """k greedy samples per row, in row order, each one run of the one rollout function
        (session rows come back scored, the others are verified by the reward actor)."""
        from trainer.grpo.episodes import rollout_samples

        return rollout_samples(self.policy, self.urls, [t for t in tasks for _ in range(k)], self.sessions, self.cfg,
                               sampling_params(self.cfg, greedy=True), self.policy.make_rng(self.cfg.grpo.seed),
                               step=max(self.policy.version, 0), max_batch=64)

    def prompts_too_long(self, tasks: list[Task]) -> list[str]:
        """Ids of the tasks whose prompt leaves no room in ``policy.max_total_sequence_length``."""
        limit = self.cfg.policy.max_total_sequence_length
        return [t.id for t in tasks if len(prompt_ids_for(self.policy, t.row)) >= limit]

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
