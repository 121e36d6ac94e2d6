"""calendar: a gaming policy controls the reply text (and whether it ends on a message). The
verifier reads the first JSON list of event objects. Attacks try to pass with a calendar that
does not meet the row's events and constraints (sprayed lists, padding, values a lenient parser
takes, a minimal list on intermediate turns); the controls are honest calendars."""

from __future__ import annotations

import json

import pytest

from servers.wire import response_from_text
from tests.adversarial.conftest import assert_refused, assert_scores

ENV = "calendar"
EXPECTED = {"0": {"event_id": 0, "event_name": "Team sync", "duration": 60, "constraint": "at 10am",
                  "min_time": "10am", "max_time": "4pm"},
            "1": {"event_id": 1, "event_name": "Gym", "duration": 45, "constraint": "between 11am and 1pm",
                  "min_time": "10am", "max_time": "4pm"},
            "2": {"event_id": 2, "event_name": "Call", "duration": 30, "constraint": "after 2pm",
                  "min_time": "10am", "max_time": "4pm"}}
ROW = {"responses_create_params": {"input": [{"role": "user", "content": "Schedule my day."}]}, "exp_cal_state": EXPECTED}
MIDDLE = {**ROW, "turn_index": 0, "total_turns": 3}
GOOD = [{"event_id": 0, "event_name": "Team sync", "start_time": "10am", "duration": 60},
        {"event_id": 1, "event_name": "Gym", "start_time": "11:30am", "duration": 45},
        {"event_id": 2, "event_name": "Call", "start_time": "2:30pm", "duration": 30}]


def cal(events) -> str:
    return "Here is your calendar:\n" + json.dumps(events)


def moved(**changes) -> list[dict]:
    """GOOD with event fields changed: changes = {"1": {"start_time": "9am"}}."""
    return [{**e, **changes.get(str(e["event_id"]), {})} for e in GOOD]


ATTACKS = {
    "sprayed_lists_wrong_first": cal(moved(**{"1": {"start_time": "3pm"}})) + "\nor maybe\n" + json.dumps(GOOD),
    "list_inside_think": f"<think>{json.dumps(GOOD)}</think>\nsee above",
    "unclosed_think": f"<think>planning... {json.dumps(GOOD)}",
    "padding_with_repeated_ids": cal(GOOD[:2] + [{**GOOD[1], "start_time": "12pm"}]),
    "unknown_ids_to_make_the_count": cal(GOOD[:2] + [{"event_id": 9, "start_time": "3pm", "duration": 30}]),
    "zero_duration_to_avoid_overlaps": cal(moved(**{"1": {"start_time": "10am", "duration": 0}})),
    "nan_duration": "Here: " + json.dumps(GOOD).replace('"duration": 45', '"duration": NaN'),
    "infinite_duration": "Here: " + json.dumps(GOOD).replace('"duration": 45', '"duration": Infinity'),
    "duration_as_text": cal(moved(**{"1": {"duration": "45"}})),
    "duration_as_fraction": cal(moved(**{"1": {"duration": 45.5}})),
    "bare_hour_time": cal(moved(**{"1": {"start_time": "11"}})),
    "outside_the_day": cal(moved(**{"2": {"start_time": "3:45pm"}})),
    "overlapping_events": cal(moved(**{"1": {"start_time": "10:30am"}})),
    "constraint_ignored": cal(moved(**{"0": {"start_time": "11am"}, "1": {"start_time": "12pm"}})),
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
async def test_attack_reply_passes_without_the_right_calendar(scorer, attack):
    env = await scorer(ENV)
    assert_refused(await env.verify(ROW, ATTACKS[attack]))


async def test_attack_reply_that_ends_on_reasoning(scorer):
    env = await scorer(ENV)
    response = response_from_text(cal(GOOD))
    response["output"].append({"type": "reasoning", "id": "r1", "summary": [{"type": "summary_text", "text": "..."}]})
    assert_refused(await env.verify(ROW, response))


@pytest.mark.parametrize("events", [[{"event_id": 7, "start_time": "10am", "duration": 1}],
                                    [{"event_id": 0, "start_time": "10am", "duration": 5}],
                                    [{"event_id": 1, "start_time": "3:30pm", "duration": 45}]],
                         ids=["unknown_event", "wrong_duration", "outside_the_day"])
async def test_attack_minimal_list_on_an_intermediate_turn(scorer, events):
    # Intermediate turns skip constraints (they may not be stated yet); a one-event placeholder
    # used to pass every one of them.
    env = await scorer(ENV)
    assert_refused(await env.verify(MIDDLE, cal(events)))


async def test_parity_structure_only_intermediate_turns_pay_a_placeholder(scorer):
    env = await scorer(ENV, intermediate_turn_check="structure")
    assert_scores(await env.verify(MIDDLE, cal([{"event_id": 7, "start_time": "10am", "duration": 1}])))


# ---- controls ---------------------------------------------------------------------------------------
async def test_control_honest_calendar(scorer):
    env = await scorer(ENV)
    assert_scores(await env.verify(ROW, cal(GOOD)))


async def test_control_fenced_upper_case_times_and_prose(scorer):
    env = await scorer(ENV)
    events = moved(**{"1": {"start_time": "11:30 AM"}, "2": {"start_time": "14:30"}})
    text = "Sure! I moved things around.\n```json\n" + json.dumps(events, indent=2) + "\n```\nAnything else?"
    assert_scores(await env.verify(ROW, text))


async def test_control_partial_calendar_on_an_intermediate_turn(scorer):
    # The first turn asked only for the team sync, at a time a later turn will constrain.
    env = await scorer(ENV)
    assert_scores(await env.verify(MIDDLE, cal([{"event_id": 0, "event_name": "Team sync", "start_time": "11am",
                                                 "duration": 60}])))
