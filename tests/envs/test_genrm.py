"""genrm over HTTP against a scripted GenRM: /compare (pairs, calls counted, roles, failures, bad
input), cohort /verify (same rewards as /compare whatever the arrival order, timeout, cancellation,
duplicates) and the cohort buffer's memory bound under thousands of open cohorts."""

from __future__ import annotations

import asyncio
import gc
import re
import tracemalloc
from typing import Any

import pytest

from environments.genrm.cohorts import COHORT_DUPLICATE, COHORT_OVERFLOW, COHORT_TIMEOUT, CohortBuffer, CohortFailure
from servers.scripted_judge import ScriptedJudge
from servers.wire import FAILURE_CLASS_KEY, response_from_text

FAST = {"max_retries": 0, "backoff_s": 0.01, "backoff_max_s": 0.02, "parse_retries": 1}
QUALITY = re.compile(r"Q=(\d)")


class QualityGenRM(ScriptedJudge):
    """Scores each answer by the digit after 'Q=' in it (response_1's first, response_2's second);
    an answer saying GARBAGE gets a reply without JSON."""

    def reply_for(self, prompt: str) -> str:
        if "GARBAGE" in prompt:
            return "I cannot decide."
        q1, q2 = (int(x) for x in QUALITY.findall(prompt)[-2:])
        ranking = 3 if q1 > q2 else 4 if q1 < q2 else 2
        return f'<think>compare</think>{{"score_1": {q1}, "score_2": {q2}, "ranking": {ranking}}}'


@pytest.fixture
async def genrm():
    judge = QualityGenRM()
    await judge.start()
    yield judge
    await judge.stop()


def cfg(judge: ScriptedJudge, **extra: Any) -> dict[str, Any]:
    return {"judges": {"genrm": {"base_url": judge.url, "model": "scripted-judge", **FAST}}, "profile": "plain", **extra}


ANSWERS = ["Q=4 fine", "Q=2 weak", "Q=5 best", "Q=4 also fine"]
HISTORY = [{"role": "user", "content": "Say something good."}]


def compare_body(answers: list[str] = ANSWERS) -> dict[str, Any]:
    return {"conversation_history": HISTORY, "response_objs": [response_from_text(a) for a in answers]}


async def test_compare_circular_by_hand_with_calls_counted_and_roles(serve_env, genrm):
    client, _ = await serve_env("genrm", **cfg(genrm))
    status, reply = await client.post("genrm", "/compare", compare_body())
    assert status == 200, reply
    # circular: (0,1) 4/2, (1,2) 2/5, (2,3) 5/4, (3,0) 4/4 tie with ranking 2 -> delta 1.5: 5.5/2.5
    assert reply["rewards"] == [pytest.approx((4 + 2.5) / 2), 2.0, 5.0, pytest.approx((4 + 5.5) / 2)]
    assert genrm.answered == 4 and len(reply["comparison_results"]) == 4
    assert reply["failures"] == [None] * 4
    assert reply["metrics"]["tiebreak_usage_rate"] == 0.25 and reply["metrics"]["num_comparisons"] == 4
    roles = [m["role"] for m in genrm.bodies[-1]["messages"]]
    assert roles == ["user", "response_1", "response_2"] and genrm.bodies[-1]["model"] == "scripted-judge"


async def test_all_pairs_makes_n_choose_2_calls_and_votes_multiply(serve_env, genrm):
    client, _ = await serve_env("genrm", **cfg(genrm, comparison_strategy="all_pairs"))
    status, reply = await client.post("genrm", "/compare", compare_body())
    assert status == 200 and genrm.answered == 6 and len(reply["comparison_results"]) == 6
    genrm.answered = 0
    votes = cfg(genrm, num_judges_per_comparison=3)
    votes["judges"]["genrm"]["cache_size"] = 0
    client, _ = await serve_env("genrm", **votes)
    status, reply = await client.post("genrm", "/compare", compare_body())
    assert status == 200 and genrm.answered == 12 and {c["judge_idx"] for c in reply["comparison_results"]} == {0, 1, 2}


async def test_a_comparison_without_json_fails_its_two_responses_only(serve_env, genrm):
    client, _ = await serve_env("genrm", **cfg(genrm))
    answers = ["Q=4 a", "Q=2 b", "Q=5 c GARBAGE", "Q=3 d", "Q=1 e"]
    status, reply = await client.post("genrm", "/compare", compare_body(answers))
    assert status == 200
    # #2 is in (1,2) and (2,3): both fail after the re-ask -> #1, #2, #3 are judge_error
    assert [f and f["_ng_failure_class"] for f in reply["failures"]] == [None, "judge_error", "judge_error",
                                                                         "judge_error", None]
    assert reply["rewards"][1:4] == [0.0, 0.0, 0.0]
    # the others keep their own comparisons: #0 from (0,1) 4 and (4,0) 4 -> 4; #4 from (3,4) 1 and (4,0) 1 -> 1
    assert reply["rewards"][0] == 4.0 and reply["rewards"][4] == 1.0
    assert reply["metrics"]["failed_comparisons"] == 2


@pytest.mark.parametrize("body, field", [
    ({"conversation_history": HISTORY, "response_objs": [response_from_text("Q=1")]}, "response_objs"),
    ({"conversation_history": HISTORY, "response_objs": [response_from_text("Q=1"), {"id": "r"}]}, "response_objs.1.output"),
    ({"response_objs": [response_from_text("Q=1")] * 2}, "conversation_history"),
    ({**compare_body(), "principal": "typo"}, "principal"),
])
async def test_compare_bad_input_is_422_naming_the_field(serve_env, genrm, body, field):
    client, _ = await serve_env("genrm", **cfg(genrm))
    status, reply = await client.post("genrm", "/compare", body)
    assert status == 422 and any(d["loc"] == field for d in reply["detail"]), reply
    assert genrm.requests == 0


def verify_row(answer: str, rollout: int, task: int = 7, **extra: Any) -> dict[str, Any]:
    return {"responses_create_params": {"input": HISTORY}, "_ng_task_index": task, "_ng_rollout_index": rollout,
            "agent_ref": {"type": "responses_api_agents", "name": "genrm_simple_agent"}, **extra,
            "response": response_from_text(answer)}


async def test_cohort_verify_matches_compare_whatever_the_arrival_order(serve_env, genrm):
    client, env = await serve_env("genrm", **cfg(genrm, num_rollouts_per_prompt=4, profile="rlhf"))
    _, compared = await client.post("genrm", "/compare", compare_body())
    replies = await asyncio.gather(*(client.verify("genrm", verify_row(ANSWERS[k], k)) for k in (3, 1, 0, 2)))
    by_rollout = {r["_ng_rollout_index"]: r for r in replies}
    assert [by_rollout[k]["reward"] for k in range(4)] == compared["rewards"]
    assert all(r.get(FAILURE_CLASS_KEY) is None and r["genrm_cohort_size"] == 4 for r in replies)
    assert len(by_rollout[0]["genrm_comparisons"]) == 2  # circular: each response is in two comparisons
    assert env.cohorts.open_cohorts == 0 and env.cohorts.counts["completed"] == 1


async def test_incomplete_cohort_answers_cohort_timeout_and_frees_its_slot(serve_env, genrm):
    client, env = await serve_env("genrm", **cfg(genrm, num_rollouts_per_prompt=4, cohort_timeout_s=0.3))
    replies = await asyncio.gather(*(client.verify("genrm", verify_row(ANSWERS[k], k)) for k in (0, 1)))
    assert [r[FAILURE_CLASS_KEY] for r in replies] == [COHORT_TIMEOUT, COHORT_TIMEOUT]
    assert all(r["instance_config"]["mask_sample"] is True and r["reward"] == 0.0 for r in replies)
    assert env.cohorts.open_cohorts == 0 and genrm.requests == 0
    # a row's own cohort size wins over the config's: two rollouts are then a full cohort
    replies = await asyncio.gather(*(client.verify("genrm", verify_row(ANSWERS[k], k, task=8, num_rollouts_per_prompt=2))
                                     for k in (0, 1)))
    assert [r["reward"] for r in replies] == [4.0, 2.0]


async def test_cohort_of_one_is_rejected(serve_env, genrm):
    client, _ = await serve_env("genrm", **cfg(genrm))
    from servers.client import EnvClientError

    with pytest.raises(EnvClientError) as err:
        await client.verify("genrm", verify_row("Q=1", 0, num_rollouts_per_prompt=1), raise_on_failure=True)
    assert err.value.status == 422 and "num_rollouts_per_prompt" in str(err.value.body)


# ---- the buffer alone ------------------------------------------------------------------------------
async def _echo(items: list[Any]) -> list[Any]:
    return [f"scored {item}" for item in items]


async def test_members_ordered_by_rollout_index_a_leaver_leaves_and_a_duplicate_replaces():
    seen: list[list[Any]] = []

    async def record(items: list[Any]) -> list[Any]:
        seen.append(items)
        return items

    buf: CohortBuffer[Any, Any] = CohortBuffer(record, timeout_s=30, max_open=10)
    leaver = asyncio.ensure_future(buf.join("k", 3, "leaver", 9))
    await asyncio.sleep(0)
    leaver.cancel()
    await asyncio.gather(leaver, return_exceptions=True)
    assert buf.open_cohorts == 0  # its only member left: the cohort is gone
    first = asyncio.ensure_future(buf.join("k", 3, "c-old", 2))
    await asyncio.sleep(0)
    retry = asyncio.ensure_future(buf.join("k", 3, "c", 2))  # same rollout index: a client retry
    await asyncio.sleep(0)
    with pytest.raises(CohortFailure) as dup:
        await first
    assert dup.value.failure_class == COHORT_DUPLICATE
    results = await asyncio.gather(retry, buf.join("k", 3, "b", 1), buf.join("k", 3, "a", 0))
    assert seen == [["a", "b", "c"]] and results == ["c", "b", "a"]


async def test_memory_stays_bounded_under_thousands_of_open_cohorts():
    buf: CohortBuffer[Any, Any] = CohortBuffer(_echo, timeout_s=3600, max_open=2000)
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    # 2000 prompts each get one of their 16 rollouts: the buffer is full
    waiters = [asyncio.ensure_future(buf.join(f"prompt-{i}", 16, "x" * 100, 0)) for i in range(2000)]
    while buf.waiting_members < 2000:
        await asyncio.sleep(0)
    assert buf.open_cohorts == 2000 and buf.waiting_members == 2000
    held = tracemalloc.get_traced_memory()[0] - base
    assert held / 2000 < 4096  # per waiting rollout: its texts, future and task; never the request body
    # 20,000 more prompts: each is refused at once, and the buffer does not grow
    overflow = 0
    for i in range(20000):
        try:
            await buf.join(f"late-{i}", 16, "x" * 100, 0)
        except CohortFailure as exc:
            overflow += exc.failure_class == COHORT_OVERFLOW
    assert overflow == 20000 and buf.open_cohorts == 2000
    assert tracemalloc.get_traced_memory()[0] - base < held * 1.1
    await buf.close()  # what expiry does to each open cohort, for all of them at once
    timeouts = 0
    for waiter in waiters:
        try:
            await waiter
        except CohortFailure as exc:
            timeouts += exc.failure_class == COHORT_TIMEOUT
    assert timeouts == 2000 and buf.open_cohorts == 0 and buf.waiting_members == 0
    del waiters, waiter
    gc.collect()
    after = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    assert after < held / 4  # everything a cohort held is released once it expires


async def test_compare_is_a_published_post_endpoint(serve_env, genrm):
    client, _ = await serve_env("genrm", **cfg(genrm))
    status, info = await client.get("genrm", "/info")
    assert status == 200 and "compare" in info["endpoints"] and info["tools"] == []
    assert "genrm_simple_agent" in info["agent_names"]
    status, reply = await client.get("genrm", "/compare")
    assert status == 405 and "POST" in reply["error"]


@pytest.mark.parametrize("overrides, message", [
    ({"num_judges_per_comparison": 2}, "cache_size: 0"),
    ({"judges": {"genrm": {"api": "responses"}}}, "must be 'chat'"),
    ({"cohort_timeout_s": 600, "verify_timeout_s": 300}, "must exceed cohort_timeout_s"),
    ({"num_rollouts_per_prompt": 1}, "num_rollouts_per_prompt"),
    ({"default_score": 3.0}, "unknown config key 'default_score'"),
])
def test_config_errors_name_the_fix(overrides, message):
    from servers import registry

    with pytest.raises(registry.ConfigError, match=re.escape(message)):
        registry.instantiate("genrm", overrides=overrides)


def test_profiles_fill_only_the_keys_left_unset():
    from servers import registry

    rlhf = registry.instantiate("genrm").config
    assert (rlhf.reasoning_bonus, rlhf.answer_bonus) == (0.5, 0.5)
    assert (rlhf.group_reasoning_length_penalty_coeff, rlhf.group_answer_length_penalty_coeff) == (0.3, 0.35)
    rlvr = registry.instantiate("genrm", overrides={"profile": "rlvr", "answer_bonus": 0.2}).config
    assert rlvr.group_answer_length_penalty_coeff == 0.1 and rlvr.answer_bonus == 0.2
    plain = registry.instantiate("genrm", overrides={"profile": "plain"}).config
    assert plain.shaping().reasoning_bonus == 0.0 and plain.group_reasoning_length_penalty_coeff == 0.0
