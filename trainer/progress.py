"""Every progress bar of the trainer (warm start, GRPO, DPO, rollouts, data prep) through one helper.

In a terminal it is tqdm's bar. Anywhere else — a Slurm job log, a file, a pipe — tqdm's bar is a
``\\r`` rewrite per refresh, thousands of lines in a log; there it is one compact line every
``VERIGYM_PROGRESS_EVERY_S`` seconds (default 30) and one at the end::

    GRPO: 120/600 steps (20%), 0.52 steps/s, 3m50s elapsed, eta 15m20s, reward=0.41 val=0.38

    with progress(total=600, desc="GRPO", unit="step") as bar:
        bar.update(1)
        bar.set_postfix(reward="0.41")
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable, TextIO

EVERY_ENV = "VERIGYM_PROGRESS_EVERY_S"
DEFAULT_EVERY_S = 30.0


def _duration(seconds: float) -> str:
    seconds = int(max(0.0, seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


class LineProgress:
    """The bar outside a terminal: a line every ``every_s`` seconds (when it moved) and at close."""

    def __init__(self, total: int | None, *, desc: str, unit: str, initial: int = 0, stream: TextIO,
                 every_s: float, clock: Callable[[], float] = time.monotonic):
        self.total, self.desc, self.unit = total, desc, unit
        self.n = self.initial = initial
        self.stream, self.every_s, self.clock = stream, every_s, clock
        self.started = self.said_at = clock()
        self.said_n: int | None = None
        self.postfix: dict[str, Any] = {}
        self.closed = False

    def update(self, n: int = 1) -> None:
        self.n += n
        if self.clock() - self.said_at >= self.every_s:
            self._say()

    def set_postfix(self, refresh: bool = True, **values: Any) -> None:
        self.postfix = values

    def line(self) -> str:
        elapsed = self.clock() - self.started
        done = self.n - self.initial
        rate = done / elapsed if elapsed > 0 else 0.0
        units = f"{self.unit}s" if not self.unit.endswith("s") else self.unit
        parts = [f"{self.desc}: {self.n}" + (f"/{self.total} {units} ({100 * self.n / self.total:.0f}%)"
                                             if self.total else f" {units}")]
        parts.append(f"{rate:.3g} {units}/s" if rate >= 0.1 or rate == 0 else f"{1 / rate:.3g} s/{self.unit}")
        parts.append(f"{_duration(elapsed)} elapsed")
        if self.total and rate > 0 and self.n < self.total:
            parts.append(f"eta {_duration((self.total - self.n) / rate)}")
        text = ", ".join(parts)
        if self.postfix:
            text += ", " + " ".join(f"{k}={v}" for k, v in self.postfix.items())
        return text

    def _say(self) -> None:
        self.said_at = self.clock()
        self.said_n = self.n
        print(self.line(), file=self.stream, flush=True)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.said_n != self.n or self.n == self.initial:
            self._say()

    def __enter__(self) -> "LineProgress":
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()


class _Off:
    """A disabled bar (``logger.progress_bar=false``): counts, prints nothing."""

    def __init__(self, initial: int = 0):
        self.n = initial

    def update(self, n: int = 1) -> None:
        self.n += n

    def set_postfix(self, refresh: bool = True, **values: Any) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> "_Off":
        return self

    def __exit__(self, *_: Any) -> None:
        pass


def _every_s() -> float:
    raw = os.environ.get(EVERY_ENV)
    try:
        return max(0.0, float(raw)) if raw else DEFAULT_EVERY_S
    except ValueError:
        return DEFAULT_EVERY_S


def progress(total: int | None, *, desc: str, unit: str, initial: int = 0, enabled: bool = True,
             stream: TextIO | None = None) -> Any:
    """A bar with ``update(n)``, ``set_postfix(**values)``, ``close()``, ``n`` and ``with``:
    tqdm's in a terminal, :class:`LineProgress` elsewhere, silent when not ``enabled``."""
    if not enabled:
        return _Off(initial)
    stream = stream if stream is not None else sys.stderr
    isatty = getattr(stream, "isatty", None)
    if isatty is not None and isatty():
        from tqdm import tqdm

        return tqdm(total=total, initial=initial, desc=desc, unit=unit, dynamic_ncols=True, file=stream)
    return LineProgress(total, desc=desc, unit=unit, initial=initial, stream=stream, every_s=_every_s())
