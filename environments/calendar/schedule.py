"""Calendar scheduling rules: times, constraints, the JSON calendar in a reply, and the grade.

Pure functions, no framework imports, so they are tested alone and cheap enough to run in
the event loop. The rules are NeMo-Gym ``calendar``'s (``resources_servers/calendar``):

* times are minutes from midnight, written ``10am``, ``10:30am``, ``2:15pm`` or ``14:00``
  (we also accept upper case and a space before am/pm: ``10:30 AM`` is the same time);
* an event occupies ``[start, start + duration)``; two events conflict when those overlap
  (back-to-back is fine);
* every event must keep its expected duration and lie inside ``[min_time, max_time]``;
* constraints: ``before X`` (ends at or before X), ``after X`` (starts at or after X),
  ``between X and Y`` (starts at or after X and ends at or before Y), ``at X`` (starts at X),
  or none.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

_TIME = re.compile(r"^\s*(\d{1,2})(?::(\d{2}))?\s*([ap]m)?\s*$", re.IGNORECASE)
_JSON_DECODER = json.JSONDecoder()


def parse_time(text: str) -> int:
    """``'10am'`` -> 600, ``'2:15pm'`` -> 855, ``'14:00'`` -> 840. ValueError if not a time.

    A bare hour without am/pm (``'10'``) is rejected: it is ambiguous and NeMo-Gym does not
    parse it either.
    """
    if not isinstance(text, str):
        raise ValueError(f"a time must be a string like '10am' or '14:00', got {text!r}")
    match = _TIME.match(text)
    if not match:
        raise ValueError(f"not a time: {text!r} (write '10am', '10:30am' or '14:00')")
    hour, minute, half = int(match.group(1)), int(match.group(2) or 0), match.group(3)
    if minute > 59:
        raise ValueError(f"not a time: {text!r} (minutes past 59)")
    if half:
        if not 1 <= hour <= 12:
            raise ValueError(f"not a time: {text!r} (12-hour clock hours are 1..12)")
        return (hour % 12 + (12 if half.lower() == "pm" else 0)) * 60 + minute
    if match.group(2) is None:
        raise ValueError(f"not a time: {text!r} (a bare hour is ambiguous; write '10am' or '10:00')")
    if hour > 24 or hour == 24 and minute:
        raise ValueError(f"not a time: {text!r} (24-hour clock hours are 0..24)")
    return hour * 60 + minute


def format_time(minutes: int) -> str:
    """600 -> ``'10am'``, 855 -> ``'2:15pm'`` (the form NeMo-Gym's prompts use)."""
    hour, minute = divmod(minutes, 60)
    half = "am" if hour < 12 else "pm"
    shown = hour % 12 or 12
    return f"{shown}{half}" if minute == 0 else f"{shown}:{minute:02d}{half}"


@dataclass(frozen=True)
class Constraint:
    """A parsed constraint: ``kind`` in before/after/between/at/none, times in minutes."""

    kind: str
    first: int | None = None
    second: int | None = None

    def satisfied(self, start: int, end: int) -> bool:
        if self.kind == "before":
            return end <= self.first  # type: ignore[operator]
        if self.kind == "after":
            return start >= self.first  # type: ignore[operator]
        if self.kind == "between":
            return start >= self.first and end <= self.second  # type: ignore[operator]
        if self.kind == "at":
            return start == self.first
        return True


def parse_constraint(text: str | None) -> Constraint:
    """``None`` / ``'before 1pm'`` / ``'after 11am'`` / ``'between 11am and 1pm'`` / ``'at 10am'``.

    Anything else is a ValueError: a constraint we cannot check must not pass silently.
    """
    if text is None or not text.strip():
        return Constraint("none")
    words = text.strip()
    lowered = words.lower()
    for kind in ("before", "after", "at"):
        if lowered.startswith(kind + " "):
            return Constraint(kind, parse_time(words[len(kind) + 1:]))
    if lowered.startswith("between "):
        parts = re.split(r"\s+and\s+", words[len("between "):], flags=re.IGNORECASE)
        if len(parts) != 2:
            raise ValueError(f"'between' constraint needs 'between X and Y', got {text!r}")
        first, second = parse_time(parts[0]), parse_time(parts[1])
        if second < first:
            raise ValueError(f"'between' constraint ends before it starts: {text!r}")
        return Constraint("between", first, second)
    raise ValueError(f"unknown constraint {text!r}: use before X, after X, between X and Y, at X, or null")


@dataclass(frozen=True)
class ExpectedSlot:
    """One expected event, parsed once per row: what the scheduled event must satisfy."""

    event_id: str
    duration: int
    constraint: Constraint
    min_time: int
    max_time: int


@dataclass(frozen=True)
class Scheduled:
    event_id: str
    start: int
    duration: int

    @property
    def end(self) -> int:
        return self.start + self.duration


@dataclass
class Grade:
    reward: float
    reason: str  # NeMo-Gym's reason names where they exist: pass, think_found, no_json_list, ...
    problems: list[str] = field(default_factory=list)
    events: list[Scheduled] = field(default_factory=list)


def extract_json_list(text: str) -> list[Any] | None:
    """The first JSON list of objects in ``text`` (prose, code fences around it are fine).

    NeMo-Gym takes the first such list too; a list of non-objects (``[1, 2]``) is skipped.
    """
    start = text.find("[")
    while start != -1:
        try:
            value, _ = _JSON_DECODER.raw_decode(text, start)
        except (ValueError, RecursionError):
            value = None
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            return value
        start = text.find("[", start + 1)
    return None


def _duration(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def parse_events(raw: list[Any]) -> tuple[list[Scheduled], list[str]]:
    """The reply's events, and a problem per malformed one (missing key, unparsable time)."""
    events: list[Scheduled] = []
    problems: list[str] = []
    for i, item in enumerate(raw):
        missing = [k for k in ("event_id", "start_time", "duration") if k not in item]
        if missing:
            problems.append(f"event #{i}: missing {', '.join(missing)}")
            continue
        duration = _duration(item["duration"])
        if duration is None or duration <= 0:
            problems.append(f"event #{i}: duration must be a positive whole number of minutes, got {item['duration']!r}")
            continue
        try:
            start = parse_time(item["start_time"])
        except ValueError as exc:
            problems.append(f"event #{i}: {exc}")
            continue
        events.append(Scheduled(str(item["event_id"]), start, duration))
    return events, problems


def conflicts(events: list[Scheduled]) -> list[str]:
    """Every overlapping pair, as readable problems (sorted sweep: O(n log n) plus overlaps)."""
    out: list[str] = []
    ordered = sorted(events, key=lambda e: (e.start, e.end))
    for i, event in enumerate(ordered):
        for other in ordered[i + 1:]:
            if other.start >= event.end:
                break
            out.append(f"events {event.event_id} ({format_time(event.start)}-{format_time(event.end)}) and "
                       f"{other.event_id} ({format_time(other.start)}-{format_time(other.end)}) overlap")
    return out


def slot_problems(event: Scheduled, slot: ExpectedSlot) -> list[str]:
    out: list[str] = []
    if event.duration != slot.duration:
        out.append(f"event {slot.event_id}: duration {event.duration}, expected {slot.duration}")
    if event.start < slot.min_time or event.end > slot.max_time:
        out.append(f"event {slot.event_id}: {format_time(event.start)}-{format_time(event.end)} is outside "
                   f"{format_time(slot.min_time)}-{format_time(slot.max_time)}")
    if not slot.constraint.satisfied(event.start, event.end):
        c = slot.constraint
        want = (f"{c.kind} {format_time(c.first)}" if c.kind != "between"  # type: ignore[arg-type]
                else f"between {format_time(c.first)} and {format_time(c.second)}")  # type: ignore[arg-type]
        out.append(f"event {slot.event_id}: {format_time(event.start)}-{format_time(event.end)} violates '{want}'")
    return out


def _intermediate(events: list[Scheduled], by_id: dict[str, Scheduled], duplicates: list[str], overlaps: list[str],
                  slots: dict[str, ExpectedSlot]) -> Grade:
    """An intermediate turn: the calendar so far. Every event in it must be an expected one (its
    id), once, with its expected duration and inside its day window, and none overlap; events not
    scheduled yet and constraints the user may not have stated yet are not required."""
    problems = [f"event_id repeated: {', '.join(sorted(set(duplicates)))}"] if duplicates else []
    problems += [f"event {e} is not on the expected calendar" for e in sorted(set(by_id) - set(slots))]
    for event_id, event in sorted(by_id.items()):
        slot = slots.get(event_id)
        if slot is None:
            continue
        if event.duration != slot.duration:
            problems.append(f"event {event_id}: duration {event.duration}, expected {slot.duration}")
        if event.start < slot.min_time or event.end > slot.max_time:
            problems.append(f"event {event_id}: {format_time(event.start)}-{format_time(event.end)} is outside "
                            f"{format_time(slot.min_time)}-{format_time(slot.max_time)}")
    if overlaps:
        return Grade(0.0, "conflicting_events", overlaps, events)
    return Grade(0.0, "constraint_violated", problems, events) if problems else Grade(1.0, "pass", [], events)


def grade(text: str, slots: dict[str, ExpectedSlot], *, final_turn: bool = True,
          allow_no_json_list: bool = False, reject_think: bool = True, intermediate: str = "events") -> Grade:
    """Grade one assistant reply against the expected calendar state.

    ``final_turn=False`` (an intermediate turn of a multi-turn rollout): constraints may not have
    been asked for yet, so ``intermediate="events"`` checks the calendar so far (expected ids,
    durations, day windows, no overlaps; see ``_intermediate``) and ``"structure"`` only a
    well-formed list with no conflicts (any one-event list passes it).
    """
    if reject_think and "<think>" in text:
        return Grade(0.0, "think_found", ["the reply contains a <think> block"])
    if not slots:
        return Grade(1.0, "pass")  # nothing expected on the calendar: any valid reply passes
    raw = extract_json_list(text)
    if raw is None:
        if allow_no_json_list:
            return Grade(1.0, "pass", ["no JSON list; accepted (allow_no_json_list)"])
        return Grade(0.0, "no_json_list", ["no JSON list of events in the reply"])
    events, problems = parse_events(raw)
    if problems:
        return Grade(0.0, "malformed_event", problems, events)
    overlaps = conflicts(events)
    if not final_turn and intermediate == "structure":
        return Grade(0.0 if overlaps else 1.0, "conflicting_events" if overlaps else "pass", overlaps, events)
    by_id: dict[str, Scheduled] = {}
    duplicates = []
    for event in events:
        if event.event_id in by_id:
            duplicates.append(event.event_id)
        by_id[event.event_id] = event
    if not final_turn:
        return _intermediate(events, by_id, duplicates, overlaps, slots)
    if len(by_id) != len(slots) or duplicates:
        detail = f"{len(by_id)} distinct events, expected {len(slots)}"
        if duplicates:
            detail += f"; event_id repeated: {', '.join(sorted(set(duplicates)))}"
        return Grade(0.0, "different_number_of_events", [detail], events)
    if overlaps:
        return Grade(0.0, "conflicting_events", overlaps, events)
    missing = sorted(set(slots) - set(by_id))
    if missing:
        return Grade(0.0, "missing_event", [f"no event with event_id {', '.join(missing)}"], events)
    violated = [p for event_id, slot in slots.items() for p in slot_problems(by_id[event_id], slot)]
    if violated:
        return Grade(0.0, "constraint_violated", violated, events)
    return Grade(1.0, "pass", [], events)
