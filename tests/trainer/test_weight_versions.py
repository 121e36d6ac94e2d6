"""The weight version has one source of truth (the driver's trained-step count); every copy of it
(trainer, generators, replay buffer) is compared with it and a disagreement stops the run."""

import pytest

from trainer.grpo.replay_buffer import ReplayBuffer
from trainer.rollout.sample import Group
from trainer.grpo.versions import WeightVersionMismatch, check_versions


def test_agreeing_copies_give_metrics_and_generators_may_lag():
    m = check_versions(3, trainer=3, buffer_trained=3, generators=[3, 2])
    assert m == {"weights/version": 3.0, "weights/generator_version_min": 2.0, "weights/generator_lag_max": 1.0}


@pytest.mark.parametrize("kw, says", [
    (dict(trainer=2, buffer_trained=3, generators=[3]), "trainer's weights are at version 2"),
    (dict(trainer=3, buffer_trained=4, generators=[3]), "handed out 4 batches"),
    (dict(trainer=3, buffer_trained=3, generators=[3, 4]), "generator(s) 1 at version 4"),
])
def test_a_disagreeing_copy_stops_the_run_naming_it(kw, says):
    with pytest.raises(WeightVersionMismatch, match=r"after 3 trained steps") as err:
        check_versions(3, **kw)
    assert says in str(err.value)


def _fill(buffer: ReplayBuffer, version: int) -> None:
    buffer.put([Group(t, str(t.prompt_index), version) for t in buffer.admit(version, 2)])


def test_the_buffer_refuses_a_step_it_is_not_at():
    buffer = ReplayBuffer([f"p{i}" for i in range(8)], num_prompts_per_step=2, max_age=1, max_num_steps=4, seed=0)
    _fill(buffer, 0)
    with pytest.raises(WeightVersionMismatch, match="step 1, but the buffer has handed out 0"):
        buffer.take(1)
    assert buffer.take(0) is not None and buffer.trained_version() == 1
    with pytest.raises(WeightVersionMismatch, match="step 0, but the buffer has handed out 1"):
        buffer.take(0)  # the same batch twice
    assert buffer.stats()["trained_version"] == 1
