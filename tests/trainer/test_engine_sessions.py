"""Session environments in the GRPO engine: their rows run the one rollout function
(trainer.rollout.episode.run_episode) — seed_session -> model turn -> tool calls -> tool outputs ->
... -> verify — with tool-output tokens masked out of the loss. Real servers on loopback (the
counter fixture: a stateful tool environment), a real tiny policy, a real local Ray."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from trainer.config import load_config
from trainer.fleet import Fleet
from trainer.grpo.train_step import grpo_train_step
from trainer.policy import Policy, PolicyConfig, TinyModelConfig
from trainer.responses import chat_tools
from trainer.rollout.batch import BatchSettings, run_batch
from trainer.rollout.generator import SamplingParams, make_generator
from trainer.rollout.sample import Group, Ticket
from trainer.rollout.scoring import EnvInfo
from trainer.rollout.task import Routes, make_task, make_tasks

pytestmark = pytest.mark.train
torch.set_num_threads(1)
FIXTURES = Path(__file__).parent / "fixture_envs"
SMALL = TinyModelConfig(num_hidden_layers=1, hidden_size=64, intermediate_size=128)
TOOLS = [{"type": "function", "name": "increment", "description": "add amount",
          "parameters": {"type": "object", "properties": {"amount": {"type": "integer"}}}}]
AGENT = {"type": "responses_api_agents", "name": "counter"}


@pytest.fixture(autouse=True)
def fixture_envs(monkeypatch):
    monkeypatch.setenv("VERIGYM_ENV_PATH", str(FIXTURES))


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:  # the fixture envs must not leak into later test modules
        mp.setenv("VERIGYM_ENV_PATH", str(FIXTURES))
        with Fleet(["counter"], log_dir=tmp_path_factory.mktemp("fleet")) as f:
            yield f


def counter_row(initial: int, expected: int, **extra) -> dict:
    return {"responses_create_params": {"input": [{"role": "user", "content": "count"}], "tools": TOOLS},
            "initial_count": initial, "expected_count": expected, "agent_ref": AGENT, **extra}


def teach_tool_call(policy: Policy) -> None:
    """Overfit the tiny model on one conversation: call increment(2), then say done."""
    tools = chat_tools(TOOLS)
    msgs = [{"role": "user", "content": "count"}]
    convo = msgs + [{"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "increment", "arguments": {"amount": 2}}}]},
        {"role": "tool", "content": json.dumps({"count": 3})}, {"role": "assistant", "content": "done"}]
    prompt = policy.encode(policy.render(msgs, tools))
    ids = torch.tensor([policy.encode(policy.render(convo, tools, add_generation_prompt=False))])
    labels = ids.clone()
    labels[0, :len(prompt)] = -100
    opt = torch.optim.Adam(policy.model.parameters(), lr=3e-3)
    policy.model.train()
    for _ in range(150):
        loss = policy.model(input_ids=ids, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    policy.model.eval()


def test_session_rollouts_are_scored_and_tool_outputs_are_masked_out_of_the_loss(fleet):
    policy = Policy.load(PolicyConfig(tiny=SMALL))
    teach_tool_call(policy)
    policy.version = 0
    cfg = load_config("tiny", ["grpo.max_rollout_turns=3", "grpo.num_prompts_per_step=1",
                               "grpo.num_generations_per_prompt=2", "policy.max_total_sequence_length=1024"])
    [samples] = run_batch(make_generator(policy), EnvInfo(fleet.urls), [make_task(counter_row(1, 3), 0, Routes())], 2,
                          SamplingParams(temperature=0, max_new_tokens=100), BatchSettings.from_config(cfg), seed=0)
    for s in samples:
        assert s.scored and s.failure is None and s.reward == 1.0 and s.env == "counter"
        assert s.tool_calls == 1  # increment(2), parsed once by the episode
        assert len(s.gen_ids) == len(s.gen_mask) == len(s.gen_logprobs) == len(s.versions)
        tool = [i for i, m in enumerate(s.gen_mask) if m == 0]
        assert tool and 0 < tool[0] and tool[-1] < len(s.gen_ids) - 1  # tool output between two model turns
        assert all(s.versions[i] == -1 and s.gen_logprobs[i] == 0.0 for i in tool)
        assert all(v == 0 for v, m in zip(s.versions, s.gen_mask) if m)
        assert '"count": 3' in policy.decode([s.gen_ids[i] for i in tool])
    # the loss counts model tokens only
    m = grpo_train_step(policy.model, torch.optim.SGD(policy.model.parameters(), lr=0.0),
                        [Group(Ticket(0, 0, 0), "c", 0, samples)], 0, cfg, policy.tokenizer.pad_token_id)
    assert m["train/total_num_tokens"] == sum(sum(s.gen_mask) for s in samples)
    assert m["async/token_lag_max"] == 0  # tool tokens (version -1) are no policy's


def test_the_engine_trains_on_session_rows(fleet, tmp_path):
    """A random tiny policy never calls the tool well, so a counter row already at its target
    scores 1.0 only when the rollout seeded a session and verified on it (without, 0.0)."""
    pytest.importorskip("ray")
    from trainer.grpo.engine import run_grpo

    cfg = load_config("tiny", [f"logger.log_dir={tmp_path}", "logger.progress_bar=false", "checkpointing.enabled=false",
                               "grpo.max_num_steps=2", "grpo.num_prompts_per_step=2", "grpo.num_generations_per_prompt=2",
                               "grpo.val_period=0", "grpo.val_at_start=false", "grpo.val_at_end=true",
                               "grpo.max_val_samples=2", "grpo.max_rollout_turns=2", "policy.warm_start.enabled=false",
                               "policy.generation.max_new_tokens=8", "policy.generation_batch_size=1",
                               "policy.max_total_sequence_length=1024"])  # the prompt with its tools is long
    tasks = make_tasks([counter_row(2, 2) for i in range(6)], Routes())
    res = run_grpo(cfg, tasks, tasks[:2], fleet.urls, resume=False)
    assert res.steps_done == 2 and res.summary["failed_samples"] == 0
    logged = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["train/reward/counter"] for r in logged if "train/reward/counter" in r] == [1.0, 1.0]
    assert [r["validation/reward/counter"] for r in logged if "validation/reward/counter" in r] == [1.0]
