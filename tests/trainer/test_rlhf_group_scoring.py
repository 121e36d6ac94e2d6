"""The driver's reward worker against a real genrm server (scripted GenRM behind it): a group goes
through one POST /compare (N GenRM calls for circular), or with env.group_scoring=verify through the
server's cohort /verify; GenRM failures come back as masked failure classes; other environments
keep per-sample /verify; validation groups consecutive samples of one row. No Ray."""

from __future__ import annotations

import re

import pytest

from servers import registry
from servers.app import start_server
from servers.scripted_judge import ScriptedJudge
from trainer.config import load_config
from trainer.grpo.reward_worker import RewardWorker
from trainer.rollout.sample import PROMPT_TOO_LONG, Group, Sample, Ticket
from trainer.rollout.task import Routes, make_task

QUALITY = re.compile(r"Q=(\d)")


class QualityGenRM(ScriptedJudge):
    def reply_for(self, prompt: str) -> str:
        if "GARBAGE" in prompt:
            return "no verdict"
        q1, q2 = (int(x) for x in QUALITY.findall(prompt)[-2:])
        return f'{{"score_1": {q1}, "score_2": {q2}, "ranking": {3 if q1 >= q2 else 4}}}'


@pytest.fixture
async def workers():
    made: list[RewardWorker] = []
    yield made
    for w in made:
        await w.env.close()


@pytest.fixture
async def fleet(workers):
    judge = QualityGenRM()
    await judge.start()
    env = registry.instantiate("genrm", overrides={
        "profile": "plain", "num_rollouts_per_prompt": 4,
        "judges": {"genrm": {"base_url": judge.url, "model": "scripted-judge", "max_retries": 0, "parse_retries": 0}}})
    genrm = await start_server(env)
    mcqa = await start_server(registry.instantiate("mcqa"))
    yield judge, {"genrm": genrm.url, "mcqa": mcqa.url}, workers
    await genrm.stop()
    await mcqa.stop()
    await judge.stop()


def worker(fleet, *overrides: str) -> RewardWorker:
    _, urls, made = fleet
    cfg = load_config("tiny_rlhf", ["env.failed_rollout_retries=0", *overrides])
    made.append(RewardWorker(cfg, urls, buffer=None, train=[ROW, MCQA], val=[ROW, MCQA]))
    return made[-1]


ROUTES = Routes({"genrm_simple_agent": "genrm"})
ROW = make_task({"responses_create_params": {"input": [{"role": "user", "content": "Say something good."}]},
                 "agent_ref": {"type": "responses_api_agents", "name": "genrm_simple_agent"}}, 0, ROUTES)
MCQA = make_task({"responses_create_params": {"input": [{"role": "user", "content": "Pick: A) 1 B) 2"}]},
                  "options": [{"A": "1"}, {"B": "2"}], "expected_answer": "B",
                  "agent_ref": {"type": "responses_api_agents", "name": "mcqa"}}, 1, ROUTES)


def samples(*texts: str) -> list[Sample]:
    return [Sample(prompt_ids=[1, 2], gen_ids=[3], gen_logprobs=[-0.1], versions=[0], truncated=False, text=t)
            for t in texts]


async def test_a_group_is_one_compare_call_with_n_genrm_calls(fleet):
    judge = fleet[0]
    w = worker(fleet)
    group = samples("Q=4 a", "Q=2 b", "Q=5 c", "Q=4 d")
    await w.scorer.score_group(ROW, group, 0)
    # circular (0,1) 4/2 (1,2) 2/5 (2,3) 5/4 (3,0) 4/4 tie ranking 3 -> delta 0.5: 4.5/3.5
    assert [s.reward for s in group] == [pytest.approx((4 + 3.5) / 2), 2.0, 5.0, pytest.approx((4 + 4.5) / 2)]
    assert all(s.failure is None and s.env == "genrm" for s in group)
    assert judge.answered == 4 and w.scorer.stats["failed"] == 0


async def test_cohort_verify_mode_gives_the_same_rewards(fleet):
    judge = fleet[0]
    by_compare = samples("Q=4 a", "Q=2 b", "Q=5 c", "Q=4 d")
    await worker(fleet).scorer.score_group(ROW, by_compare, 0)
    by_cohort = samples("Q=4 a", "Q=2 b", "Q=5 c", "Q=4 d")
    await worker(fleet, "env.group_scoring=verify").scorer.score_group(ROW, by_cohort, 1)
    assert [s.reward for s in by_cohort] == [s.reward for s in by_compare]
    assert all(s.failure is None for s in by_cohort)


async def test_genrm_failures_are_masked_and_counted_and_a_lone_sample_is_not_compared(fleet):
    w = worker(fleet)
    group = samples("Q=4 a", "Q=2 b GARBAGE", "Q=5 c", "Q=4 d")
    await w.scorer.score_group(ROW, group, 0)
    assert [s.failure for s in group] == ["judge_error", "judge_error", "judge_error", None]
    # #3 keeps both its comparisons: (2,3) 4, and (3,0) 4/4 with ranking 3 -> delta 0.5: 4.5
    assert [s.reward for s in group[:3]] == [0.0, 0.0, 0.0] and group[3].reward == 4.25
    assert w.scorer.stats["failures_by_class"] == {"judge_error": 3}
    lone = samples("Q=3 only", "Q=1 too long")
    lone[1].failure = PROMPT_TOO_LONG
    await w.scorer.score_group(ROW, lone, 1)
    assert [s.failure for s in lone] == ["group_too_small", PROMPT_TOO_LONG]


async def test_other_environments_keep_per_sample_verify_and_validation_groups_rows(fleet):
    judge = fleet[0]
    w = worker(fleet)
    group = samples("The answer is \\boxed{B}", "\\boxed{A}")
    await w.scorer.score_group(MCQA, group, 0)
    assert [s.reward for s in group] == [1.0, 0.0] and judge.answered == 0
    val = samples("Q=1 x", "Q=3 y", "\\boxed{B}")
    metrics = await w.score_validation([Group(Ticket(0, 0, 0), ROW.id, 0, val[:2]), Group(Ticket(1, 1, 1), MCQA.id, 0, val[2:])])
    assert metrics["validation/reward/genrm"] == 2.0 and metrics["validation/reward/mcqa"] == 1.0
    assert [s.reward for s in val] == [1.0, 3.0, 1.0] and judge.answered == 2
