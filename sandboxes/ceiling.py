"""The one limit policy of every backend: never ask the kernel for more than was inherited.

A sandbox applies its per-run limits with ``prlimit`` (process, apptainer, container) or
``setrlimit`` (the process backend's zygote children) *after* every capability is gone,
so a hard limit can only be lowered there. Asking for more than the hard limit the
server (or the container) inherited fails every run with EPERM ("prlimit: failed to set
the NPROC resource limit: Operation not permitted": the old zygote ceiling of 4,096
processes under a Slurm/container ``nproc=1024``).

So every backend holds a :class:`Ceiling` — the hard limits its sandboxes inherit — and
every run's :class:`~sandboxes.base.Limits` go through :meth:`Ceiling.clamp` before any
rlimit is derived from them (:meth:`Ceiling.rlimits`). Environments report the clamped
limits at start and on ``/info``; :meth:`Ceiling.shortfalls` names the inherited limits
under which no sandboxed run can work at all (``/health`` then answers 503 with them).
"""

from __future__ import annotations

import math
import resource
from dataclasses import dataclass, field, replace
from typing import Mapping

from .base import Limits

MIB = 1 << 20
# Processes of the sandbox's uid that are not the program: the exec path's pid-1 shell and
# a helper; the zygote path's zygote and the harness/child it forks.
LAUNCHER_PROCS = 2

# The rlimits the policy manages, by the names prlimit uses.
RLIMITS: dict[str, int] = {"nproc": resource.RLIMIT_NPROC, "nofile": resource.RLIMIT_NOFILE,
                           "as": resource.RLIMIT_AS, "cpu": resource.RLIMIT_CPU, "fsize": resource.RLIMIT_FSIZE}
# What one sandboxed run needs at the very least (below it every run fails, whatever the
# program): the launcher processes plus the program and one child of it (the code
# harness forks the program); descriptors for the interpreter, its pipes and imports; an
# address space that holds a Python interpreter and the standard library; one CPU second
# past the soft limit; a file of a few KiB (bytecode-free imports write nothing, but a
# test's output file does).
RUN_MINIMUM: dict[str, int] = {"nproc": LAUNCHER_PROCS + 2, "nofile": 32, "as": 256 * MIB, "cpu": 2,
                               "fsize": 1 * MIB}
# How to raise each one, for the message that says a limit is too low.
_HOW_TO_RAISE = {"nproc": "ulimit -u / prlimit --nproc / podman --ulimit nproc=N:N / Slurm's PropagateResourceLimits",
                 "nofile": "ulimit -n / prlimit --nofile / podman --ulimit nofile=N:N",
                 "as": "ulimit -v / prlimit --as (or drop the limit: the sandbox sets its own per run)",
                 "cpu": "ulimit -t / prlimit --cpu (the server itself also dies at this limit)",
                 "fsize": "ulimit -f / prlimit --fsize"}


def _fmt(name: str, value: int | None) -> str:
    if value is None:
        return "unlimited"
    if name in ("as", "fsize"):
        return f"{value / MIB:g} MiB"
    return f"{value} s" if name == "cpu" else str(value)


@dataclass(frozen=True)
class Ceiling:
    """Hard limits a backend's sandboxes inherit, by rlimit name; None = unlimited."""

    hard: Mapping[str, int | None] = field(default_factory=dict)
    source: str = "unlimited"

    @classmethod
    def inherited(cls) -> "Ceiling":
        """The hard limits of this process (what bwrap/apptainer and everything below inherit)."""
        hard = {}
        for name, res in RLIMITS.items():
            value = resource.getrlimit(res)[1]
            hard[name] = None if value == resource.RLIM_INFINITY else int(value)
        return cls(hard, "inherited by the server process")

    def of(self, name: str) -> int | None:
        return self.hard.get(name)

    def lowered(self, source: str, **caps: int) -> "Ceiling":
        """This ceiling with some limits set lower still (a container's own ulimits)."""
        hard = dict(self.hard)
        for name, value in caps.items():
            mine = hard.get(name)
            hard[name] = value if mine is None else min(mine, value)
        return Ceiling(hard, source)

    def clamp(self, limits: Limits) -> Limits:
        """``limits`` with every field lowered to what the inherited hard limits allow."""
        changes: dict[str, float | int] = {}
        cpu = self.of("cpu")
        if cpu is not None and limits.cpu_s > cpu - 1:  # the hard CPU limit is the soft one + 1 s
            changes["cpu_s"] = float(max(cpu - 1, 1))
        as_ = self.of("as")
        if as_ is not None and limits.memory_mb * MIB > as_:
            changes["memory_mb"] = as_ // MIB
        nproc = self.of("nproc")
        if nproc is not None and limits.max_processes + LAUNCHER_PROCS > nproc:
            changes["max_processes"] = max(nproc - LAUNCHER_PROCS, 1)
        fsize = self.of("fsize")
        if fsize is not None and limits.max_file_mb * MIB > fsize:
            changes["max_file_mb"] = fsize // MIB
        nofile = self.of("nofile")
        if nofile is not None and limits.max_open_files > nofile:
            changes["max_open_files"] = nofile
        return replace(limits, **changes) if changes else limits

    def rlimits(self, limits: Limits) -> dict[str, tuple[int, int]]:
        """(soft, hard) per rlimit for one run of ``limits``, never above the ceiling."""
        lim = self.clamp(limits)
        cpu_soft = max(1, math.ceil(lim.cpu_s))
        wanted = {"cpu": (cpu_soft, cpu_soft + 1), "as": (lim.memory_mb * MIB,) * 2,
                  "nproc": (lim.max_processes + LAUNCHER_PROCS,) * 2, "fsize": (lim.max_file_mb * MIB,) * 2,
                  "nofile": (lim.max_open_files,) * 2}
        out = {}
        for name, (soft, hard) in wanted.items():
            cap = self.of(name)
            if cap is not None:
                hard = min(hard, cap)
                soft = min(soft, hard)
            out[name] = (soft, hard)
        return out

    def clamped(self, limits: Limits) -> dict[str, dict[str, float | int]]:
        """The fields :meth:`clamp` lowers: ``{field: {"asked": a, "effective": e}}``."""
        eff = self.clamp(limits)
        return {name: {"asked": getattr(limits, name), "effective": getattr(eff, name)}
                for name in ("cpu_s", "memory_mb", "max_processes", "max_file_mb", "max_open_files")
                if getattr(limits, name) != getattr(eff, name)}

    def shortfalls(self) -> list[str]:
        """One sentence per inherited limit under which no sandboxed run can work."""
        out = []
        for name, need in RUN_MINIMUM.items():
            have = self.of(name)
            if have is not None and have < need:
                out.append(f"the hard RLIMIT_{name.upper()} {self.source} is {_fmt(name, have)}, below the "
                           f"{_fmt(name, need)} one sandboxed run needs; raise it ({_HOW_TO_RAISE[name]})")
        return out

    def describe(self) -> dict[str, object]:
        return {"source": self.source, **{name: self.of(name) for name in RLIMITS}}


def effective_limits(limits: Limits, ceiling: Ceiling) -> dict[str, object]:
    """What ``/info`` and the start-up log show for one kind of run."""
    eff = ceiling.clamp(limits)
    return {"cpu_s": eff.cpu_s, "memory_mb": eff.memory_mb, "max_processes": eff.max_processes,
            "max_file_mb": eff.max_file_mb, "max_open_files": eff.max_open_files,
            "wall_s": eff.wall_s, "max_output_bytes": eff.max_output_bytes}
