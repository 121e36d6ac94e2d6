"""Turn a launcher's raw outcome into an :class:`ExecResult` with a resource verdict."""

from __future__ import annotations

import re
import signal

from .base import ExecResult, Limits, ResourceVerdict
from .runner import RawOutcome

# How out-of-memory surfaces under an address-space limit: Python's MemoryError (numpy's
# _ArrayMemoryError is a subclass, its name ends the same), C++ bad_alloc, glibc/shell ENOMEM
# messages. Only consulted when the program already failed, so printing these words can make
# a verdict worse, never turn a failure into a pass.
_OOM_MARKERS = re.compile(
    rb"MemoryError|std::bad_alloc|Cannot allocate memory|out of memory|failed to map segment",
    re.IGNORECASE)
_OOM_TAIL_BYTES = 4096


def _signal_of(exit_code: int | None) -> int | None:
    """Launchers (bwrap's init, sh, apptainer) report death-by-signal N as exit code 128+N."""
    if exit_code is None or exit_code <= 128:
        return None
    sig = exit_code - 128
    valid = {s.value for s in signal.Signals}
    return sig if sig in valid else None


def classify(raw: RawOutcome, limits: Limits) -> ExecResult:
    exit_code = raw.exit_code
    sig = raw.term_signal or _signal_of(exit_code)
    if sig is not None:
        exit_code = None

    if raw.output_limited:
        verdict = ResourceVerdict.OUTPUT_LIMIT
        exit_code = None
    elif raw.timed_out:
        verdict = ResourceVerdict.TIMEOUT
        exit_code = None
    elif sig == signal.SIGXCPU or (sig == signal.SIGKILL and raw.cpu_s >= 0.9 * limits.cpu_s):
        # RLIMIT_CPU: SIGXCPU at the soft limit, SIGKILL at the hard one (soft + 1 s).
        verdict = ResourceVerdict.CPU_LIMIT
    elif sig is not None:
        verdict = ResourceVerdict.SIGNALED
    elif exit_code not in (0, None) and _OOM_MARKERS.search(raw.stderr[-_OOM_TAIL_BYTES:]):
        verdict = ResourceVerdict.MEMORY_LIMIT
    else:
        verdict = ResourceVerdict.OK

    return ExecResult(exit_code=exit_code, stdout=raw.stdout, stderr=raw.stderr,
                      wall_s=round(raw.wall_s, 6), cpu_s=round(raw.cpu_s, 6), verdict=verdict,
                      stdout_truncated=raw.stdout_truncated, stderr_truncated=raw.stderr_truncated,
                      own_s=None if raw.own_s is None else round(raw.own_s, 6), waited_s=round(raw.waited_s, 6))
