"""policy.scheduler (NeMo-RL's list format) built with torch, checked at config time, checkpointed."""

import pytest
import torch

from trainer.config import ConfigError, load_config
from trainer.grpo.lr_schedule import build_scheduler

WARMUP_DECAY = ("policy.scheduler=[{name: torch.optim.lr_scheduler.LinearLR, kwargs: {start_factor: 0.5, end_factor: 1.0, "
                "total_iters: 2}}, {name: torch.optim.lr_scheduler.LinearLR, kwargs: {start_factor: 1.0, end_factor: 0.0, "
                "total_iters: 4}}, {milestones: [2]}]")


def _lrs(entries, steps):
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = build_scheduler(opt, entries)
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def test_warmup_then_linear_decay_by_hand():
    cfg = load_config("tiny", [WARMUP_DECAY])
    # warm-up 0.5 -> 0.75 over 2 steps, then 1.0 decaying by 0.25 per step to 0
    assert _lrs(cfg.policy.scheduler, 7) == pytest.approx([0.5, 0.75, 1.0, 0.75, 0.5, 0.25, 0.0])
    assert build_scheduler(torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0), None) is None


@pytest.mark.parametrize("bad, match", [
    ("[{name: torch.optim.lr_scheduler.Nope}]", "one of"),
    ("[{name: torch.optim.lr_scheduler.LinearLR}, {name: torch.optim.lr_scheduler.ConstantLR}]", "milestones"),
    ("[{name: torch.optim.lr_scheduler.LinearLR}, {name: torch.optim.lr_scheduler.ConstantLR}, {milestones: [1, 2]}]",
     "1 milestone"),
    ("[{name: torch.optim.lr_scheduler.LinearLR, extra: 1}]", "expected"),
])
def test_bad_schedules_fail_at_config_time(bad, match):
    with pytest.raises(ConfigError, match=match):
        load_config("tiny", [f"policy.scheduler={bad}"])


def test_trainer_steps_saves_and_restores_the_schedule(tmp_path):
    from trainer.grpo.weight_sync import make_transport
    from trainer.grpo.workers import TrainerWorker

    cfg = load_config("tiny", [WARMUP_DECAY, "policy.hf_config_overrides={num_hidden_layers: 1, hidden_size: 32, "
                               "intermediate_size: 64, num_attention_heads: 2, num_key_value_heads: 1}"])
    transport = make_transport("ray", "t", False)
    worker = TrainerWorker(cfg, transport)
    for _ in range(3):
        worker.optimizer.step()
        worker.scheduler.step()
    worker.save(str(tmp_path / "ck"))
    assert (tmp_path / "ck" / "scheduler.pt").exists()
    fresh = TrainerWorker(cfg, transport)
    fresh.load(str(tmp_path / "ck"), 3)
    assert fresh.optimizer.param_groups[0]["lr"] == pytest.approx(worker.optimizer.param_groups[0]["lr"])
    (tmp_path / "ck" / "scheduler.pt").unlink()  # an older checkpoint: fast-forward by the step count
    older = TrainerWorker(cfg, transport)
    older.load(str(tmp_path / "ck"), 3)
    assert older.optimizer.param_groups[0]["lr"] == pytest.approx(worker.optimizer.param_groups[0]["lr"])
