"""What a sandbox's process tree used, read from ``/proc``, and the deadline that counts its own time.

A run's *own* time is wall time minus the time its processes sat runnable on a run queue while
other processes held the CPUs (``/proc/PID/task/TID/schedstat``, field 2). On a busy machine a
deadline in own time gives the run the time it was given, so whether it finished does not depend
on what else the machine was doing; a cap in wall time still ends it when the machine is too busy.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass


# Once the deadline has passed in wall time, how often a stretched run's own time is looked at.
_OWN_TIME_POLL_S = 0.05


async def run_out_own_time(exited: "asyncio.Future[None]", pid: int, start: float, timeout: float,
                           wall_stretch: float, cpu_s: float | None) -> tuple[float, float] | None:
    """Wait for the run to exit: None if it did within its time, else (own time, run-queue wait)
    when its time ran out. Its time is ``timeout`` of wall clock, or with ``wall_stretch`` > 1 of
    own time (wall minus run-queue wait) within ``timeout * wall_stretch`` of wall clock. A
    stretched run also stops once its whole tree used ``cpu_s`` of CPU: processes that keep each
    other waiting (self-made contention) would otherwise stretch their own deadline."""
    cap = max(timeout, 0.001) * max(wall_stretch, 1.0)
    wait, waited = max(timeout, 0.001), 0.0
    while True:
        try:
            await asyncio.wait_for(asyncio.shield(exited), timeout=wait)
            return None
        except asyncio.TimeoutError:
            pass
        elapsed = time.monotonic() - start
        used = tree_usage(pid) if wall_stretch > 1.0 else None
        waited = min(used.waited_s, elapsed) if used is not None else 0.0  # parallel processes' waits overlap
        own_left = timeout - (elapsed - waited)
        if (used is None or elapsed >= cap or own_left <= 0
                or (cpu_s is not None and used.cpu_s >= cpu_s)):
            return elapsed - waited, waited
        wait = min(max(own_left, _OWN_TIME_POLL_S), cap - elapsed)


@dataclass
class TreeUsage:
    cpu_s: float     # CPU of the tree, with what its processes already reaped
    waited_s: float  # run-queue wait: per process the most any of its threads waited, summed over processes


def tree_usage(root: int) -> TreeUsage:
    """What ``root`` and every live descendant used, from ``/proc`` (stat: utime + stime + cutime
    + cstime; schedstat: run_delay). Processes that are gone or unreadable count 0.

    The processes of a sandbox run one after another (launcher, namespace init, the program it
    execs), so their waits add up; threads of one process wait side by side, so only the most
    delayed one counts (summing them would let a program stretch its own deadline by starting
    threads that compete with each other)."""
    ticks, delay_ns, todo, seen = 0, 0, [root], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
            ticks += sum(int(f) for f in fields[11:15])  # stat fields 14-17, after the comm field
            most = 0
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children", "rb") as fh:
                    todo += [int(c) for c in fh.read().split()]
                try:
                    with open(f"/proc/{pid}/task/{task}/schedstat", "rb") as fh:
                        most = max(most, int(fh.read().split()[1]))
                except (OSError, ValueError, IndexError):
                    continue
            delay_ns += most
        except (OSError, ValueError, IndexError):
            continue
    return TreeUsage(cpu_s=ticks / _CLK_TCK, waited_s=delay_ns / 1e9)


def tree_cpu_s(root: int) -> float:
    """CPU seconds of ``root`` and every descendant, with what they already reaped (``/proc``:
    utime + stime + cutime + cstime). 0 for processes that are gone or unreadable."""
    return tree_usage(root).cpu_s


_CLK_TCK = os.sysconf("SC_CLK_TCK")
