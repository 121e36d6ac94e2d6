"""The in-process generation backend (``local``): our decode loop on the policy's own model.

Weights. :meth:`LocalGenerator.receive_weights` keeps the newest (version, loader) it was given;
:meth:`~LocalGenerator.load_received_weights` loads it between batches, and with ``in_flight``
every decode step loads it first (trainer.rollout.decode calls back before each forward pass),
so generation never drains and the tokens after the swap carry the new version. The load holds
``policy.weights_lock``, which each decode step holds too: a step never runs on half-loaded weights.

Batching, two ways (trainer.rollout.generator):

* :meth:`~LocalGenerator.episodes` — :class:`LockstepGenerator`: a batch runs when every live
  episode is waiting for its turn, in episode order and chunks of ``max_batch``, all sampled from
  one RNG seeded by ``seed``, so the batches (and the sampled tokens) are the same on every run and
  a batch of one-turn episodes is exactly one decode batch. The engine's generators and validation.
* :meth:`~LocalGenerator.generate` — requests gathered for ``gather_s`` into batches of up to
  ``max_batch`` on one worker thread, so the event loop keeps scoring while the CPU decodes
  (``driver rollout``).

``on_step(step)`` (optional) runs before every decode step of either kind, ahead of the in-flight
load: an observer for tests and cancellation.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

from trainer.policy import Policy
from trainer.rollout.decode import OnStep, decode_batch
from trainer.rollout.generator import Generation, Generator, SamplingParams, WeightInbox, WeightLoader


class LocalGenerator(Generator):
    def __init__(self, policy: Policy, *, in_flight: bool = False, max_batch: int = 64, seed: int = 0,
                 gather_s: float = 0.01, on_step: OnStep | None = None):
        self.policy, self.in_flight, self.max_batch, self.on_step = policy, in_flight, max_batch, on_step
        self.stats: dict[str, float] = {"batches": 0, "sequences": 0, "generated_tokens": 0, "decode_s": 0.0,
                                        "weight_updates": 0, "in_flight_updates": 0, "weight_load_seconds": 0.0}
        self._received = WeightInbox()
        self._stream = _Stream(self, policy.make_rng(seed), gather_s)

    # ---- weights ------------------------------------------------------------------------
    @property
    def version(self) -> int:
        return self.policy.version

    def receive_weights(self, version: int, load: WeightLoader) -> None:
        self._received.put(version, load)

    def load_received_weights(self) -> None:
        self._load(in_flight=False)

    def _load(self, in_flight: bool) -> None:
        received = self._received.take()
        if received is None or received[0] <= self.policy.version:
            return
        t0 = time.perf_counter()
        state = received[1]()
        with self.policy.weights_lock:  # a decode step never runs on half-loaded weights
            self.policy.model.load_state_dict(state)
            self.policy.version = received[0]
        self.stats["weight_load_seconds"] += time.perf_counter() - t0
        self.stats["weight_updates"] += 1
        self.stats["in_flight_updates"] += int(in_flight)

    def _before_step(self, step: int) -> None:
        if self.on_step is not None:
            self.on_step(step)
        if self.in_flight:
            self._load(in_flight=True)

    # ---- decoding -----------------------------------------------------------------------
    def decode(self, prompts: list[list[int]], params: list[SamplingParams], rng: torch.Generator) -> list[Generation]:
        """One decode batch (blocking)."""
        start = time.perf_counter()
        results = decode_batch(self.policy, prompts, params, rng=rng, on_step=self._before_step)
        self.stats["batches"] += 1
        self.stats["sequences"] += len(prompts)
        self.stats["generated_tokens"] += sum(len(g.token_ids) for g in results)
        self.stats["decode_s"] += time.perf_counter() - start
        return results

    def episodes(self, count: int, seed: int, max_batch: int | None = None) -> "LockstepGenerator":
        rng = self.policy.make_rng(seed)
        return LockstepGenerator(self.policy, lambda prompts, params: self.decode(prompts, params, rng), count,
                                 max_batch or count or 1)

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> Generation:
        return await self._stream.generate(prompt_ids, params)

    def close(self) -> None:
        self._stream.close()


class LockstepGenerator:
    """Model turns of concurrent episodes decoded in deterministic batches (the module docstring).

    ``decode(prompts, params)`` decodes one batch (blocking; run on a worker thread); a row whose
    result is an exception fails that episode's turn alone. Each episode takes its turns through
    ``for_episode(i)``; :meth:`finished` tells the batcher an episode will ask for no more turns."""

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
                    if isinstance(res, BaseException):
                        c[3].set_exception(res)
                    else:
                        c[3].set_result(res)
        finally:
            self._task = None
        await asyncio.sleep(0)  # let the episodes take their results before the next batch is formed
        self._kick()


class _EpisodeTurns:
    """What one episode of a lockstep batch generates with (trainer.rollout.generator.Turns)."""

    def __init__(self, batcher: LockstepGenerator, index: int):
        self.batcher, self.index, self.policy = batcher, index, batcher.policy

    async def generate(self, prompt_ids: list[int], params: Any) -> Any:
        return await self.batcher.generate(self.index, prompt_ids, params)


@dataclass
class _Request:
    prompt_ids: list[int]
    params: SamplingParams
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop


class _Stream:
    """Concurrent ``generate`` calls gathered into batches decoded on one worker thread."""

    def __init__(self, generator: LocalGenerator, rng: torch.Generator, gather_s: float):
        self.generator, self.rng, self.gather_s = generator, rng, gather_s
        self._queue: queue.Queue[_Request | None] = queue.Queue()
        self._thread: threading.Thread | None = None

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> Generation:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        if self._thread is None:
            self._thread = threading.Thread(target=self._worker, name="verigym-decode", daemon=True)
            self._thread.start()
        self._queue.put(_Request(list(prompt_ids), params, future, loop))
        return await future

    def close(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None

    def _worker(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            deadline = time.monotonic() + self.gather_s
            stop = False
            while len(batch) < self.generator.max_batch:
                try:
                    item = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if item is None:
                    stop = True
                    break
                batch.append(item)
            try:
                results = self.generator.decode([r.prompt_ids for r in batch], [r.params for r in batch], self.rng)
                for req, res in zip(batch, results):
                    req.loop.call_soon_threadsafe(_resolve, req.future, res, None)
            except BaseException as exc:  # noqa: BLE001 - surfaced to every waiting caller
                for req in batch:
                    req.loop.call_soon_threadsafe(_resolve, req.future, None, exc)
            if stop:
                return


def _resolve(future: asyncio.Future, result: Any, exc: BaseException | None) -> None:
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)
