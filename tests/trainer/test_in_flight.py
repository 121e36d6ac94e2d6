"""In-flight weight updates, forced deterministically: the engine's own generator and trainer
components (no Ray), a real train step, the new weights published through the real transport
and applied by the generator's decode hook in the middle of a batch.

Checks: one sequence carries two policy versions (old before the swap, new after); the tokens
before the swap keep the old policy's logprobs, the tokens after it do not; the train step's
importance-sampling correction is computed against exactly those sampled logprobs.
"""
import uuid

import torch

from trainer.config import load_config
from trainer.rollout.sample import Ticket
from trainer.grpo.synthetic import arithmetic_tasks
from trainer.grpo.train_step import forward_logprobs
from trainer.grpo.weight_sync import SharedMemoryTransport
from trainer.grpo.workers import GeneratorWorker, TrainerWorker

SWAP_AT = 5


def test_weights_swap_mid_sequence_and_is_correction_uses_sampled_logprobs():
    cfg = load_config("tiny", ["policy.warm_start.enabled=false", "policy.generation.max_new_tokens=16",
                               "policy.generation.temperature=1.0", "grpo.num_prompts_per_step=2",
                               "grpo.num_generations_per_prompt=4", "policy.optimizer.kwargs.lr=0.01"])
    tasks = arithmetic_tasks(4, 0)
    transport = SharedMemoryTransport(uuid.uuid4().hex[:8])
    try:
        trainer = TrainerWorker(cfg, transport)
        gen = GeneratorWorker(cfg, 0, tasks, buffer=None, reward=None, transport=transport)
        assert gen.generator.in_flight  # the tiny config's grpo.async_grpo.in_flight_weight_updates
        gen.receive_weights(0, trainer.publish_weights(0))
        gen.generator.load_received_weights()
        v0_state = {k: v.clone() for k, v in gen.generator.policy.model.state_dict().items()}
        tickets = [Ticket(slot=i, prompt_index=i, seed=100 + i) for i in range(2)]

        # step 0 on a batch from version 0 (rewards set so every group has signal)
        first = gen.generate(tickets)
        for g in first:
            for j, s in enumerate(g.samples):
                s.reward, s.env = float(j % 2), "math"
        trainer.train_step(first, 0)
        handle = trainer.publish_weights(1)

        # the next batch: version 1 arrives while it is being decoded (the generator loads it before the next step)
        def arrive(step: int) -> None:
            if step == SWAP_AT:
                gen.receive_weights(1, handle)

        gen.generator.on_step = arrive
        groups = gen.generate(tickets)
        assert gen.get_stats()["in_flight_updates"] == 1 and gen.generator.version == 1
        samples = [s for g in groups for s in g.samples]
        long = [s for s in samples if len(s.gen_ids) > SWAP_AT]
        assert long, "every sequence stopped before the swap"
        for s in samples:
            n = len(s.gen_ids)
            assert s.versions == [0] * min(n, SWAP_AT) + [1] * max(0, n - SWAP_AT)

        # logprobs as sampled: the old policy's before the swap, not the old policy's after it
        old = GeneratorWorker(cfg, 1, tasks, buffer=None, reward=None, transport=transport).generator.policy
        old.model.load_state_dict(v0_state)
        with torch.no_grad():
            lp_v0, _ = forward_logprobs(old.model, long, cfg.policy.generation.temperature, old.tokenizer.pad_token_id)
        before = torch.tensor([s.gen_logprobs[:SWAP_AT] for s in long])
        assert torch.allclose(lp_v0[:, :SWAP_AT], before, atol=1e-4)
        after_diff = max(abs(float(lp_v0[i, t]) - s.gen_logprobs[t])
                         for i, s in enumerate(long) for t in range(SWAP_AT, len(s.gen_ids)))
        assert after_diff > 1e-3

        # the IS weight of the next train step is exp(lp_old - lp_gen) with lp_gen = the sampled logprobs
        for g in groups:
            for j, s in enumerate(g.samples):
                s.reward, s.env = float(j % 2), "math"
        with torch.no_grad():
            trainer.policy.model.train()
            lp_old, _ = forward_logprobs(trainer.policy.model, samples, cfg.policy.generation.temperature,
                                         trainer.pad_id)
            trainer.policy.model.eval()
        w = [float(torch.exp(lp_old[i, t] - s.gen_logprobs[t])) for i, s in enumerate(samples)
             for t in range(len(s.gen_ids))]
        m = trainer.train_step(groups, 1)
        assert abs(m["train/sampling_importance_ratio"] - sum(w) / len(w)) < 1e-4
        assert abs(m["train/sampling_importance_ratio_max"] - max(w)) < 1e-4
        assert m["async/mixed_version_samples_frac"] == len(long) / len(samples)
        assert abs(m["train/sampling_importance_ratio"] - 1.0) > 1e-4  # the correction is not a no-op here
    finally:
        transport.close()
