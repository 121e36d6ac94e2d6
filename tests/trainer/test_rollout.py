"""Rollouts against real servers on loopback (fixture environments in fixture_envs/)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from trainer.cli import main
from trainer.fleet import Fleet
from trainer.policy import Policy, PolicyConfig, TinyModelConfig
from trainer.rollout.collect import RolloutSettings, collect, failures_path, read_rollouts
from trainer.rollout.episode import run_episode
from trainer.rollout.generator import SamplingParams
from trainer.rollout.local_generator import LocalGenerator
from trainer.rollout.scoring import EnvCalls, RetryPolicy
from trainer.rollout.task import Routes, make_task, make_tasks

pytestmark = pytest.mark.train
# One intra-op thread: on a shared 2-core machine, oversubscribed BLAS threads make tiny
# forwards ~50x slower.
torch.set_num_threads(1)
FIXTURES = Path(__file__).parent / "fixture_envs"
SMALL = TinyModelConfig(num_hidden_layers=1, hidden_size=64, intermediate_size=128)
TOOLS = [{"type": "function", "name": "increment", "description": "add amount",
          "parameters": {"type": "object", "properties": {"amount": {"type": "integer"}}}}]


@pytest.fixture(autouse=True)
def fixture_envs(monkeypatch):
    monkeypatch.setenv("VERIGYM_ENV_PATH", str(FIXTURES))


@pytest.fixture(scope="module")
def fleet():
    with pytest.MonkeyPatch.context() as mp:  # the fixture envs must not leak into later test modules
        mp.setenv("VERIGYM_ENV_PATH", str(FIXTURES))
        with Fleet(["answer_match", "counter"]) as f:
            yield f


def answer_rows(n: int) -> list[dict]:
    return [{"responses_create_params": {"input": [{"role": "user", "content": f"say {i}"}]},
             "expected_answer": str(i % 10), "agent_ref": {"type": "responses_api_agents", "name": "answer_match"}}
            for i in range(n)]


def answer_tasks(n: int) -> list:
    return make_tasks(answer_rows(n), Routes())


def overfit(policy: Policy, sequence: list[int], trainable_from: int, steps: int = 150) -> None:
    """Teach the policy one token sequence (a real model really learning, not a stub)."""
    policy.model.train()
    opt = torch.optim.Adam(policy.model.parameters(), lr=3e-3)
    ids = torch.tensor([sequence])
    labels = ids.clone()
    labels[0, :trainable_from] = -100
    for _ in range(steps):
        loss = policy.model(input_ids=ids, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    policy.model.eval()


async def test_multi_turn_tool_episode_keeps_tokens_contiguous(fleet):
    policy = Policy.load(PolicyConfig(tiny=SMALL))
    row = {"responses_create_params": {"input": [{"role": "user", "content": "count"}], "tools": TOOLS},
           "initial_count": 1, "expected_count": 3, "agent_ref": {"type": "responses_api_agents", "name": "counter"}}
    # Build the target conversation with the same template, then teach it to the model.
    from trainer.responses import chat_tools

    tools = chat_tools(TOOLS)
    msgs = [{"role": "user", "content": "count"}]
    call = '<tool_call>{"name": "increment", "arguments": {"amount": 2}}</tool_call>'
    convo = msgs + [{"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "increment", "arguments": {"amount": 2}}}]},
        {"role": "tool", "content": json.dumps({"count": 3})}, {"role": "assistant", "content": "done"}]
    prompt_ids = policy.encode(policy.render(msgs, tools))
    full = policy.encode(policy.render(convo, tools, add_generation_prompt=False))
    overfit(policy, full, len(prompt_ids))

    async with EnvCalls(fleet.urls, retry=RetryPolicy(2)) as env, LocalGenerator(policy) as gen:
        episode = await run_episode(gen, env, make_task(row, 0, Routes()),
                                    SamplingParams(temperature=0, max_new_tokens=100), stateful=True, max_steps=4)
    out = episode.reply["response"]["output"]
    assert [i["type"] for i in out] == ["function_call", "function_call_output", "message"], out
    assert json.loads(out[1]["output"]) == {"count": 3}
    assert episode.reward == 1.0 and episode.reply["final_count"] == 3
    first, last = out[0], out[2]
    assert last["prompt_token_ids"][: len(first["prompt_token_ids"]) + len(first["generation_token_ids"])] == \
        first["prompt_token_ids"] + first["generation_token_ids"]
    assert episode.prompt_ids + episode.completion_ids == last["prompt_token_ids"] + last["generation_token_ids"]
    model_tokens = [t for t, m in zip(episode.completion_ids, episode.completion_mask) if m]
    assert model_tokens == first["generation_token_ids"] + last["generation_token_ids"]
    assert policy.decode(first["generation_token_ids"], skip_special_tokens=True) == call
    assert episode.turns == 2 and not episode.truncated


async def test_collect_resume_and_summary(fleet, tmp_path):
    policy = Policy.load(PolicyConfig(tiny=SMALL))
    tasks = answer_tasks(6)
    out = tmp_path / "r.jsonl"
    settings = RolloutSettings(num_generations=3, sampling=SamplingParams(max_new_tokens=8))
    async with EnvCalls(fleet.urls, retry=RetryPolicy(2)) as env, LocalGenerator(policy, max_batch=8) as gen:
        s1 = await collect(tasks, env=env, generator=gen, stateful={}, settings=settings,
                           output=out, progress=False)
        assert s1["this_run"]["rollouts"] == 18 and s1["scored"] == 18 and s1["failed"] == 0
        done = read_rollouts(out)
        assert sorted((r["_ng_task_index"], r["_ng_rollout_index"]) for r in done) == \
            [(t, r) for t in range(6) for r in range(3)]
        for r in done:
            item = r["response"]["output"][-1]
            assert len(item["generation_token_ids"]) == len(item["generation_log_probs"]) > 0
            assert r["reward"] in (0.0, 1.0) and r["agent_ref"]["name"] == "answer_match"
        # Rerun: nothing to do. Then drop two lines and tear the last one: exactly those are redone.
        s2 = await collect(tasks, env=env, generator=gen, stateful={}, settings=settings,
                           output=out, progress=False)
        assert s2["this_run"]["rollouts"] == 0 and s2["this_run"]["skipped_already_done"] == 18
        lines = out.read_text().splitlines()
        out.write_text("\n".join(lines[:15]) + "\n" + lines[15][:40])
        s3 = await collect(tasks, env=env, generator=gen, stateful={}, settings=settings,
                           output=out, progress=False)
        assert s3["this_run"]["rollouts"] == 3 and s3["scored"] == 18
    rewards = [r["reward"] for r in read_rollouts(out)]
    assert s3["per_env"]["answer_match"]["mean_reward"] == pytest.approx(sum(rewards) / 18)


async def test_dead_server_mid_run_is_counted_and_retried_on_resume(tmp_path):
    policy = Policy.load(PolicyConfig(tiny=SMALL))
    tasks = answer_tasks(8)
    out = tmp_path / "r.jsonl"
    settings = RolloutSettings(num_generations=2, sampling=SamplingParams(max_new_tokens=6), concurrency=4)
    with Fleet(["answer_match"]) as first:
        killed = []

        def kill_after_two_batches(step: int) -> None:
            if step == 0 and gen.stats["batches"] >= 2 and not killed:
                first.kill("answer_match")
                killed.append(True)

        async with EnvCalls(first.urls, retry=RetryPolicy(1, backoff_s=0.01)) as env:
            gen = LocalGenerator(policy, max_batch=4, on_step=kill_after_two_batches)
            async with gen:
                s = await collect(tasks, env=env, generator=gen, stateful={}, settings=settings,
                                  output=out, progress=False)
    assert killed
    assert s["this_run"]["rollouts"] == 16 and s["scored"] + s["failed"] == 16
    assert s["failed"] >= 8 and set(s["failures_by_class"]) == {"connection_error"}
    assert all(f["_ng_attempt_index"] == 0 for f in read_rollouts(failures_path(out)))
    # A fresh server: the failed rollouts are retried, finished ones are not.
    with Fleet(["answer_match"]) as second:
        async with EnvCalls(second.urls, retry=RetryPolicy(2)) as env, LocalGenerator(policy, max_batch=8) as gen:
            s2 = await collect(tasks, env=env, generator=gen, stateful={}, settings=settings,
                               output=out, progress=False)
    assert s2["this_run"]["rollouts"] == s["failed"] and s2["scored"] == 16 and s2["failed"] == 0


def test_driver_rollout_command_with_given_urls(fleet, tmp_path, capsys):
    rows_file = tmp_path / "rows.jsonl"
    rows_file.write_text("".join(json.dumps(r) + "\n" for r in answer_rows(4)))
    out = tmp_path / "cli.jsonl"
    argv = ["rollout", "--blend", "tiny", "--input", str(rows_file), "--num-generations", "2", "--output", str(out),
            "--env-url", f"answer_match={fleet.urls['answer_match']}", "--max-new-tokens", "4"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "answer_match" in printed and "rollouts/s" in printed
    summary = json.loads(out.with_name("cli_summary.json").read_text())
    assert summary["scored"] == 8 and summary["this_run"]["rollouts_per_s"] > 0


async def test_one_retry_policy_for_verify_and_it_ends_with_a_failure_class(fleet):
    """The verify step every rollout ends with (session episodes inside run_episode, one-turn
    episodes in the engine's reward actor): a scored answer is not retried; an unreachable server
    is retried ``retries`` times and comes back as a failure class, never a reward."""
    from trainer.responses import build_response, message_item

    row = answer_rows(1)[0]
    response = build_response([message_item(str(row["expected_answer"]))], create_params=row["responses_create_params"],
                              model="tiny", input_tokens=1, output_tokens=1, incomplete=False)
    async with EnvCalls({**fleet.urls, "dead": "http://127.0.0.1:9"}, retry=RetryPolicy(2)) as env:
        reply, retried = await env.verify("answer_match", row, response)
        assert reply["reward"] == 1.0 and "_ng_failure_class" not in reply and retried == 0
        reply, retried = await env.verify("dead", row, response)
        assert reply["_ng_failure_class"] == "connection_error" and reply["reward"] == 0.0 and retried == 2
        # a row the server cannot score: a 422, a masked sample with the server's class, asked once
        bad = {k: v for k, v in row.items() if k != "expected_answer"}
        reply, retried = await env.verify("answer_match", bad, response)
    assert reply["reward"] == 0.0 and reply["_ng_failure_class"] == "invalid_row" and retried == 0
