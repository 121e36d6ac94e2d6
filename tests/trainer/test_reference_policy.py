"""The KL penalty acts: a frozen reference is taken when RL starts, the penalty is 0 while the policy
equals it and > 0 once the policy has moved, the reference stays frozen, and checkpoints carry it so a
resumed trainer penalises against the same weights. Real train steps of the tiny policy, no Ray."""
import uuid

import pytest
import torch

from trainer.config import load_config
from trainer.rollout.sample import Ticket
from trainer.grpo.synthetic import arithmetic_tasks
from trainer.grpo.train_step import grpo_train_step
from trainer.grpo.weight_sync import SharedMemoryTransport
from trainer.grpo.workers import GeneratorWorker, TrainerWorker


def _setup(beta):
    cfg = load_config("tiny", ["policy.warm_start.enabled=false", "policy.generation.max_new_tokens=8",
                               "grpo.num_prompts_per_step=2", "grpo.num_generations_per_prompt=4",
                               "policy.optimizer.kwargs.lr=0.02", f"loss_fn.reference_policy_kl_penalty={beta}"])
    transport = SharedMemoryTransport(uuid.uuid4().hex[:8])
    trainer = TrainerWorker(cfg, transport)
    gen = GeneratorWorker(cfg, 0, arithmetic_tasks(4, 0), buffer=None, reward=None, transport=transport)
    gen.receive_weights(0, trainer.publish_weights(0))
    gen.generator.load_received_weights()
    groups = gen.generate([Ticket(slot=i, prompt_index=i, seed=10 + i) for i in range(2)])
    for g in groups:  # every group has reward signal
        for j, s in enumerate(g.samples):
            s.reward, s.env = float(j % 2), "math"
    return trainer, groups, transport


def test_kl_is_zero_at_the_reference_then_positive_and_the_reference_stays_frozen(tmp_path):
    trainer, groups, transport = _setup(0.1)
    try:
        m0 = trainer.train_step(groups, 0)
        assert trainer.reference is not None and m0["train/kl_penalty"] == 0.0
        ref0 = {k: v.clone() for k, v in trainer.reference.model.state_dict().items()}
        m1 = trainer.train_step(groups, 1)
        m2 = trainer.train_step(groups, 2)
        assert m1["train/kl_penalty"] > 0 and m2["train/kl_penalty"] > 0
        assert all(torch.equal(v, ref0[k]) for k, v in trainer.reference.model.state_dict().items())
        assert any(not torch.equal(v, ref0[k]) for k, v in trainer.policy.model.state_dict().items())

        trainer.save(str(tmp_path))
        assert (tmp_path / "reference.safetensors").exists()
        resumed, _, t2 = _setup(0.1)
        try:
            resumed.load(str(tmp_path), 3)
            assert all(torch.equal(v, ref0[k]) for k, v in resumed.reference.model.state_dict().items())
        finally:
            t2.close()
    finally:
        transport.close()


def test_no_reference_means_no_kl_and_a_penalty_without_one_is_an_error():
    trainer, groups, transport = _setup(0.0)
    try:
        m = trainer.train_step(groups, 0)
        assert trainer.reference is None and m["train/kl_penalty"] == 0.0
        cfg = load_config("tiny", ["loss_fn.reference_policy_kl_penalty=0.1"])
        with pytest.raises(ValueError, match="needs a reference policy"):
            grpo_train_step(trainer.policy.model, trainer.optimizer, groups, 1, cfg, trainer.pad_id, None)
    finally:
        transport.close()
