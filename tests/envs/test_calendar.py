"""calendar: time/constraint parsing, JSON-list extraction, each grading rule, and the server path."""

from __future__ import annotations

import json

import pytest

from environments.calendar.schedule import (ExpectedSlot, conflicts, extract_json_list, format_time, grade,
                                            parse_constraint, parse_events, parse_time)
from environments.calendar.verifier import CalendarEnvironment, CalendarRow
from servers.client import EnvClientError
from servers.wire import ResponseObject, response_from_text, text_message


@pytest.mark.parametrize("text,minutes", [
    ("10am", 600), ("12am", 0), ("12pm", 720), ("2:15pm", 855), ("10:30 AM", 630), ("14:00", 840),
    ("09:05", 545), ("24:00", 1440), (" 4PM ", 960),
])
def test_parse_time(text, minutes):
    assert parse_time(text) == minutes


@pytest.mark.parametrize("text", ["10", "13pm", "0am", "10:60", "25:00", "24:30", "noon", "", "10.30am"])
def test_parse_time_rejects(text):
    with pytest.raises(ValueError):
        parse_time(text)


def test_format_time_round_trips():
    for minutes in (0, 600, 630, 720, 855, 1439):
        assert parse_time(format_time(minutes)) == minutes


@pytest.mark.parametrize("text,start,end,ok", [
    (None, 600, 660, True),
    ("before 1pm", 720, 780, True), ("before 1pm", 730, 790, False),
    ("after 2pm", 840, 870, True), ("after 2pm", 839, 869, False),
    ("between 11am and 1pm", 660, 780, True), ("between 11am and 1pm", 690, 790, False),
    ("Between 11am AND 1pm", 650, 700, False),
    ("at 10am", 600, 660, True), ("at 10am", 615, 675, False),
])
def test_constraints(text, start, end, ok):
    assert parse_constraint(text).satisfied(start, end) is ok


@pytest.mark.parametrize("text", ["around 10am", "between 11am", "between 2pm and 1pm", "before lunch"])
def test_bad_constraints_are_errors(text):
    with pytest.raises(ValueError):
        parse_constraint(text)


def test_extract_json_list_takes_the_first_list_of_objects():
    text = 'Options [1, 2] aside, here: [{"event_id": 1}] and later [{"event_id": 2}]'
    assert extract_json_list(text) == [{"event_id": 1}]
    assert extract_json_list("no list [here") is None
    assert extract_json_list("[[[[") is None


def test_conflicts_report_every_overlap_and_allow_back_to_back():
    events, problems = parse_events([{"event_id": 1, "start_time": "10am", "duration": 60},
                                     {"event_id": 2, "start_time": "11am", "duration": 30},
                                     {"event_id": 3, "start_time": "10:45am", "duration": 30},
                                     {"event_id": 4, "start_time": "10:15am", "duration": 15}])
    assert not problems
    found = conflicts(events)
    assert len(found) == 3 and all("overlap" in p for p in found)
    assert conflicts(events[:2]) == []


def _slots(**constraints) -> dict[str, ExpectedSlot]:
    return {k: ExpectedSlot(k, 30, parse_constraint(c), 600, 960) for k, c in constraints.items()}


def _reply(*events) -> str:
    return json.dumps([{"event_id": i, "start_time": t, "duration": d} for i, t, d in events])


def test_grade_rules():
    slots = _slots(a="at 10am", b="after 3pm")
    assert grade(_reply(("a", "10am", 30), ("b", "3pm", 30)), slots).reason == "pass"
    assert grade(_reply(("a", "10am", 30), ("b", "2pm", 30)), slots).reason == "constraint_violated"
    assert grade(_reply(("a", "10am", 30), ("b", "3:45pm", 30)), slots).reason == "constraint_violated"  # past 4pm
    assert grade(_reply(("a", "10am", 30), ("c", "3pm", 30)), slots).reason == "missing_event"
    dup = grade(_reply(("a", "10am", 30), ("a", "11am", 30), ("b", "3pm", 30)), slots)
    assert dup.reason == "different_number_of_events" and "repeated" in dup.problems[0]
    assert grade(_reply(("a", "10am", 30), ("b", "3pm", "30")), slots).reason == "malformed_event"
    assert grade(_reply(("a", "10am", 30), ("b", "3pm", 30.0)), slots).reason == "pass"
    assert grade("nothing", slots, allow_no_json_list=True).reward == 1.0
    assert grade("<think>x</think>" + _reply(("a", "10am", 30)), slots, reject_think=False).reason == \
        "different_number_of_events"


def test_intermediate_turn_checks_structure_only():
    slots = _slots(a="at 10am", b="after 3pm")
    assert grade(_reply(("a", "11am", 30)), slots, final_turn=False).reward == 1.0
    assert grade(_reply(("a", "11am", 30), ("b", "11:15am", 30)), slots, final_turn=False).reason == "conflicting_events"


def _row(**extra) -> CalendarRow:
    return CalendarRow.model_validate({"responses_create_params": {"input": []},
                                       "exp_cal_state": {"1": {"event_id": 1, "duration": 60, "constraint": "at 10am",
                                                               "min_time": "10am", "max_time": "4pm"}}, **extra})


async def test_reply_must_end_with_a_message():
    env = CalendarEnvironment()
    good = response_from_text(_reply((1, "10am", 60)))
    assert (await env.verify(_row(), ResponseObject.model_validate(good), None)).reward == 1.0
    cut = {**good, "output": [text_message(_reply((1, "10am", 60))),
                              {"type": "reasoning", "id": "r", "summary": []}]}
    verdict = await env.verify(_row(), ResponseObject.model_validate(cut), None)
    assert verdict.reward == 0.0 and verdict.extras["reason"] == "no_final_message"


def test_final_turn_rule():
    assert _row().final_turn
    assert not _row(turn_index=0, total_turns=2).final_turn
    assert _row(turn_index=1, total_turns=2).final_turn
    assert not _row(turn_index=1).final_turn  # NeMo-Gym: index without a total is never the final turn


async def test_over_http(serve_env):
    client, _ = await serve_env("calendar")
    row = {"responses_create_params": {"input": [{"role": "user", "content": "Lunch 1h after 12pm"}]},
           "exp_cal_state": {"7": {"event_id": 7, "event_name": "Lunch", "duration": 60, "constraint": "after 12pm",
                                   "min_time": "10am", "max_time": "4pm"}}}
    out = await client.verify("calendar", row, response_from_text(_reply((7, "1pm", 60))))
    assert out["reward"] == 1.0 and out["exp_cal_state"]["7"]["event_name"] == "Lunch"
    out = await client.verify("calendar", row, response_from_text(_reply((7, "11am", 60))))
    assert out["reward"] == 0.0 and "violates 'after 12pm'" in out["problems"][0]
    bad = {**row, "exp_cal_state": {"7": {**row["exp_cal_state"]["7"], "duration": "an hour"}}}
    with pytest.raises(EnvClientError) as err:
        await client.verify("calendar", bad, response_from_text("[]"))
    assert err.value.status == 422 and err.value.body["detail"][0]["loc"].startswith("exp_cal_state.7")
