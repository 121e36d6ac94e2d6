"""A decode step captured once as a CUDA graph and replayed.

A decode step (forward of one token per row, the sampler, the bookkeeping) launches hundreds of
small kernels; at RL batch sizes on a GPU the launch overhead, not the memory bandwidth, bounds
it. Capturing the whole step once per batch shape and replaying it costs one launch per step. The
step function must be shape-static and free of host synchronisation (the static decoder, the
sampler and the engine's device-side bookkeeping are written so), and every tensor it touches
must keep its address between replays (the engine's per-shape step state, the static KV cache).

If capture fails (an operator that synchronises, a driver without graph support), the step runs
eagerly from then on and the reason is logged once: slower, never wrong.

Not exercised by this repository's tests (no GPU on CI): the same step function runs eagerly on
CPU there, and the tests compare it with the model's own forward.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any, Callable, Hashable

import torch

log = logging.getLogger("verigym.model")


class CapturedStep:
    """``fn`` captured on the current CUDA device; calling the object replays it."""

    def __init__(self, fn: Callable[[], Any], warmup: int = 2):
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm-up outside capture: lazy allocations, autotuning
            for _ in range(warmup):
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            fn()

    def __call__(self) -> None:
        self.graph.replay()


class GraphCache:
    """Captured steps by batch shape, at most ``size`` kept (least recently used dropped)."""

    def __init__(self, size: int = 8):
        self.size = size
        self._steps: OrderedDict[Hashable, CapturedStep] = OrderedDict()
        self.failed: str | None = None  # once capture failed, every step runs eagerly

    def clear(self) -> None:
        self._steps.clear()

    def get(self, key: Hashable, make: Callable[[], Callable[[], Any]]) -> Callable[[], Any] | None:
        """The captured step for ``key`` (captured from ``make()`` the first time); None after a
        capture failure."""
        if self.failed is not None:
            return None
        step = self._steps.get(key)
        if step is None:
            try:
                step = CapturedStep(make())
            except Exception as exc:  # noqa: BLE001 - fall back to eager steps, say why once
                self.failed = f"{type(exc).__name__}: {exc}"
                log.warning("CUDA graph capture failed (%s); decode steps run eagerly", self.failed)
                return None
            self._steps[key] = step
            while len(self._steps) > self.size:
                self._steps.popitem(last=False)
        self._steps.move_to_end(key)
        return step

    def __len__(self) -> int:
        return len(self._steps)
