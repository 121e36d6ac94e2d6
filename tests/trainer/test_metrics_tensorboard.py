"""logger.tensorboard_enabled writes TensorBoard event files (tensorboard comes with the train extra)."""

from __future__ import annotations

from trainer.grpo.metrics import MetricsLogger


def test_tensorboard_scalars_are_written_and_read_back(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logger = MetricsLogger(tmp_path, tensorboard_enabled=True)
    logger.log({"train/reward": 0.25, "note": "text is not a scalar"}, step=1)
    logger.log({"train/reward": 0.75}, step=2)
    logger._tb.flush()
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("train/reward")] == [(1, 0.25), (2, 0.75)]
    assert "note" not in events.Tags()["scalars"]
