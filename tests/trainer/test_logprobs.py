"""trainer.logprobs.forward_logprobs is the one logprob computation: the decode loop's recorded
logprobs, compute_logprobs, the reference and the loss all agree with it; its tensors live on the
model's device (checked on CPU with device='cpu' given explicitly: no GPU on the test machine)."""

from __future__ import annotations

import pytest
import torch

from trainer.generation import SamplingParams, compute_logprobs, decode_batch
from trainer.grpo.reference import ReferencePolicy
from trainer.grpo.replay_buffer import Sample
from trainer.logprobs import forward_logprobs, model_device
from trainer.policy import Policy, PolicyConfig


@pytest.fixture(scope="module")
def policy() -> Policy:
    return Policy.load(PolicyConfig(model_name="tiny", seed=3))


def _samples(policy: Policy) -> list[Sample]:
    prompts = [policy.encode("1+2="), policy.encode("a longer prompt: 7+8=")]
    gens = decode_batch(policy, prompts, [SamplingParams(temperature=1.0, max_new_tokens=6)] * 2,
                        rng=torch.Generator().manual_seed(0))
    return [Sample(list(g.prompt_ids), list(g.token_ids), list(g.logprobs), list(g.versions), g.truncated) for g in gens]


def test_one_computation_for_decode_loss_reference_and_compute_logprobs(policy):
    samples = _samples(policy)
    policy.model.to("cpu")
    lp, ent = forward_logprobs(policy.model, samples, 1.0, policy.tokenizer.pad_token_id, with_entropy=True,
                               device="cpu")
    assert lp.device == torch.device("cpu") == model_device(policy.model) and ent.shape == lp.shape
    for i, s in enumerate(samples):
        n = len(s.gen_ids)
        assert torch.allclose(lp[i, :n], torch.tensor(s.gen_logprobs), atol=1e-4)  # what the decode loop recorded
        assert torch.all(lp[i, n:] == 0) and torch.all(ent[i, n:] == 0)  # nothing past a sample's end
        assert torch.allclose(compute_logprobs(policy.model, s.prompt_ids, s.gen_ids), lp[i, :n], atol=1e-6)
    ref = ReferencePolicy(policy.model).logprobs(samples, 1.0, policy.tokenizer.pad_token_id, 1, lp.shape[1])
    assert torch.allclose(ref, lp.detach(), atol=1e-6)


def test_ids_are_built_on_the_device_asked_for(policy):
    samples = _samples(policy)
    with pytest.raises((RuntimeError, TypeError)):
        forward_logprobs(policy.model, samples, 1.0, 0, device="meta")  # model on cpu, ids on meta: refused
