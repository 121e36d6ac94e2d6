"""Rebuild ``example.jsonl``: NeMo-Gym ``calendar`` rows (the shape of the resources server's
data: ``responses_create_params`` with a multi-turn conversation, ``exp_cal_state``) with
replies that pass, break one rule each, and malformed rows (422).

    python -m environments.calendar.data.build_examples
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from servers.wire import response_from_text

OUT = Path(__file__).with_name("example.jsonl")
AGENT = {"type": "responses_api_agents", "name": "calendar_simple_agent"}
SYSTEM = ("You are a helpful assistant. If asked to help with organizing the user's calendar, adhere to the "
          "following rules:\n1. Calendar Format: The calendar is a list of events in JSON: "
          "[{\"event_id\": <int>, \"event_name\": <str>, \"start_time\": <str>, \"duration\": <int minutes>}]. "
          "Use 12-hour times like 10am or 2:30pm.\n2. Events must not overlap.\n3. Events must lie between "
          "10am and 4pm.\n4. Respect every time constraint the user gives.\n5. After every change, return the "
          "whole calendar as a JSON list.")


def _event(event_id: int, name: str, duration: int, constraint: str | None) -> dict[str, Any]:
    return {"event_id": event_id, "event_name": name, "duration": duration, "constraint": constraint,
            "min_time": "10am", "max_time": "4pm"}


CONVERSATION = [
    {"role": "system", "content": SYSTEM},
    {"role": "user", "content": "Hi! Could you put a 60-minute team sync on my calendar at 10am?"},
    {"role": "assistant", "content": "Done: [{\"event_id\": 0, \"event_name\": \"Team sync\", \"start_time\": "
                                     "\"10am\", \"duration\": 60}]"},
    {"role": "user", "content": "Great. I also need 45 minutes at the gym, some time between 11am and 1pm, "
                                "and a 30-minute call with my sister after 2pm."},
]
STATE = {"0": _event(0, "Team sync", 60, "at 10am"),
         "1": _event(1, "Gym", 45, "between 11am and 1pm"),
         "2": _event(2, "Call with sister", 30, "after 2pm")}


def _reply(events: list[tuple[int, str, str, int]], prose: str = "Here is your updated calendar:\n") -> str:
    return prose + json.dumps([{"event_id": i, "event_name": n, "start_time": t, "duration": d}
                               for i, n, t, d in events], indent=1)


GOOD = [(0, "Team sync", "10am", 60), (1, "Gym", "11:30am", 45), (2, "Call with sister", "2pm", 30)]


def row(reply: str | None, expected: dict[str, Any], *, state: dict[str, Any] = STATE, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"responses_create_params": {"input": CONVERSATION}, "exp_cal_state": state,
                           "agent_ref": AGENT, **extra}
    if reply is not None:
        out["response"] = response_from_text(reply)
    out["_expected"] = expected
    return out


def build() -> list[dict[str, Any]]:
    rows = [
        row(_reply(GOOD), {"reward": 1.0, "fields": {"reason": "pass"}}),
        # 24-hour times, upper-case AM/PM and a code fence are all fine; back-to-back events do not overlap.
        row("```json\n" + json.dumps([{"event_id": 0, "event_name": "Team sync", "start_time": "10:00", "duration": 60},
                                      {"event_id": "1", "event_name": "Gym", "start_time": "11:00 AM", "duration": 45},
                                      {"event_id": 2, "event_name": "Call", "start_time": "15:30", "duration": 30}])
            + "\n```", {"reward": 1.0, "fields": {"reason": "pass"}}),
        row(_reply([(0, "Team sync", "10am", 60), (1, "Gym", "12:30pm", 45), (2, "Call with sister", "2pm", 30)]),
            {"reward": 0.0, "fields": {"reason": "constraint_violated"}}),  # gym ends 1:15pm, past 'between 11am and 1pm'
        row(_reply([(0, "Team sync", "10am", 60), (1, "Gym", "11am", 45), (2, "Call with sister", "1:30pm", 30)]),
            {"reward": 0.0, "fields": {"reason": "constraint_violated"}}),  # call before 2pm
        row(_reply([(0, "Team sync", "10am", 60), (1, "Gym", "10:30am", 45), (2, "Call with sister", "2pm", 30)]),
            {"reward": 0.0, "fields": {"reason": "conflicting_events"}}),
        row(_reply(GOOD[:2]), {"reward": 0.0, "fields": {"reason": "different_number_of_events"}}),
        row(_reply([(0, "Team sync", "10am", 60), (1, "Gym", "11:30am", 60), (2, "Call with sister", "2pm", 30)]),
            {"reward": 0.0, "fields": {"reason": "constraint_violated"}}),  # duration changed
        row(_reply([(0, "Team sync", "10am", 60), (1, "Gym", "11:30am", 45), (2, "Call with sister", "3:45pm", 30)]),
            {"reward": 0.0, "fields": {"reason": "constraint_violated"}}),  # ends 4:15pm, past the 4pm window
        row("<think>let me place the gym first</think>" + _reply(GOOD), {"reward": 0.0, "fields": {"reason": "think_found"}}),
        row("Sure, I have added them all!", {"reward": 0.0, "fields": {"reason": "no_json_list"}}),
        row(_reply([(0, "Team sync", "10", 60), (1, "Gym", "11:30am", 45), (2, "Call with sister", "2pm", 30)]),
            {"reward": 0.0, "fields": {"reason": "malformed_event"}}),
        # Nothing expected on the calendar yet (small talk turn): any valid reply passes.
        row("Happy to help whenever you are ready!", {"reward": 1.0, "fields": {"reason": "pass"}}, state={}),
        # An intermediate turn of a multi-turn rollout: structure only (constraints may come later).
        row(_reply([(0, "Team sync", "11am", 60)]), {"reward": 1.0, "fields": {"reason": "pass", "final_turn": False}},
            turn_index=0, total_turns=3),
        # Malformed rows: a gold constraint we cannot check, a gold time that is not a time, no exp_cal_state.
        row(_reply(GOOD), {"status": 422}, state={"0": _event(0, "Team sync", 60, "around 10am")}),
        row(_reply(GOOD), {"status": 422}, state={"0": {**_event(0, "Team sync", 60, None), "max_time": "25:00"}}),
        {"responses_create_params": {"input": CONVERSATION}, "response": response_from_text(_reply(GOOD)),
         "_expected": {"status": 422}},
    ]
    return rows


if __name__ == "__main__":
    OUT.write_text("".join(json.dumps(r) + "\n" for r in build()))
    print(f"wrote {OUT}")
