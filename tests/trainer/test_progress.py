"""Progress outside a terminal (issue 29): a Slurm job log got a `\\r` bar refresh per update
(thousands of lines per run); there every bar of the trainer is one compact line every
VERIGYM_PROGRESS_EVERY_S seconds and one at the end. In a terminal it stays tqdm's bar."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

from trainer.progress import LineProgress, progress

REPO = Path(__file__).resolve().parents[2]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_outside_a_terminal_a_line_every_interval_and_one_at_the_end():
    out, clock = io.StringIO(), Clock()
    bar = LineProgress(600, desc="GRPO", unit="step", stream=out, every_s=30, clock=clock)
    for step in range(1, 121):  # 120 steps at 2 s each: 240 s
        clock.now = 2.0 * step
        bar.set_postfix(reward=f"{step / 200:.2f}", refresh=False)  # as the GRPO loop: postfix, then update
        bar.update(1)
    bar.close()
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    assert len(lines) == 8  # at 30, 60, ..., 240 s (the last is also the end: not repeated)
    assert lines[0] == "GRPO: 15/600 steps (2%), 0.5 steps/s, 30s elapsed, eta 19m30s, reward=0.07"
    assert lines[-1] == "GRPO: 120/600 steps (20%), 0.5 steps/s, 4m00s elapsed, eta 16m00s, reward=0.60"


def test_a_resumed_bar_counts_its_rate_from_where_it_resumed_and_slow_steps_read_as_seconds_per_step():
    out, clock = io.StringIO(), Clock()
    bar = LineProgress(10, desc="warm start", unit="step", initial=4, stream=out, every_s=30, clock=clock)
    clock.now = 40.0
    bar.update(2)
    bar.close()
    assert out.getvalue().splitlines() == ["warm start: 6/10 steps (60%), 20 s/step, 40s elapsed, eta 1m20s"]


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_helper_picks_tqdm_in_a_terminal_lines_elsewhere_and_nothing_when_off():
    from tqdm import tqdm

    bar = progress(3, desc="rollouts", unit="rollout", stream=Tty())
    assert isinstance(bar, tqdm)
    bar.close()
    assert isinstance(progress(3, desc="rollouts", unit="rollout", stream=io.StringIO()), LineProgress)
    quiet = io.StringIO()
    with progress(3, desc="rollouts", unit="rollout", enabled=False, stream=quiet) as off:
        off.update(3)
    assert off.n == 3 and quiet.getvalue() == ""


def test_data_prep_in_a_log_file_writes_lines_not_carriage_returns(tmp_path):
    log = tmp_path / "job.log"
    with open(log, "w") as fh:  # a file, as a Slurm job's output is
        done = subprocess.run([sys.executable, "-m", "trainer.cli", "data", "prep", "--blend", "tiny", "--output",
                               str(tmp_path / "data")], cwd=REPO, stdout=fh, stderr=subprocess.STDOUT,
                              env={**os.environ, "VERIGYM_PROGRESS_EVERY_S": "0"}, timeout=300)
    text = log.read_text()
    assert done.returncode == 0, text[-2000:]
    assert "\r" not in text
    assert any(line.startswith("validate: ") and " rows (100%)" in line for line in text.splitlines()), text
