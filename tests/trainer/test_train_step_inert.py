"""The train step leaves out samples whose loss terms are all zero (masked, or advantage 0 with no KL
term), and its gradient is still the full batch's: compared here with the loss computed over every
sample, the way the step did it before."""

from __future__ import annotations

import copy

import pytest
import torch

from trainer.config import load_config
from trainer.grpo.advantages import compute_advantages
from trainer.grpo.loss import LossInputs, clipped_pg_loss
from trainer.rollout.sample import Group, Ticket
from trainer.grpo.train_step import grpo_train_step
from trainer.logprobs import forward_logprobs
from trainer.policy import load_policy
from trainer.rollout.batch import BatchSettings, run_batch
from trainer.rollout.generator import SamplingParams, make_generator
from trainer.rollout.scoring import EnvInfo
from trainer.rollout.task import Routes, make_tasks

K = 4
ROWS = [{"responses_create_params": {"input": [{"role": "user", "content": f"{a} + {a} ="}]}} for a in range(4)]
# group 0 mixed, 1 all right, 2 all wrong, 3 mixed: half the samples have advantage 0
REWARDS = [1, 0, 1, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 1, 0, 0]


def _setup(overrides=()):
    cfg = load_config("tiny", ["policy.generation.max_new_tokens=5", "grpo.num_prompts_per_step=4",
                               f"grpo.num_generations_per_prompt={K}", "policy.train_micro_batch_size=3", *overrides])
    policy = load_policy(cfg, 1)
    tasks = make_tasks(ROWS, Routes(default_env="math"))
    per_task = run_batch(make_generator(policy), EnvInfo({}), tasks, K, SamplingParams.from_config(cfg.policy.generation),
                         BatchSettings.from_config(cfg), seed=0)
    samples = [s for group in per_task for s in group]
    for s, r in zip(samples, REWARDS):
        s.reward, s.env = float(r), "math"
    groups = [Group(Ticket(i, i, i), f"p{i}", 0, samples[K * i:K * (i + 1)]) for i in range(len(ROWS))]
    return cfg, policy, samples, groups


def _full_batch_grads(model, samples, cfg, pad_id):
    """Every sample through the model, one loss over the batch (global normalisers)."""
    rewards = torch.tensor([s.reward for s in samples])
    adv = compute_advantages(rewards, torch.arange(len(ROWS)).repeat_interleave(K),  # one group per row, in order
                             leave_one_out=cfg.grpo.use_leave_one_out_baseline, normalize=cfg.grpo.normalize_rewards)
    lp, _ = forward_logprobs(model, samples, cfg.policy.generation.temperature, pad_id)
    T = lp.shape[1]
    tm = torch.zeros(len(samples), T)
    lp_gen = torch.zeros(len(samples), T)
    for i, s in enumerate(samples):
        tm[i, :len(s.gen_ids)] = 1
        lp_gen[i, :len(s.gen_logprobs)] = torch.tensor(s.gen_logprobs)
    x = LossInputs(lp=lp, lp_old=lp.detach(), lp_gen=lp_gen, advantages=adv, token_mask=tm,
                   sample_mask=torch.ones(len(samples)))
    model.zero_grad(set_to_none=True)
    loss, _ = clipped_pg_loss(x, cfg.loss_fn, float(tm.sum()), float(len(samples)))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.policy.max_grad_norm)  # as the step does
    return [p.grad.clone() for p in model.parameters()]


def test_samples_with_advantage_zero_are_skipped_and_the_gradient_is_the_full_batchs():
    cfg, policy, samples, groups = _setup()
    pad = policy.tokenizer.pad_token_id
    reference = _full_batch_grads(copy.deepcopy(policy.model), samples, cfg, pad)
    model = copy.deepcopy(policy.model)
    m = grpo_train_step(model, torch.optim.SGD(model.parameters(), lr=0.0), groups, 0, cfg, pad)
    assert m["train/skipped_inert_frac"] == pytest.approx(0.5)  # the all-right and all-wrong groups
    for got, want in zip((p.grad for p in model.parameters()), reference):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-7)
    assert any(float(g.abs().sum()) > 0 for g in reference)  # the comparison is not between zeros


def test_with_a_kl_term_nothing_unmasked_is_skipped():
    cfg, policy, samples, groups = _setup(["loss_fn.reference_policy_kl_penalty=0.1"])
    from trainer.grpo.reference import ReferencePolicy

    model = copy.deepcopy(policy.model)
    m = grpo_train_step(model, torch.optim.SGD(model.parameters(), lr=0.01), groups, 0, cfg,
                        policy.tokenizer.pad_token_id, ReferencePolicy(policy.model))
    assert m["train/skipped_inert_frac"] == 0.0


def test_a_batch_with_nothing_to_learn_still_steps_the_optimizer():
    """All groups zero-variance: no forward pass, but Adam still moves on its momentum, as it did when
    the step back-propagated a zero loss."""
    cfg, policy, samples, groups = _setup()
    pad = policy.tokenizer.pad_token_id
    model = copy.deepcopy(policy.model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    grpo_train_step(model, opt, groups, 0, cfg, pad)  # builds momentum
    twin = copy.deepcopy(model)
    twin_opt = torch.optim.AdamW(twin.parameters(), lr=1e-3)
    twin_opt.load_state_dict(copy.deepcopy(opt.state_dict()))  # not shared moment tensors
    for s in samples:
        s.reward = 1.0
    before = [p.detach().clone() for p in model.parameters()]
    m = grpo_train_step(model, opt, groups, 1, cfg, pad)
    assert m["train/skipped_inert_frac"] == 1.0
    for p in twin.parameters():
        p.grad = torch.zeros_like(p)
    twin_opt.step()
    assert any(not torch.equal(a, b.detach()) for a, b in zip(before, model.parameters()))
    for a, b in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(a, b)
