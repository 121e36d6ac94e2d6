"""Request batching for the transformers engine: concurrent requests become one ``generate``.

Requests wait in a bounded queue. The batch loop takes the first waiting request, then keeps
collecting until the batch holds ``max_batch_size`` rows or ``max_wait_s`` has passed since the
first one, whichever comes first. Rows are grouped by sampling settings (temperature, top_p:
one ``generate`` call has one of each); rows of another group wait for the next batch, in
order. Prompts are left-padded so every row continues from its own last token. ``generate``
runs on one worker thread, so the event loop keeps accepting requests while the model works,
and batches never run concurrently (one model, one device).

Per-row limits that ``generate`` cannot take per row are applied afterwards: each row keeps at
most its own ``max_new_tokens`` and is cut at its first stop token or stop string.
"""

from __future__ import annotations

import asyncio
import bisect
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from servers.model.loading import LoadedModel

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class QueueFull(Exception):
    """More requests are waiting than ``max_queued``: the caller answers 503 + Retry-After."""


@dataclass
class GenerationRequest:
    prompt_ids: list[int]
    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()

    @property
    def sampling_key(self) -> tuple[float, float]:
        return (self.temperature, self.top_p)


@dataclass
class GenerationResult:
    text: str
    completion_tokens: int
    finish_reason: str  # "stop" (a stop token or string) | "length" (max_new_tokens reached)


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
    request: GenerationRequest
    future: asyncio.Future


class Batcher:
    def __init__(self, loaded: LoadedModel, *, max_batch_size: int = 16, max_wait_s: float = 0.01,
                 max_queued: int = 1024):
        if max_batch_size < 1:
            raise ValueError("max_batch_size must be >= 1")
        self.loaded = loaded
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_s
        self.max_queued = max_queued
        self.stats = BatchStats()
        self._waiting: list[_Pending] = []
        self._wakeup = asyncio.Event()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="generate")
        self._task: asyncio.Task | None = None
        self._stop_ids = loaded.stop_token_ids
        # A fast tokenizer is one Rust object whose padding/truncation state calls mutate: two
        # threads in it at once fail ("Already borrowed"). Request threads (chat templates) and
        # the generate thread (pad, decode) take this lock around every tokenizer call.
        self.tokenizer_lock = threading.Lock()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="batcher")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for pending in self._waiting:
            if not pending.future.done():
                pending.future.set_exception(RuntimeError("the model server is shutting down"))
        self._executor.shutdown(wait=False, cancel_futures=True)

    @property
    def queued(self) -> int:
        return len(self._waiting)

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        if len(self._waiting) >= self.max_queued:
            self.stats.rejected_queue_full += 1
            raise QueueFull(f"{len(self._waiting)} requests are waiting (max_queued {self.max_queued})")
        future = asyncio.get_running_loop().create_future()
        self._waiting.append(_Pending(request, future))
        self.stats.requests += 1
        self._wakeup.set()
        return await future

    # ---- the batch loop ----------------------------------------------------------------
    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            while not self._live():
                self._wakeup.clear()
                await self._wakeup.wait()
            deadline = loop.time() + self.max_wait_s
            while len(self._live()) < self.max_batch_size and loop.time() < deadline:
                self._wakeup.clear()
                try:
                    await asyncio.wait_for(self._wakeup.wait(), deadline - loop.time())
                except asyncio.TimeoutError:
                    break
            batch = self._take_batch()
            if not batch:
                continue
            started = loop.time()
            try:
                results = await loop.run_in_executor(self._executor, self._generate, [p.request for p in batch])
            except Exception as exc:  # noqa: BLE001 - a failed batch fails its requests, not the server
                self.stats.errors += len(batch)
                for pending in batch:
                    if not pending.future.done():
                        pending.future.set_exception(exc)
                continue
            self.stats.observe_batch(len(batch), loop.time() - started)
            for pending, result in zip(batch, results):
                self.stats.completion_tokens += result.completion_tokens
                self.stats.finish_reasons[result.finish_reason] += 1
                if not pending.future.done():  # the client may have gone away
                    pending.future.set_result(result)

    def _live(self) -> list[_Pending]:
        # requests whose client disconnected (handler cancelled) are dropped, not generated
        self._waiting = [p for p in self._waiting if not p.future.done()]
        return self._waiting

    def _take_batch(self) -> list[_Pending]:
        live = self._live()
        if not live:
            return []
        key = live[0].request.sampling_key
        batch = [p for p in live if p.request.sampling_key == key][: self.max_batch_size]
        taken = {id(p) for p in batch}
        self._waiting = [p for p in live if id(p) not in taken]
        return batch

    # ---- on the worker thread --------------------------------------------------------------
    def _generate(self, requests: list[GenerationRequest]) -> list[GenerationResult]:
        import torch

        tok, model = self.loaded.tokenizer, self.loaded.model
        with self.tokenizer_lock:
            padded = tok.pad({"input_ids": [r.prompt_ids for r in requests]}, padding=True, return_tensors="pt")
        input_ids = padded["input_ids"].to(self.loaded.device)
        attention = padded["attention_mask"].to(self.loaded.device)
        self.stats.prompt_tokens += sum(len(r.prompt_ids) for r in requests)
        first = requests[0]
        sampling: dict[str, Any] = {"do_sample": False}
        if first.temperature > 0:
            sampling = {"do_sample": True, "temperature": first.temperature, "top_p": first.top_p, "top_k": 0}
        with torch.inference_mode():
            out = model.generate(input_ids=input_ids, attention_mask=attention,
                                 max_new_tokens=max(r.max_new_tokens for r in requests),
                                 eos_token_id=self._stop_ids, pad_token_id=tok.pad_token_id, **sampling)
        new_tokens = out[:, input_ids.shape[1]:].tolist()
        with self.tokenizer_lock:
            return [self._finish(r, ids) for r, ids in zip(requests, new_tokens)]

    def _finish(self, request: GenerationRequest, ids: list[int]) -> GenerationResult:
        ids = ids[: request.max_new_tokens]
        finish = "length"
        for i, token in enumerate(ids):
            if token in self._stop_ids:
                ids, finish = ids[:i], "stop"  # the stop token itself is not part of the text
                break
        text = self.loaded.tokenizer.decode(ids, skip_special_tokens=True)
        cut = min((text.find(s) for s in request.stop if s and s in text), default=-1)
        if cut >= 0:
            text, finish = text[:cut], "stop"
            ids = ids[: self._tokens_covering(ids, request.stop)]
        return GenerationResult(text=text, completion_tokens=len(ids), finish_reason=finish)

    def _tokens_covering(self, ids: list[int], stops: tuple[str, ...]) -> int:
        """Fewest leading tokens whose text contains a stop string (what was generated up to the stop)."""
        lo, hi = 1, len(ids)
        while lo < hi:
            mid = (lo + hi) // 2
            text = self.loaded.tokenizer.decode(ids[:mid], skip_special_tokens=True)
            if any(s and s in text for s in stops):
                hi = mid
            else:
                lo = mid + 1
        return lo
