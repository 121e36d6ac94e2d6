"""Admission control, stale-group dropping and checkpoint state of the collector's buffer."""
from trainer.grpo.replay_buffer import ReplayBuffer
from trainer.rollout.sample import Group, Sample


def finish(buf, tickets, version):
    buf.put([Group(ticket=t, task_id=buf.prompt_ids[t.prompt_index], start_version=version,
                   samples=[Sample([1], [2], [-0.1], [version], False)]) for t in tickets])


def test_admission_bounds_lag_by_slot_step():
    buf = ReplayBuffer([f"p{i}" for i in range(100)], num_prompts_per_step=2, max_age=1, max_num_steps=10, shuffle=False)
    # a generator at version 0 may fill steps 0 and 1 (lag <= 1), not step 2
    t = buf.admit(0, 10)
    assert [x.slot for x in t] == [0, 1, 2, 3] and [x.prompt_index for x in t] == [0, 1, 2, 3]
    assert buf.admit(0, 10) == []
    assert [x.slot for x in buf.admit(1, 10)] == [4, 5]


def test_sync_schedule_is_max_age_zero():
    buf = ReplayBuffer([f"p{i}" for i in range(10)], 2, max_age=0, max_num_steps=5, shuffle=False)
    t0 = buf.admit(0, 10)
    assert len(t0) == 2 and buf.admit(0, 10) == []
    assert not buf.ready(0) and buf.take(0) is None  # no partial batches
    finish(buf, t0[:1], 0)
    assert not buf.ready(0) and buf.take(0) is None
    finish(buf, t0[1:], 0)
    assert buf.ready(0) and buf.ready(0)  # asking takes nothing: the driver asks, the trainer takes
    assert [g.task_id for g in buf.take(0)] == ["p0", "p1"] and not buf.ready(1)
    assert len(buf.admit(1, 10)) == 2


def test_stale_group_dropped_counted_and_requeued_not_lost():
    buf2 = ReplayBuffer([f"p{i}" for i in range(10)], 2, max_age=0, max_num_steps=5, shuffle=False)
    a = buf2.admit(0, 2)
    finish(buf2, a, 0)
    buf2.done[0].start_version = -1  # a group that slipped through with lag 1 > max age 0
    assert not buf2.ready(0) and buf2.take(0) is None and buf2.dropped == 1
    again = buf2.admit(0, 2)
    assert [(x.slot, x.prompt_index) for x in again] == [(0, 0)]  # same slot, same prompt, re-generated
    finish(buf2, again, 0)
    assert [g.task_id for g in buf2.take(0)] == ["p0", "p1"]


def test_checkpoint_state_requeues_in_flight_in_order():
    ids = [f"p{i}" for i in range(20)]
    buf = ReplayBuffer(ids, 2, max_age=2, max_num_steps=8, seed=3)
    t = buf.admit(0, 6)
    finish(buf, t[:2], 0)
    first = [g.task_id for g in buf.take(0)]
    state = buf.state_dict()
    assert state["consumed"] == first and len(state["in_flight_prompts"]) == 4
    # an uninterrupted buffer and a restored one train the same prompt sequence
    fresh = ReplayBuffer(ids, 2, max_age=2, max_num_steps=8, seed=3)
    fresh.load_state_dict(state)
    resumed = fresh.admit(1, 4)
    assert [x.slot for x in resumed] == [2, 3, 4, 5]
    assert [x.prompt_index for x in resumed] == [x.prompt_index for x in t[2:]]


def test_epochs_continue_and_stop_at_max_steps():
    buf = ReplayBuffer(["a", "b", "c"], 2, max_age=5, max_num_steps=3, shuffle=True, seed=1)
    t = buf.admit(5, 100)
    assert len(t) == 6  # 3 steps x 2 prompts, across two epochs
    assert sorted(x.prompt_index for x in t[:3]) == [0, 1, 2]
