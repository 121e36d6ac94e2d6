"""The server's front of the decode engine: concurrent requests become engine batches, and
``/pause`` / ``/resume`` act on the batch in flight.

Requests wait in a bounded queue. The batch loop takes the first waiting request, then keeps
collecting until the batch holds ``max_batch_size`` sequences or ``max_wait_s`` has passed since
the first one. Every sequence keeps its own sampling parameters, so requests of any kind share a
batch; identical prompts (``n`` > 1, a GRPO group) share one prefill. A batch runs to the end of
its longest sequence on one worker thread (one model, one device), so the event loop keeps
accepting requests meanwhile; requests that arrive during a batch form the next one.

Pausing (vLLM's modes):
* ``keep`` — the batch in flight stops between two decode steps and stays there; queued requests
  stay queued; ``/resume`` continues both. Tokens before and after carry their weight versions.
* ``wait`` — requests already submitted run to their end; later ones wait for ``/resume``.
* ``abort`` — the batch in flight ends at the next step with what it has (``finish_reason``
  ``abort``), queued requests end with no tokens; later ones wait for ``/resume``.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from servers.model.engine import DecodeEngine, EngineRequest, StepGate
from servers.model.sampling import SequenceOutput

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
PAUSE_MODES = ("abort", "wait", "keep")


class QueueFull(Exception):
    """More requests are waiting than ``max_queued``: the caller answers 503 + Retry-After."""


@dataclass
class BatchStats:
    """Counters for ``/metrics``: batching is observable, not inferred from timings."""

    requests: int = 0
    batches: int = 0
    batch_rows: int = 0
    max_batch_rows: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    errors: int = 0
    rejected_queue_full: int = 0
    generate_seconds: float = 0.0
    pauses: int = 0
    batch_size_counts: list[int] = field(default_factory=lambda: [0] * (len(BATCH_BUCKETS) + 1))
    finish_reasons: Counter[str] = field(default_factory=Counter)

    def observe_batch(self, rows: int, seconds: float) -> None:
        self.batches += 1
        self.batch_rows += rows
        self.max_batch_rows = max(self.max_batch_rows, rows)
        self.generate_seconds += seconds
        self.batch_size_counts[bisect.bisect_left(BATCH_BUCKETS, rows)] += 1


@dataclass
class _Pending:
    request: EngineRequest
    future: asyncio.Future
    seq: int


class Scheduler:
    def __init__(self, engine: DecodeEngine, *, max_batch_size: int = 16, max_wait_s: float = 0.01,
                 max_queued: int = 1024):
        if max_batch_size < 1:
            raise ValueError("max_batch_size must be >= 1")
        self.engine = engine
        self.max_batch_size, self.max_wait_s, self.max_queued = max_batch_size, max_wait_s, max_queued
        self.stats = BatchStats()
        self.gate = StepGate()
        self._waiting: list[_Pending] = []
        self._running: list[_Pending] = []
        self._seq = itertools.count(1)
        self._paused = False
        self._drain_upto: int | None = None  # mode=wait: requests up to this one still run
        self._wakeup = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="decode")
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="scheduler")

    async def close(self) -> None:
        self.gate.pause(abort=True)  # a parked or running batch ends at its next step
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for pending in self._waiting + self._running:
            if not pending.future.done():
                pending.future.set_exception(RuntimeError("the model server is shutting down"))
        self._executor.shutdown(wait=False, cancel_futures=True)

    @property
    def queued(self) -> int:
        return len(self._waiting)

    @property
    def running(self) -> int:
        """Sequences in the batch in flight."""
        return len(self._running)

    @property
    def paused(self) -> bool:
        return self._paused

    async def generate(self, request: EngineRequest) -> SequenceOutput:
        if len(self._waiting) >= self.max_queued:
            self.stats.rejected_queue_full += 1
            raise QueueFull(f"{len(self._waiting)} sequences are waiting (max_queued {self.max_queued})")
        future = asyncio.get_running_loop().create_future()
        self._waiting.append(_Pending(request, future, next(self._seq)))
        self.stats.requests += 1
        self.stats.prompt_tokens += len(request.prompt_ids)
        self._wakeup.set()
        return await future

    # ---- pause / resume ---------------------------------------------------------------------
    async def pause(self, mode: str = "abort") -> None:
        if mode not in PAUSE_MODES:
            raise ValueError(f"mode must be one of {', '.join(PAUSE_MODES)}, got {mode!r}")
        self.stats.pauses += 1
        self._paused = True
        if mode == "wait":
            self._drain_upto = max((p.seq for p in self._waiting + self._running), default=0)
            while any(p.seq <= self._drain_upto and not p.future.done() for p in self._waiting + self._running):
                self._wakeup.set()
                await asyncio.sleep(0.005)
            self._drain_upto = 0
            return
        if mode == "abort":
            for pending in self._waiting:
                if not pending.future.done():
                    pending.future.set_result(SequenceOutput(prompt_ids=list(pending.request.prompt_ids),
                                                             finish_reason="abort"))
            self._waiting = []
        self.gate.pause(abort=mode == "abort")
        # returns once no decode step runs: the batch is parked at the gate (keep) or has ended (abort)
        await asyncio.get_running_loop().run_in_executor(None, self.gate.wait_quiet)
        if mode == "abort":
            await self._idle.wait()

    async def resume(self) -> None:
        self._paused = False
        self._drain_upto = None
        self.gate.resume()
        self._wakeup.set()

    # ---- the batch loop --------------------------------------------------------------------
    def _admissible(self) -> list[_Pending]:
        # requests whose client went away (handler cancelled) are dropped, not generated
        self._waiting = [p for p in self._waiting if not p.future.done()]
        if not self._paused:
            return self._waiting
        upto = self._drain_upto or 0
        return [p for p in self._waiting if p.seq <= upto]

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            while not self._admissible():
                self._wakeup.clear()
                await self._wakeup.wait()
            deadline = loop.time() + self.max_wait_s
            while len(self._admissible()) < self.max_batch_size and loop.time() < deadline:
                self._wakeup.clear()
                try:
                    await asyncio.wait_for(self._wakeup.wait(), deadline - loop.time())
                except asyncio.TimeoutError:
                    break
            batch = self._admissible()[: self.max_batch_size]
            if not batch:
                continue
            taken = {id(p) for p in batch}
            self._waiting = [p for p in self._waiting if id(p) not in taken]
            self._running = batch
            self._idle.clear()
            started = loop.time()
            try:
                results = await loop.run_in_executor(
                    self._executor, lambda: self.engine.run([p.request for p in batch], gate=self.gate))
            except Exception as exc:  # noqa: BLE001 - a failed batch fails its requests, not the server
                self.stats.errors += len(batch)
                for pending in batch:
                    if not pending.future.done():
                        pending.future.set_exception(exc)
                continue
            finally:
                self._running = []
                self._idle.set()
            self.stats.observe_batch(len(batch), loop.time() - started)
            for pending, result in zip(batch, results):
                self.stats.completion_tokens += len(result.token_ids)
                self.stats.finish_reasons[result.finish_reason] += 1
                if not pending.future.done():  # the client may have gone away
                    pending.future.set_result(result)
