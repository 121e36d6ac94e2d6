"""Submit a job script: Slurm (``sbatch``) or this machine (``local``); attached or detached.

Attached (``--run PROFILE``): submit, print the job id and the log path, stream the log to the
terminal while the job runs, and return the job's exit status. Ctrl-C or SIGTERM cancels the job
(``scancel``; locally SIGTERM to the job script, whose trap stops the trainer, then the servers,
then Ray, in that order), keeps streaming while it stops, and a second one stops waiting. A local
attached job also ends when the driver dies without cancelling it (SIGKILL, a crash): its script
gets SIGTERM from the kernel (trainer/child_servers.py), so it leaves no Ray or servers behind.
Detached (``--batch PROFILE``): submit, print the job id and where the log goes, return 0; a local
detached job outlives the driver on purpose.

Logs: ``<job_dir>/slurm-<jobid>.log`` on Slurm, ``<job_dir>/local-<time>.log`` locally.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable

from trainer.child_servers import ending_with_this_process
from trainer.launch.job_script import JobSpec, render_job_script
from trainer.launch.profiles import LocalProfile, SlurmProfile, WandbSettings

TERMINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
                   "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT", "REVOKED"}


class LaunchError(RuntimeError):
    pass


@dataclass
class Submission:
    job_id: str
    log_path: Path
    script_path: Path
    executor: str
    process: subprocess.Popen | None = None  # the local executor's bash
    extra_logs: tuple[Path, ...] = ()        # streamed too (NeMo-RL's ray.sub writes the driver's own log)


def write_job_script(profile: LocalProfile | SlurmProfile, job: JobSpec, *, attached: bool,
                     wandb: WandbSettings | None = None) -> Path:
    job.job_dir.mkdir(parents=True, exist_ok=True)
    job.script_path.write_text(render_job_script(profile, job, attached=attached, wandb=wandb))
    job.script_path.chmod(0o755)
    return job.script_path


def _sbatch(script: Path) -> str:
    if not shutil.which("sbatch"):
        raise LaunchError("sbatch not found: this profile needs a Slurm login node "
                          "(for a one-machine test cluster: eval \"$(bash scripts/ci_slurm.sh)\")")
    done = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True)
    if done.returncode != 0:
        raise LaunchError(f"sbatch {script} failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout.strip().split(";")[0]


def submit_script(profile: LocalProfile | SlurmProfile, job: JobSpec, *, attached: bool = False) -> Submission:
    """Submit; a local job runs in its own session (a Ctrl-C in the terminal reaches the driver, which
    cancels the job in order), and when ``attached`` it gets SIGTERM if the driver dies first."""
    script = job.script_path
    if isinstance(profile, SlurmProfile):
        job_id = _sbatch(script)
        return Submission(job_id, job.job_dir / f"slurm-{job_id}.log", script, "slurm")
    log = job.job_dir / f"local-{time.strftime('%Y%m%d-%H%M%S')}.log"
    argv = ["bash", str(script)]
    with open(log, "ab") as out:
        proc = subprocess.Popen(ending_with_this_process(argv) if attached else argv, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=job.workdir, start_new_session=True)
    return Submission(f"local-{proc.pid}", log, script, "local", proc)


def slurm_job_state(job_id: str) -> tuple[str, int | None]:
    """``(state, exit status)`` from ``scontrol show job`` (status None until the job ended); from
    ``sacct`` once slurmctld has forgotten the job (MinJobAge), where accounting is on."""
    done = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True)
    if done.returncode == 0:
        state = re.search(r"\bJobState=(\S+)", done.stdout)
        code = re.search(r"\bExitCode=(\d+):(\d+)", done.stdout)
    else:
        acct = subprocess.run(["sacct", "-j", job_id, "-n", "-X", "-P", "-o", "State,ExitCode"],
                              capture_output=True, text=True) if shutil.which("sacct") else None
        line = acct.stdout.strip().splitlines()[0] if acct and acct.returncode == 0 and acct.stdout.strip() else ""
        if not line:
            raise LaunchError(f"job {job_id} is unknown to scontrol ({done.stderr.strip()}) and to sacct")
        state = re.match(r"(\w+)", line)
        code = re.search(r"\|(\d+):(\d+)", line)
    name = state.group(1) if state else "UNKNOWN"
    if name not in TERMINAL_STATES:
        return name, None
    rc, sig = (int(code.group(1)), int(code.group(2))) if code else (1, 0)
    status = rc or (128 + sig if sig else 0)
    return name, (status if status or name == "COMPLETED" else 1)


class _LogFollower:
    """Copy what the job appended to its log since the last call."""

    def __init__(self, path: Path, out: IO[str]):
        self.path, self.out, self.pos = path, out, 0

    def pump(self) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.pos)
                chunk = f.read()
        except FileNotFoundError:
            return
        if chunk:
            self.pos += len(chunk)
            self.out.write(chunk.decode(errors="replace"))
            self.out.flush()


def follow(sub: Submission, out: IO[str] | None = None, poll_s: float = 0.5) -> int:
    """Stream the job's log until it ends; return its exit status."""
    out = out or sys.stdout
    followers = [_LogFollower(path, out) for path in (sub.log_path, *sub.extra_logs)]
    status_of: Callable[[], int | None]
    if sub.process is not None:
        status_of = sub.process.poll
    else:
        seen = [""]

        def slurm_status() -> int | None:  # and say when the job's state changes (PENDING -> RUNNING ...)
            state, status = slurm_job_state(sub.job_id)
            if state != seen[0]:
                seen[0] = state
                print(f"[driver] job {sub.job_id}: {state}", file=out, flush=True)
            return status

        status_of = slurm_status
    def sigterm_as_ctrl_c(_sig: int, _frame: object) -> None:
        raise KeyboardInterrupt

    old_term = signal.signal(signal.SIGTERM, sigterm_as_ctrl_c) if threading.current_thread() is threading.main_thread() else None
    try:
        return _follow(sub, out, poll_s, followers, status_of)
    finally:
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)


def _follow(sub: Submission, out: IO[str], poll_s: float, followers: list["_LogFollower"],
            status_of: Callable[[], int | None]) -> int:
    cancelled = False
    while True:
        try:
            for follower in followers:
                follower.pump()
            status = status_of()
            if status is not None:
                time.sleep(poll_s)  # the last lines land after the state changes
                for follower in followers:
                    follower.pump()
                return status
            time.sleep(poll_s)
        except KeyboardInterrupt:
            if cancelled:
                print(f"\ndriver: stopped waiting; job {sub.job_id} may still be stopping (log: {sub.log_path})",
                      file=sys.stderr)
                return 130
            cancelled = True
            print(f"\ndriver: cancelling job {sub.job_id} (Ctrl-C again to stop waiting); "
                  "use --batch to leave a job running", file=sys.stderr, flush=True)
            cancel(sub)


def cancel(sub: Submission) -> None:
    if sub.process is not None:  # the script alone: its trap stops the trainer first (it checkpoints), Ray last
        try:
            sub.process.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
    else:
        subprocess.run(["scancel", sub.job_id], check=False)


def launch(profile: LocalProfile | SlurmProfile, job: JobSpec, *, attached: bool,
           wandb: WandbSettings | None = None, out: IO[str] | None = None) -> int:
    """Write the job script, submit it; attached: stream and return the job's status, else 0."""
    out = out or sys.stdout
    write_job_script(profile, job, attached=attached, wandb=wandb)
    sub = submit_script(profile, job, attached=attached)
    where = "Slurm job" if sub.executor == "slurm" else "local job (pid " + sub.job_id.split("-", 1)[1] + ")"
    print(f"submitted {where} {sub.job_id}\n  script: {sub.script_path}\n  log:    {sub.log_path}", file=out, flush=True)
    if not attached:
        watch = f"squeue -j {sub.job_id}; tail -f {sub.log_path}" if sub.executor == "slurm" else f"tail -f {sub.log_path}"
        print(f"  follow: {watch}", file=out, flush=True)
        return 0
    status = follow(sub, out)
    print(f"job {sub.job_id} finished with exit status {status} (log: {sub.log_path})", file=out, flush=True)
    return status
