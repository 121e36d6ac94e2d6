"""reasoning_gym: the library's own scorers, fed what a gaming policy writes — several answer
tags, candidate dumps, unfinished reasoning, an answer that exhausts the scorer's CPU."""

from __future__ import annotations

import pytest

from environments.reasoning_gym.verifier import ReasoningGymEnvironment
from tests.adversarial.conftest import assert_refused, assert_scores

ENV = "reasoning_gym"
TASKS = ["basic_arithmetic", "chain_sum", "leg_counting", "knights_knaves"]


def row(task: str) -> dict:
    return next(ReasoningGymEnvironment.generate(tasks=[task], size=1, seed=1))


def attacks(task_row: dict) -> dict[str, tuple[str, float]]:
    """(response, the most it may earn): what an honest wrong answer earns under the task's scorer."""
    answer = task_row["answer"]
    return {
        "answer_then_other_tags": (f"<answer>{answer}</answer><answer>0</answer>", 0.0),
        "answer_in_unclosed_reasoning": (f"<think>Maybe <answer>{answer}</answer>", 0.0),
        "tags_in_unclosed_reasoning_after_text": (f"Let me think.\n<think><answer>{answer}</answer>", 0.0),
    }


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("name", ["answer_then_other_tags", "answer_in_unclosed_reasoning",
                                  "tags_in_unclosed_reasoning_after_text"])
async def test_attack_tags_and_reasoning(scorer, task, name):
    task_row = row(task)
    text, at_most = attacks(task_row)[name]
    env = await scorer(ENV, cpu_workers=1)
    assert_refused(await env.verify(task_row, text), at_most=at_most)


@pytest.mark.parametrize("task", ["basic_arithmetic", "chain_sum", "leg_counting"])
async def test_attack_candidate_dump_earns_less_than_a_tenth(scorer, task):
    # The numeric scorers give partial credit by closeness; a dump of candidates must not add up.
    task_row = row(task)
    dump = " ".join(str(n) for n in range(-50, 400)) + f" {task_row['answer']}"
    env = await scorer(ENV, cpu_workers=1)
    assert_refused(await env.verify(task_row, f"<answer>{dump}</answer>"), at_most=0.1)


async def test_attack_answer_that_exhausts_the_scorer_is_a_zero(scorer):
    # polynomial_multiplication's scorer runs sympy.parse_expr on the answer: 9**9**9 is computed
    # in full. The deadline hits after the worker burned the CPU: the answer's cost, reward 0 —
    # not a masked timeout that would let it escape its zero.
    task_row = row("polynomial_multiplication")
    env = await scorer(ENV, cpu_workers=1, cpu_task_timeout_s=2.0, deadline_cpu_share=0.1)
    reply = await env.verify(task_row, "<answer>9**9**9</answer>")
    assert_refused(reply)
    assert reply["scored_by"] == "deadline"


@pytest.mark.parametrize("task", TASKS + ["polynomial_multiplication"])
async def test_control_right_answer_scores(scorer, task):
    task_row = row(task)
    env = await scorer(ENV, cpu_workers=1)
    assert_scores(await env.verify(task_row, f"<think>Working it out.</think>\n<answer>{task_row['answer']}</answer>"))
