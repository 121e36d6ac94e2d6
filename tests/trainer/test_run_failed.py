"""The line `driver run` prints when a run cannot go on (trainer/grpo/interrupt.py RunFailed,
trainer/run_command.py stopped_message): what happened, where the run stopped, where the rest is."""
import pytest

from trainer.config import load_config
from trainer.grpo.interrupt import RunFailed, first_line
from trainer.run_command import stopped_message


def test_the_line_of_a_traceback_is_its_exception():
    tb = 'Traceback (most recent call last):\n  File "x.py", line 1, in f\n    g()\nValueError: bad row 7\n'
    assert first_line(tb) == "ValueError: bad row 7"
    assert first_line("GenerationServerError: push failed\nmore") == "GenerationServerError: push failed"
    assert first_line(TimeoutError()) == "TimeoutError"
    assert len(first_line("x" * 1000)) == 400


def test_an_exception_inside_a_ray_actor_is_named_with_its_method():
    exceptions = pytest.importorskip("ray.exceptions")
    cause = ValueError("shapes (3,) and (4,) do not match")
    err = exceptions.RayTaskError("TrainerWorker.train_step", "Traceback (most recent call last):\n  ...\nValueError", cause)
    failed = RunFailed.of(err)
    assert str(failed) == "TrainerWorker.train_step raised ValueError: shapes (3,) and (4,) do not match"
    assert "ValueError" in failed.detail and failed.exit_code == 1


def test_the_closing_line_says_where_the_run_stopped_and_what_to_do(tmp_path):
    cfg = load_config("tiny", [f"logger.log_dir={tmp_path}"])
    failed = RunFailed("the generation server (envs model serve, pid 12) was killed by SIGKILL during the run")
    failed.error_log, failed.steps_done, failed.checkpoint_step, failed.checkpoint_written = \
        str(tmp_path / "error.log"), 7, 7, True
    line = stopped_message(failed, cfg)
    assert line == (f"the generation server (envs model serve, pid 12) was killed by SIGKILL during the run; stopped at "
                    f"step 7; full error: {tmp_path / 'error.log'}; final checkpoint written "
                    f"({tmp_path / 'checkpoints' / 'step_000007'}); fix the cause, then rerun the same command")
    failed = RunFailed("trainer.train_step did not answer within 600s (cluster.control_timeout_s)")
    assert stopped_message(failed, cfg).endswith("stopped before training started; no checkpoint yet: a rerun starts "
                                                 "from the beginning; fix the cause, then rerun the same command")
