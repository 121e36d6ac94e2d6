"""The server generation backend (trainer/rollout/server_generator.py) over real HTTP: a real
`envs model serve --weight-transfer-config '{"backend": "disk"}'` subprocess on loopback, started as a
run starts it (trainer/rollout/generation_server.py).

Checks: greedy turns through the server equal the in-process backend's with the same weights (ids,
text, logprobs); a weight push through vLLM's protocol while a batch is in flight (the batch
parked by /pause?mode=keep) makes each sequence's tokens version 0 then version 1, with the sampled
logprobs of the weights that sampled them; a server killed mid-batch gives masked samples with a
failure class and a failed weight push raises, nothing hangs; a short GRPO run through a server the
driver starts trains with every weight version pushed through the protocol and policy lag <= 1.
"""
from __future__ import annotations

import asyncio
import copy
import json
import threading
import time
import urllib.error
import urllib.request

import pytest
import torch

from servers.model.rl_client import GenerationClient, GenerationServerError
from trainer.config import load_config
from trainer.grpo.synthetic import arithmetic_tasks
from trainer.policy import load_policy
from trainer.rollout.batch import BatchSettings, run_batch
from trainer.rollout.generation_server import GenerationServer
from trainer.rollout.generator import SamplingParams, generator_for_run, make_generator
from trainer.rollout.scoring import EnvInfo

SMALL = "policy.hf_config_overrides={num_hidden_layers: 1, hidden_size: 64, intermediate_size: 128}"


def _cfg(*extra: str):
    return load_config("tiny", ["policy.generation.backend=server", SMALL, "policy.max_total_sequence_length=1024",
                                "policy.generation.server.timeout_s=60", *extra])


def _perturbed(policy, scale: float, seed: int) -> dict[str, torch.Tensor]:
    """Weights unlike the server's initial ones (it starts from the same seed as the policy); tied
    weights stay tied, as a trainer's state dict has them."""
    g = torch.Generator().manual_seed(seed)
    model = copy.deepcopy(policy.model)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g))
    return {k: v.clone() for k, v in model.state_dict().items()}


def _decode_steps(url: str) -> int:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as reply:
        line = next(x for x in reply.read().decode().splitlines() if x.startswith("verigym_model_decode_steps_total"))
    return int(float(line.rsplit(" ", 1)[1]))


def _wait_for_steps(url: str, steps: int, batch: threading.Thread) -> None:
    start = _decode_steps(url)
    while _decode_steps(url) < start + steps:
        assert batch.is_alive(), "the batch ended before it was paused"
        time.sleep(0.005)


def test_every_server_key_reaches_the_server_or_the_client(tmp_path):
    from trainer.config import ConfigError
    from trainer.rollout.generation_server import placement
    from trainer.rollout.server_generator import ServerGenerator

    cfg = _cfg("policy.generation.server.device=cpu", "policy.generation.server.cpu_threads=2",
               "policy.generation.server.timeout_s=7", f"policy.generation.server.weights_dir={tmp_path}",
               "policy.generation_batch_size=3", "grpo.num_generations_per_prompt=4")
    argv = GenerationServer(cfg, tmp_path).argv()
    flags = dict(zip(argv, argv[1:]))  # each flag -> the word after it
    assert flags["--device"] == "cpu" and flags["--cpu-threads"] == "2" and flags["--max-batch-size"] == "12"
    assert flags["--dtype"] == "float32" and json.loads(flags["--weight-transfer-config"]) == {"backend": "disk"}
    assert "started on loopback, --device cpu" in placement(cfg)
    with pytest.raises(ValueError, match="driver fills it in"):
        ServerGenerator.options_from_config(cfg)
    cfg.policy.generation.server.url = "http://127.0.0.1:9"
    assert ServerGenerator.options_from_config(cfg) == {"url": "http://127.0.0.1:9", "timeout_s": 7.0,
                                                        "weights_dir": str(tmp_path), "max_batch": 12}
    assert "on the server at http://127.0.0.1:9 (backend server, not started here)" in placement(cfg)
    with pytest.raises(ConfigError, match="num_generation_workers=1"):
        _cfg("cluster.num_generation_workers=2")
    with pytest.raises(ConfigError, match="policy.generation.server.device"):
        _cfg("policy.generation.server.device=gpu0")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    cfg = _cfg()
    with GenerationServer(cfg, tmp_path_factory.mktemp("generation")) as server:
        yield server


def test_greedy_turns_through_the_server_equal_the_in_process_backend(served):
    cfg = served.config
    policy = load_policy(cfg, None, "cpu")
    policy.model.load_state_dict(_perturbed(policy, 0.05, 1))
    state = {k: v.clone() for k, v in policy.model.state_dict().items()}
    gen = generator_for_run(load_policy(cfg, None, "cpu"), cfg)
    try:
        gen.policy.version = -1
        gen.receive_weights(0, lambda: state)
        gen.load_received_weights()
        assert gen.version == 0 and gen.stats["weight_updates"] == 1
        tasks = arithmetic_tasks(3, 0)
        greedy = SamplingParams(temperature=0.0, max_new_tokens=40)
        settings = BatchSettings.from_config(cfg)
        remote = run_batch(gen, EnvInfo({}), tasks, 2, greedy, settings, seed=1)
        local = run_batch(make_generator(policy), EnvInfo({}), tasks, 2, greedy, settings, seed=1)
        for r, l in zip((s for g in remote for s in g), (s for g in local for s in g)):
            assert r.failure is None and r.gen_ids == l.gen_ids and r.truncated == l.truncated and r.text == l.text
            assert r.versions == [0] * len(r.gen_ids)
            assert max(abs(a - b) for a, b in zip(r.gen_logprobs, l.gen_logprobs)) < 1e-4
        # a group's first turns (same prompt, same sampling) went as one request with n choices
        assert gen.stats["requests"] == 3 and gen.stats["sequences"] == 6
    finally:
        gen.close()


def test_a_weight_push_mid_batch_splits_each_sequence_into_the_versions_that_sampled_it(served):
    cfg = served.config
    gen = generator_for_run(load_policy(cfg, None, "cpu"), cfg, in_flight=True)
    v0, v1 = _perturbed(gen.policy, 0.05, 2), _perturbed(gen.policy, 0.3, 3)
    prompts = [gen.policy.encode(gen.policy.render([{"role": "user", "content": q}])) for q in ("2+3=", "7-4=")]
    params = SamplingParams(temperature=1.0, max_new_tokens=300)
    try:
        gen.policy.version = -1
        gen.receive_weights(0, lambda: v0)
        gen.load_received_weights()
        results: list = []

        async def batch() -> None:
            turns = gen.episodes(16, seed=5)
            results.extend(await asyncio.gather(*(turns.for_episode(i).generate(prompts[i % 2], params) for i in range(16))))

        runner = threading.Thread(target=lambda: asyncio.run(batch()))
        runner.start()
        _wait_for_steps(served.url, 20, runner)

        async def park() -> None:  # the batch holds between two decode steps, deterministically mid-way
            async with GenerationClient(served.url) as client:
                await client.pause("keep")

        asyncio.run(park())
        gen.receive_weights(1, lambda: v1)  # in flight: pause(keep) -> transfer -> finish("1") -> resume
        runner.join(timeout=120)
        assert not runner.is_alive() and len(results) == 16
        assert gen.version == 1 and gen.stats["in_flight_updates"] == 1
        swapped = 0
        model = load_policy(cfg, None, "cpu").model
        model.load_state_dict(v0)
        for i, g in enumerate(results):
            n0 = g.versions.count(0)
            assert n0 >= min(20, len(g.versions)) and g.versions == [0] * n0 + [1] * (len(g.versions) - n0)
            with torch.no_grad():
                logits = model(torch.tensor([prompts[i % 2] + g.token_ids])).logits[0, len(prompts[i % 2]) - 1:-1]
            fresh = torch.log_softmax(logits.float(), -1).gather(1, torch.tensor(g.token_ids)[:, None])[:, 0]
            sampled = torch.tensor(g.logprobs)
            assert torch.allclose(sampled[:n0], fresh[:n0], atol=1e-4)  # version 0 sampled these
            if n0 < len(g.token_ids):
                swapped += 1
                assert (sampled[n0:] - fresh[n0:]).abs().max() > 1e-3  # ... and not these
        assert swapped > 0
        # a sequence that ended on an end token has it as its last id, as sampled (contiguity of the next turn)
        assert any(g.finish_reason == "stop" and g.token_ids[-1] in gen.policy.stop_token_ids for g in results)
    finally:
        gen.close()


def test_a_server_killed_mid_batch_masks_the_samples_and_the_next_push_fails(tmp_path):
    cfg = _cfg("policy.generation.max_new_tokens=400")
    with GenerationServer(cfg, tmp_path) as server:
        gen = generator_for_run(load_policy(server.config, None, "cpu"), server.config)
        try:
            gen.policy.version = -1
            gen.receive_weights(0, lambda: _perturbed(gen.policy, 0.05, 4))
            gen.load_received_weights()
            out: list = []
            runner = threading.Thread(target=lambda: out.extend(run_batch(
                gen, EnvInfo({}), arithmetic_tasks(2, 0), 4, SamplingParams.from_config(cfg.policy.generation),
                BatchSettings.from_config(cfg), seed=0)))
            runner.start()
            _wait_for_steps(server.url, 10, runner)
            server.kill()
            runner.join(timeout=60)
            assert not runner.is_alive()
            samples = [s for g in out for s in g]
            assert len(samples) == 8 and {s.failure for s in samples} == {"connection_error"}
            assert all(s.reward == 0.0 and s.scored for s in samples)  # masked, not scored as wrong
            assert gen.stats["failed_requests"] == 2
            gen.receive_weights(1, lambda: _perturbed(gen.policy, 0.05, 5))
            with pytest.raises(GenerationServerError, match="pushing weight version 1 failed \\(connection_error\\)"):
                gen.load_received_weights()
            assert gen.version == 0
        finally:
            gen.close()


def test_a_grpo_run_generates_through_a_server_it_starts(tmp_path):
    pytest.importorskip("ray")
    from trainer.fleet import Fleet
    from trainer.grpo.engine import run_grpo

    cfg = _cfg(f"logger.log_dir={tmp_path}", "logger.progress_bar=false", "checkpointing.enabled=false",
               "grpo.max_num_steps=3", "grpo.num_prompts_per_step=2", "grpo.num_generations_per_prompt=4",
               "grpo.val_period=0", "grpo.val_at_start=false", "grpo.val_at_end=false", "policy.warm_start.enabled=false",
               "policy.generation_batch_size=1", "policy.generation.max_new_tokens=24")
    (tmp_path / "fleet").mkdir()
    with Fleet(["math"], log_dir=tmp_path / "fleet") as fleet:
        res = run_grpo(cfg, arithmetic_tasks(20, 0), [], fleet.urls, resume=False)
    assert res.steps_done == 3 and res.summary["failed_samples"] == 0
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "weights/version" in r]
    # a generator's version moves only once the server committed the label, and every token's
    # version is the server's label for it: lag <= 1 (max age 1) at every step
    assert [r["weights/version"] for r in steps] == [1.0, 2.0, 3.0]
    assert all(0 <= r["weights/generator_lag_max"] <= 1 and 0 <= r["async/token_lag_max"] <= 1 for r in steps)
    ready = json.loads((tmp_path / "generation_server.ready.json").read_text())
    with pytest.raises(urllib.error.URLError):  # the run stopped the server it started
        urllib.request.urlopen(ready["url"] + "/health", timeout=5)
