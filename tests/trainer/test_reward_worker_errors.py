"""The reward worker against a real environment server on loopback: nothing private is POSTed,
and an exception in our own scoring code is an error with its traceback, not a masked sample."""

from __future__ import annotations

from pathlib import Path

import pytest

from servers import registry
from servers.app import start_server
from trainer.config import load_config
from trainer.rollout.sample import Group, Sample, Ticket
from trainer.grpo.reward_worker import RewardWorker
from trainer.rollout.task import Routes, make_task

FIXTURES = Path(__file__).parent / "fixture_envs"


class _Buffer:  # stands in for the replay-buffer actor handle (``await buffer.put.remote(groups)``)
    def __init__(self) -> None:
        self.put = self
        self.groups: list[Group] = []

    async def remote(self, groups: list[Group]) -> None:
        self.groups += groups


@pytest.fixture
async def answer_match_url(monkeypatch):
    monkeypatch.setenv("VERIGYM_ENV_PATH", str(FIXTURES))
    server = await start_server(registry.instantiate("answer_match", overrides={"cpu_workers": 1}))
    yield server.url
    await server.stop(drain_timeout=5)


def _group(texts: list[str]) -> Group:
    return Group(Ticket(0, 0, 0), "p0", 0, [Sample([1], [2], [-0.5], [0], False, text=t) for t in texts])


def _row(**extra) -> dict:
    return {"responses_create_params": {"input": [{"role": "user", "content": "say 4"}]}, "expected_answer": "4",
            "agent_ref": {"type": "responses_api_agents", "name": "answer_match"}, "_verigym_reasoning": "off",
            "_ng_task_index": 3, **extra}


def _task(**extra):
    return make_task(_row(**extra), 0, Routes())


def test_a_task_keeps_data_preps_tags_off_the_row():
    task = _task()
    assert task.row == {"responses_create_params": _row()["responses_create_params"], "expected_answer": "4",
                        "agent_ref": _row()["agent_ref"], "_ng_task_index": 3}
    assert task.tags == {"_verigym_reasoning": "off"} and task.env == "answer_match" and task.id == "3"


async def test_rows_reach_verify_without_private_keys(answer_match_url):
    buffer = _Buffer()
    worker = RewardWorker(load_config("tiny"), {"answer_match": answer_match_url}, buffer, [_task()])
    sent: list[dict] = []
    verify = worker.env.client.verify

    async def recording(env, row, response=None, **kw):
        sent.append(row)
        return await verify(env, row, response, **kw)

    worker.env.client.verify = recording
    assert await worker.score_groups([_group(["4", "5"])]) == 1
    assert [s.reward for s in buffer.groups[0].samples] == [1.0, 0.0]
    assert sent and all(not k.startswith("_verigym_") for row in sent for k in row)
    assert worker.get_stats()["error"] is None


async def test_an_exception_in_our_scoring_code_surfaces_with_its_traceback(answer_match_url):
    buffer = _Buffer()
    bad = _task(metadata={"tags": {"a", "b"}})  # a set: our client cannot serialise the row (a bug of ours)
    worker = RewardWorker(load_config("tiny"), {"answer_match": answer_match_url}, buffer, [bad])
    with pytest.raises(TypeError):
        await worker.score_groups([_group(["4"])])
    error = worker.get_stats()["error"]
    assert "Traceback" in error and "TypeError" in error
    assert worker.get_stats()["failures_by_class"] == {}  # not passed off as an http_error sample
    assert buffer.groups == []
