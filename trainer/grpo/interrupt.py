"""Ctrl-C / SIGTERM for `driver run`: stop promptly, clean up, say where to resume.

The first SIGINT or SIGTERM raises :class:`RunInterrupted` in the main thread, unless the engine is
inside a :meth:`StopRequest.deferred` section (taking a batch, writing a checkpoint), where it only
records the request and the engine stops at the section's end, at a step boundary. Every blocking
control call polls (``actors.get``), so the exception arrives within a fraction of a second even
while the trainer is busy. The engine then writes a final checkpoint when its state is consistent,
shuts the actors and Ray down and removes its shared-memory weights; ``driver run`` stops the
environment servers and exits with 128 + the signal number (130 for Ctrl-C, 143 for SIGTERM).

A second signal forces the exit at once: the registered ``force`` callbacks run (kill the
environment servers' process groups, remove the shared-memory weights), every process the driver
started is SIGKILLed by pid (Ray's fate sharing kills its head processes with the driver but not
their dashboard/runtime-env agents), then ``os._exit``.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator


class RunInterrupted(KeyboardInterrupt):
    """Raised in the main thread by the first SIGINT/SIGTERM. A KeyboardInterrupt, so ``except
    Exception`` blocks do not swallow it and code that treats Ctrl-C specially (Ray's blocking
    calls among them) treats it the same way; the engine turns a plain KeyboardInterrupt that
    such code raises instead back into this (:func:`as_run_interrupted`)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.steps_done: int | None = None      # filled in by the engine on the way out
        self.checkpoint_step: int | None = None  # the step a rerun resumes from (None: from scratch)
        self.checkpoint_written = False          # True when the engine wrote it while stopping

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class RunFailed(RuntimeError):
    """The run cannot go on: a server the driver started exited, a component failed or stopped
    answering. ``str()`` is the one line `driver run` prints; ``detail`` the full text (a traceback),
    which the engine writes to ``<log_dir>/error.log``. Filled in on the way out like
    :class:`RunInterrupted`: where the run stopped and which checkpoint a rerun resumes from."""

    exit_code = 1

    def __init__(self, message: str, detail: str = ""):
        super().__init__(message)
        self.detail = detail
        self.error_log: str | None = None        # where ``detail`` was written, if anywhere
        self.steps_done: int | None = None
        self.checkpoint_step: int | None = None
        self.checkpoint_written = False

    @classmethod
    def of(cls, err: BaseException) -> "RunFailed":
        """From an exception that ended the run: its line, and its traceback as the detail. An
        exception raised inside a Ray actor's method is named with the method."""
        import traceback

        cause = getattr(err, "cause", None)  # ray.exceptions.RayTaskError: what the method raised
        line = (f"{getattr(err, 'function_name', 'a Ray task')} raised {type(cause).__name__}: {first_line(cause)}"
                if isinstance(cause, BaseException) else first_line(err))
        return cls(line, "".join(traceback.format_exception(err)))


def first_line(err: BaseException | str, limit: int = 400) -> str:
    """The line that says what happened: of a traceback its last line (the exception), else the first."""
    lines = [x.strip() for x in str(err).strip().splitlines() if x.strip()]
    if not lines:
        return type(err).__name__ if isinstance(err, BaseException) else ""
    line = lines[-1] if lines[0].startswith("Traceback") else lines[0]
    return line if len(line) <= limit else line[: limit - 3] + "..."


class StopRequest:
    """Installs the handlers for the duration of a ``with`` block and restores the old ones after."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.signum: int | None = None
        self._deferred = 0
        self._force: list[Callable[[], Any]] = []
        self._old: dict[int, Any] = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def on_force(self, fn: Callable[[], Any]) -> None:
        """Run ``fn`` (best effort) before a forced exit on the second signal."""
        self._force.append(fn)

    def __enter__(self) -> "StopRequest":
        global _CURRENT
        if threading.current_thread() is threading.main_thread():
            for s in self.SIGNALS:
                self._old[s] = signal.signal(s, self._handle)
            _CURRENT = self
        return self

    def __exit__(self, *_: Any) -> None:
        global _CURRENT
        for s, old in self._old.items():
            signal.signal(s, old)
        self._old.clear()
        if _CURRENT is self:
            _CURRENT = None

    def reinstall(self) -> None:
        """Take the signals back after a library replaced the handlers (``ray.init`` installs a
        native SIGTERM handler that logs a stack trace and kills the driver)."""
        for s in self._old:
            signal.signal(s, self._handle)

    def _handle(self, signum: int, _frame: Any) -> None:
        if self.signum is not None:  # the second one: leave now
            print(f"\ndriver: {signal.Signals(signum).name} again: forcing exit", file=sys.stderr, flush=True)
            descendants = _descendants()  # listed first: once the Ray head dies its agents are reparented
            for fn in reversed(self._force):
                try:
                    fn()
                except Exception:
                    pass
            for p in descendants:  # the Ray head, its workers and agents, env servers and their pools
                try:
                    p.kill()
                except Exception:
                    pass
            os._exit(128 + signum)
        self.signum = signum
        print(f"\ndriver: {signal.Signals(signum).name} received: stopping the run "
              "(press Ctrl-C again to force)", file=sys.stderr, flush=True)
        if self._deferred == 0:
            raise RunInterrupted(signum)

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """A section a signal must not cut in two; :meth:`check` after it raises if one came."""
        self._deferred += 1
        try:
            yield
        finally:
            self._deferred -= 1

    def check(self) -> None:
        if self.signum is not None and self._deferred == 0:
            raise RunInterrupted(self.signum)


def _descendants() -> list[Any]:
    import psutil

    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:
        return []


_CURRENT: StopRequest | None = None


def poll() -> None:
    """Raise :class:`RunInterrupted` if a stop was requested (outside a deferred section). Blocking
    loops call it between waits, in case a library swallowed the exception the handler raised."""
    if _CURRENT is not None:
        _CURRENT.check()


def as_run_interrupted(exc: KeyboardInterrupt, stop: StopRequest) -> RunInterrupted:
    return exc if isinstance(exc, RunInterrupted) else RunInterrupted(stop.signum or signal.SIGINT)


class _NoStop(StopRequest):
    """What the engine uses when nobody installed handlers (tests, library calls)."""

    def __enter__(self) -> "StopRequest":
        return self

    def on_force(self, fn: Callable[[], Any]) -> None:
        pass

    def reinstall(self) -> None:
        pass


NO_STOP = _NoStop()
