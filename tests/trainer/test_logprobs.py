"""trainer.logprobs.forward_logprobs is the one logprob computation: the decode loop's recorded
logprobs, compute_logprobs, the reference and the loss all agree with it; its tensors live on the
model's device (checked on CPU with device='cpu' given explicitly: no GPU on the test machine)."""

from __future__ import annotations

import pytest
import torch

from trainer.rollout.decode import decode_batch
from trainer.rollout.generator import SamplingParams
from trainer.grpo.reference import ReferencePolicy
from trainer.rollout.sample import Sample
from trainer.logprobs import compute_logprobs, forward_logprobs, model_device
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


def _group_samples(policy: Policy) -> list[Sample]:
    """Two GRPO-like groups (samples of one prompt each, different lengths) and a lone prompt."""
    prompts = [policy.encode("3+4=")] * 3 + [policy.encode("what is 9 minus 5? ")] * 3 + [policy.encode("0+0=")]
    lengths = [7, 3, 5, 1, 6, 4, 2]  # ragged: pads past some samples' ends
    gens = decode_batch(policy, prompts, [SamplingParams(temperature=1.0, max_new_tokens=n) for n in lengths],
                        rng=torch.Generator().manual_seed(1))
    return [Sample(list(g.prompt_ids), list(g.token_ids), list(g.logprobs), list(g.versions), g.truncated) for g in gens]


def test_samples_of_one_prompt_share_its_pass_with_the_same_logprobs_and_gradients(policy):
    samples = _group_samples(policy)
    assert len({len(s.gen_ids) for s in samples}) > 1  # ragged: pads past some samples' ends
    pad, model = policy.tokenizer.pad_token_id, policy.model
    results = {}
    for share in (True, False):
        model.zero_grad(set_to_none=True)
        lp, ent = forward_logprobs(model, samples, 0.7, pad, with_entropy=True, share_prompts=share)
        (lp.sum() + 0.1 * ent.sum()).backward()
        results[share] = (lp.detach(), ent.detach(), [p.grad.clone() for p in model.parameters()])
    (lp1, ent1, g1), (lp2, ent2, g2) = results[True], results[False]
    torch.testing.assert_close(lp1, lp2, atol=1e-5, rtol=0)
    torch.testing.assert_close(ent1, ent2, atol=1e-5, rtol=0)
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    assert max(float(g.abs().max()) for g in g1) > 1e-3  # a real gradient was compared


def test_a_batch_of_repeated_prompts_decodes_as_each_prompt_alone(policy):
    """Greedy decode of a batch whose rows repeat prompts (one shared prefill each) gives every row
    the tokens and logprobs it gets decoded alone."""
    prompts = [policy.encode("5+1=")] * 3 + [policy.encode("a longer prompt: 2+2=")] * 2
    greedy = SamplingParams(temperature=0.0, max_new_tokens=6)
    batch = decode_batch(policy, prompts, [greedy] * len(prompts))
    for p, got in zip(prompts, batch):
        alone = decode_batch(policy, [p], [greedy])[0]
        assert got.token_ids == alone.token_ids
        assert got.logprobs == pytest.approx(alone.logprobs, abs=1e-4)
