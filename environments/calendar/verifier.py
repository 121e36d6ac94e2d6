"""calendar: multi-turn calendar scheduling (NeMo-Gym ``calendar`` rows, ``exp_cal_state``).

The prompt is a conversation in which the user asks for events under time constraints; the
assistant's reply must carry the whole calendar as a JSON list of
``{"event_id", "event_name", "start_time", "duration"}``. Reward 1 when the list has exactly
the expected events, none overlap, and each keeps its duration, its window and its
constraint; else 0 with the reason. Rules in ``schedule.py``. Pure string work in the event
loop: no CPU pool, thousands of verifications per second.
"""

from __future__ import annotations

import functools
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from environments.calendar.schedule import Constraint, ExpectedSlot, grade, parse_constraint, parse_time
from servers.environment import EnvConfig, Environment, Verdict
from servers.wire import ResponseObject, RowModel


class ExpectedEvent(BaseModel):
    model_config = ConfigDict(extra="allow")

    event_id: int | str | None = Field(None, description="The event's id (the exp_cal_state key is what counts).")
    event_name: str | None = None
    duration: int = Field(..., gt=0, description="Minutes.")
    constraint: str | None = Field(None, description="before X | after X | between X and Y | at X | null.")
    min_time: str = Field(..., description="Earliest start of the day's window, e.g. '10am' or '10:00'.")
    max_time: str = Field(..., description="Latest end of the day's window, e.g. '4pm' or '16:00'.")
    _parsed: tuple[int, int, Constraint] = PrivateAttr()

    @model_validator(mode="after")
    def _parse(self) -> "ExpectedEvent":
        # Parsing here turns a gold event we cannot check (a typo in a time or a constraint)
        # into a 422 naming it (exp_cal_state.<id>), instead of a 0 that blames the model.
        low, high = parse_time(self.min_time), parse_time(self.max_time)
        if high <= low:
            raise ValueError(f"max_time {self.max_time!r} is not after min_time {self.min_time!r}")
        self._parsed = (low, high, parse_constraint(self.constraint))
        return self

    def slot(self, key: str) -> ExpectedSlot:
        low, high, constraint = self._parsed
        return ExpectedSlot(key, self.duration, constraint, low, high)


class CalendarRow(RowModel):
    exp_cal_state: dict[str, ExpectedEvent] = Field(
        ..., description="Expected calendar after this turn: event id -> event with duration, constraint, window.")
    turn_index: int | None = Field(None, ge=0, description="Multi-turn rollouts: this turn's index (0-based).")
    total_turns: int | None = Field(None, ge=1, description="Multi-turn rollouts: number of user turns.")

    @functools.cached_property
    def slots(self) -> dict[str, ExpectedSlot]:
        return {str(key): event.slot(str(key)) for key, event in self.exp_cal_state.items()}

    @property
    def final_turn(self) -> bool:
        # NeMo-Gym: without turn_index the request is the final turn; with it, only the last one is.
        return self.turn_index is None or (self.total_turns is not None and self.turn_index == self.total_turns - 1)


class CalendarConfig(EnvConfig):
    reject_think_tags: bool = Field(True, description="A reply containing '<think>' scores 0 (NeMo-Gym's rule: "
                                    "reasoning must not leak into the answer).")
    allow_no_json_list: bool = Field(False, description="A reply with no JSON list passes (NeMo-Gym's 'easy' "
                                     "data-generation mode); false: it scores 0 when events are expected.")
    intermediate_turn_check: Literal["events", "structure"] = Field(
        "events", description="Intermediate turns of a multi-turn rollout: events = every scheduled event is an expected "
        "one with its duration, inside its window, no overlaps; structure = a well-formed list without overlaps only "
        "(any one-event list passes).")


def _final_message_text(response: ResponseObject) -> str | None:
    """Text of the last output item when it is a message; None when the rollout ended on
    something else (e.g. a reasoning item cut at the token limit): NeMo-Gym scores that 0."""
    if not response.output:
        return None
    last = response.output[-1]
    if last.type != "message":
        return None
    if isinstance(last.content, str):
        return last.content
    return "".join(c.text or "" for c in (last.content or []) if c.type in ("output_text", "text"))


class CalendarEnvironment(Environment):
    name = "calendar"
    domain = "agent"
    summary = ("Multi-turn calendar scheduling: the reply's JSON calendar vs exp_cal_state (event count, "
               "no overlaps, durations, windows, before/after/between/at constraints).")
    Row = CalendarRow
    Config = CalendarConfig
    agent_names = ("calendar_simple_agent", "calendar_agent")

    async def verify(self, row: CalendarRow, response: ResponseObject, session: Any | None) -> Verdict:
        cfg: CalendarConfig = self.config  # type: ignore[assignment]
        text = _final_message_text(response)
        extras: dict[str, Any] = {"final_turn": row.final_turn, "expected_events": len(row.slots)}
        if not text:
            return Verdict(0.0, extras={**extras, "reason": "no_final_message",
                                        "problems": ["the response does not end with a non-empty assistant message"]})
        result = grade(text, row.slots, final_turn=row.final_turn, allow_no_json_list=cfg.allow_no_json_list,
                       reject_think=cfg.reject_think_tags, intermediate=cfg.intermediate_turn_check)
        extras.update(reason=result.reason, problems=result.problems, scheduled_events=len(result.events))
        return Verdict(result.reward, extras=extras)
