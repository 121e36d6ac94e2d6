"""policy.device: the engine's policy (model, decode tensors, RNG, logprobs, loss) on one device.

``auto`` is CUDA when torch sees a GPU, else the CPU. The CPU checks always run; the GPU check runs
only where ``torch.cuda.is_available()`` (skipped with the reason otherwise)."""

from __future__ import annotations

import pytest
import torch

from trainer.config import load_config
from trainer.rollout.sample import Group, Ticket
from trainer.grpo.train_step import grpo_train_step
from trainer.policy import load_policy, resolve_device
from trainer.rollout.batch import BatchSettings, run_batch
from trainer.rollout.generator import SamplingParams, make_generator
from trainer.rollout.scoring import EnvInfo
from trainer.rollout.task import Routes, make_tasks

GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch on this machine")
ROWS = [{"responses_create_params": {"input": [{"role": "user", "content": f"{a}+{a}="}]}} for a in range(3)]
TASKS = make_tasks(ROWS, Routes(default_env="math"))


def test_auto_is_cuda_exactly_when_torch_sees_a_gpu():
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("cpu") == torch.device("cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: asking for one is not an error here")
def test_asking_for_cuda_without_a_gpu_says_what_to_do():
    with pytest.raises(ValueError, match=r"policy.device='cuda'.*policy.device=cpu"):
        resolve_device("cuda")


def test_a_bad_device_name_is_refused():
    with pytest.raises(ValueError, match="policy.device"):
        resolve_device("tpu")


def _rollout_and_train(device: str) -> tuple[object, dict]:
    cfg = load_config("tiny", [f"policy.device={device}", "policy.generation.max_new_tokens=6",
                               "grpo.num_prompts_per_step=3", "grpo.num_generations_per_prompt=2"])
    policy = load_policy(cfg, 1)
    samples = [s for g in run_batch(make_generator(policy), EnvInfo({}), TASKS, 2,
                                    SamplingParams.from_config(cfg.policy.generation), BatchSettings.from_config(cfg),
                                    seed=0) for s in g]
    for i, s in enumerate(samples):
        s.reward, s.env = float(i % 2), "math"
    groups = [Group(Ticket(i, i, i), f"p{i}", 0, samples[2 * i:2 * i + 2]) for i in range(3)]
    opt = torch.optim.SGD(policy.model.parameters(), lr=0.01)
    return policy, grpo_train_step(policy.model, opt, groups, 0, cfg, policy.tokenizer.pad_token_id)


def test_the_policy_rolls_out_and_trains_on_the_cpu():
    policy, m = _rollout_and_train("cpu")
    assert policy.device.type == "cpu" and next(policy.model.parameters()).device.type == "cpu"
    assert m["train/global_valid_seqs"] == 6


@GPU
def test_the_policy_rolls_out_and_trains_on_the_gpu():
    from trainer.logprobs import forward_logprobs

    policy, m = _rollout_and_train("cuda")
    assert policy.device.type == "cuda" and all(p.device.type == "cuda" for p in policy.model.parameters())
    assert m["train/global_valid_seqs"] == 6 and torch.isfinite(torch.tensor(m["train/loss"]))
    s = run_batch(make_generator(policy), EnvInfo({}), TASKS[:1], 1,
                  SamplingParams.from_config(load_config("tiny").policy.generation),
                  BatchSettings.from_config(load_config("tiny", ["policy.device=cuda"])), seed=0)[0][0]
    lp, _ = forward_logprobs(policy.model, [s], 1.0, policy.tokenizer.pad_token_id)
    assert lp.device.type == "cuda"  # the loss's logprobs are computed on the device
