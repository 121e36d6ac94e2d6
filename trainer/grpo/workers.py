"""The engine's generator and trainer as plain classes; :mod:`trainer.grpo.actors` runs them (and
:class:`trainer.grpo.reward_worker.RewardWorker`) as Ray actors.

* :class:`GeneratorWorker` generates continuously on its own thread. Before each batch it asks the
  replay buffer for admission and rolls the admitted tasks out (trainer.rollout.batch: K episodes
  per task through the one rollout function); its generator (trainer.rollout.generator) owns the
  weights: new weights from the trainer are loaded between batches, or, with
  ``in_flight_weight_updates``, between two decode steps, so generation never drains and later
  tokens carry the new version. One-turn episodes stop before their verify step, which the reward
  actor runs while the next batch decodes.
* :class:`TrainerWorker` owns the training copy of the policy and the optimizer, and runs
  validation (its rollouts scored by the reward actor, which returns the metrics).

Both receive the typed config (validated once, by the driver) and the tasks by reference.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import numpy as np
import torch

from trainer.config import MasterConfig
from trainer.grpo.lr_schedule import build_scheduler
from trainer.grpo.reference import ReferencePolicy
from trainer.grpo.train_step import grpo_train_step
from trainer.grpo.weight_sync import WeightTransport
from trainer.policy import load_policy
from trainer.rollout.batch import BatchSettings, run_batch
from trainer.rollout.episode import prompt_ids
from trainer.rollout.generator import SamplingParams, backend_class, generator_for_run, make_generator
from trainer.rollout.sample import Group, Ticket
from trainer.rollout.scoring import EnvInfo
from trainer.rollout.task import Task


class GeneratorWorker:
    def __init__(self, cfg: MasterConfig, worker_id: int, tasks: list[Task], buffer: Any, reward: Any,
                 transport: WeightTransport, urls: dict[str, Any] | None = None):
        self.cfg, self.id, self.tasks, self.buffer, self.reward, self.transport = cfg, worker_id, tasks, buffer, reward, transport
        self.envs = EnvInfo(urls or {})  # environment servers: session rollouts talk to them from here
        device = backend_class(cfg.policy.generation.backend).policy_device(cfg)
        self.generator = generator_for_run(load_policy(cfg, cfg.cluster.torch_threads_per_actor, device), cfg,
                                           in_flight=cfg.in_flight_updates)
        self.generator.policy.version = -1  # no weights from the trainer yet: admission waits for the first push
        self.params = SamplingParams.from_config(cfg.policy.generation)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: str | None = None
        self.stats = {"gen_seconds": 0.0, "idle_seconds": 0.0, "tokens": 0, "groups": 0}

    # ---- weights ------------------------------------------------------------------------
    def receive_weights(self, version: int, handle: Any) -> int:
        """Control call from the driver: returns at once; the generator loads them (module docstring)."""
        timeout = self.cfg.cluster.control_timeout_s
        self.generator.receive_weights(version, lambda: self.transport.fetch(handle, timeout))
        self._wake.set()
        return self.generator.version

    def version(self) -> int:
        return self.generator.version

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
        stats = self.get_stats()
        self.generator.close()  # a generation server is left resumed, with no weight update half done
        return stats

    def get_stats(self) -> dict[str, Any]:
        g = self.generator.stats
        return {**self.stats, "weight_updates": g["weight_updates"], "in_flight_updates": g["in_flight_updates"],
                "weight_load_seconds": g["weight_load_seconds"], "version": self.generator.version, "error": self.error}

    def _loop(self) -> None:
        import ray

        try:
            timeout = self.cfg.cluster.control_timeout_s
            while not self._stop.is_set():
                self.generator.load_received_weights()
                tickets = ray.get(self.buffer.admit.remote(self.generator.version, self.cfg.policy.generation_batch_size),
                                  timeout=timeout)
                if not tickets:
                    t0 = time.perf_counter()
                    self._wake.wait(0.05)
                    self._wake.clear()
                    self.stats["idle_seconds"] += time.perf_counter() - t0
                    continue
                self.reward.score_groups.remote(self.generate(tickets))  # the reward actor holds the tasks
        except Exception as exc:  # surfaced to the driver through get_stats()
            self.error = f"{type(exc).__name__}: {exc}"
            raise

    def generate(self, tickets: list[Ticket]) -> list[Group]:
        t0 = time.perf_counter()
        start_version = self.generator.version
        tasks = [self.tasks[t.prompt_index] for t in tickets]
        step = tickets[0].slot // self.cfg.grpo.num_prompts_per_step  # the step these groups train at
        # one RNG per batch seeded by its first slot: reproducible for the same admissions
        samples = run_batch(self.generator, self.envs, tasks, self.cfg.grpo.num_generations_per_prompt, self.params,
                            BatchSettings.from_config(self.cfg, step), seed=tickets[0].seed)
        dt = time.perf_counter() - t0
        groups = [Group(ticket=t, task_id=task.id, start_version=start_version, samples=group, gen_seconds=dt / len(tickets))
                  for t, task, group in zip(tickets, tasks, samples)]
        self.stats["gen_seconds"] += dt
        self.stats["tokens"] += sum(len(s.gen_ids) for g in groups for s in g.samples)
        self.stats["groups"] += len(tickets)
        return groups


class TrainerWorker:
    def __init__(self, cfg: MasterConfig, transport: WeightTransport, urls: dict[str, Any] | None = None,
                 train: list[Task] | None = None, val: list[Task] | None = None, reward: Any = None):
        self.cfg, self.transport, self.reward = cfg, transport, reward
        self.train, self.val = train or [], val or []
        self.envs = EnvInfo(urls or {})  # validation rollouts of session environments talk to the servers from here
        self.policy = load_policy(cfg, cfg.cluster.torch_threads_per_actor)
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

    def warm_start_begin(self) -> dict[str, Any]:
        """Prepare the warm start on the train tasks (its examples, its optimizer); ``warm_start_run``
        then runs it in pieces."""
        from trainer.grpo.warm_start import warm_start_loop

        self._warm_start = warm_start_loop(self.policy, [t.row for t in self.train], self.cfg.policy.warm_start,
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

    def validate(self) -> dict[str, float]:
        """``grpo.val_num_generations_per_prompt`` greedy samples per validation task, each one run of
        the one rollout function with the trainer's own weights (session rows come back scored), scored
        by the reward actor, which returns the metrics: the samples go there, not to the driver."""
        import ray

        if not self.val:
            return {}
        k, seed = self.cfg.grpo.val_num_generations_per_prompt, self.cfg.grpo.seed
        samples = run_batch(make_generator(self.policy), self.envs, self.val, k,
                            SamplingParams.from_config(self.cfg.policy.generation, greedy=True),
                            BatchSettings.from_config(self.cfg, max(self.policy.version, 0)), seed=seed, max_batch=64)
        groups = [Group(Ticket(i, i, seed), task.id, self.policy.version, group)
                  for i, (task, group) in enumerate(zip(self.val, samples))]
        return ray.get(self.reward.score_validation.remote(groups), timeout=self.cfg.cluster.control_timeout_s)

    def prompts_too_long(self) -> dict[str, list[str]]:
        """Per split, ids of the tasks whose prompt leaves no room in ``policy.max_total_sequence_length``."""
        limit = self.cfg.policy.max_total_sequence_length
        return {split: [t.id for t in tasks if len(prompt_ids(self.policy, t.row)) >= limit]
                for split, tasks in (("train", self.train), ("validation", self.val))}

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
