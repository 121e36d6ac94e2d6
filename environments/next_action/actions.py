"""Agent actions: the expected one (row) and the one a response took (harness-aware parsing).

An action is one of NeMo-Gym's three PivotRL shapes:

* ``message``: the agent talks to the user (``content``);
* ``function_call``: one tool call (``name``, ``arguments`` as a JSON-object string);
* ``function_call_batch``: several calls in one turn (``calls``; ``ordered`` as in
  ``terminal_multi_harness``, absent = the profile's default).

A response becomes an action the way the harness that produced it would read it:

* structured harnesses (codex, opencode, generic): its ``function_call`` items, one -> a call,
  several -> a batch; assistant preamble text on a tool-call turn is ignored; with no call,
  optionally ``<tool_call>{...}</tool_call>`` blocks printed in the text; else the message;
* terminus harnesses: the final message text is a command JSON
  (``{"analysis", "plan", "commands": [{"keystrokes", "duration"}], "task_complete"}``),
  after any ``</think>`` and a code fence around it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator

from environments.agent_actions.text_calls import text_tool_calls
from servers.wire import ResponseObject

TERMINUS_HARNESSES = frozenset({"terminus", "terminus_1", "terminus_2"})
_FENCE = re.compile(r"^```[\w-]*\s*\n(.*)\n```\s*$", re.DOTALL)


class MessageAction(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["message"]
    content: str


class FunctionCallAction(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["function_call"]
    name: str = Field(min_length=1)
    arguments: str = Field(description="JSON-object string of the expected arguments.")

    @field_validator("arguments", mode="before")
    @classmethod
    def _json_object(cls, value: Any) -> str:
        # Gold arguments that are not a JSON object could never be matched: a broken row (422),
        # not a wrong answer. Objects given inline are accepted and serialised.
        if isinstance(value, dict):
            return json.dumps(value)
        if not isinstance(value, str):
            raise ValueError(f"arguments must be a JSON-object string, got {type(value).__name__}")
        try:
            parsed = json.loads(value) if value.strip() else {}
        except ValueError as exc:
            raise ValueError(f"arguments are not JSON: {exc}") from None
        if not isinstance(parsed, dict):
            raise ValueError(f"arguments must be a JSON object, got {type(parsed).__name__}")
        return value

    @property
    def parsed_arguments(self) -> dict[str, Any]:
        return json.loads(self.arguments) if self.arguments.strip() else {}


class FunctionCallBatchAction(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["function_call_batch"]
    calls: list[FunctionCallAction] = Field(min_length=1)
    ordered: bool | None = Field(None, description="Calls must come in this order; null: the profile decides.")


ExpectedAction = Annotated[Union[MessageAction, FunctionCallAction, FunctionCallBatchAction],
                           Field(discriminator="type")]


@dataclass
class PredictedCall:
    name: str
    arguments: Any  # raw: a JSON string (function_call item) or an object (text block)
    error: str | None = None  # the call could not be read (unparsable <tool_call> block)


@dataclass
class PredictedAction:
    """What the response did. ``kind``: message, calls, command_json or none."""

    kind: str
    text: str = ""
    calls: list[PredictedCall] = field(default_factory=list)
    command_json: dict[str, Any] | None = None
    source: str = ""  # function_call_items | text_tool_calls | message | terminus_json
    parse_error: str | None = None


def strip_reasoning(text: str) -> str:
    """Drop a leaked ``<think>...</think>`` prefix and a code fence around the rest."""
    if "</think>" in text:
        text = text.rsplit("</think>", 1)[1]
    text = text.strip()
    fenced = _FENCE.match(text)
    return fenced.group(1).strip() if fenced else text


def parse_command_json(text: str) -> dict[str, Any]:
    """A terminus command JSON object; ValueError naming what is wrong."""
    try:
        value = json.loads(strip_reasoning(text))
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError(f"a command JSON must be an object, got {type(value).__name__}")
    commands = value.get("commands")
    if not isinstance(commands, list):
        raise ValueError("'commands' must be a list")
    for i, command in enumerate(commands):
        if not isinstance(command, dict) or not isinstance(command.get("keystrokes"), str):
            raise ValueError(f"commands[{i}] must be an object with a string 'keystrokes'")
    return value


def predicted_action(response: ResponseObject, *, harness: str, parse_text_tool_calls: bool) -> PredictedAction:
    if harness in TERMINUS_HARNESSES:
        text = response.last_message_text
        if not text.strip():
            return PredictedAction("none")
        try:
            return PredictedAction("command_json", text=text, command_json=parse_command_json(text),
                                   source="terminus_json")
        except ValueError as exc:
            return PredictedAction("command_json", text=text, source="terminus_json", parse_error=str(exc))
    items = response.function_calls
    if items:
        return PredictedAction("calls", calls=[PredictedCall(i.name or "", i.arguments) for i in items],
                               source="function_call_items")
    text = response.last_message_text
    if parse_text_tool_calls and "<tool_call>" in text:
        found = text_tool_calls(text)
        if found:
            return PredictedAction("calls", text=text, source="text_tool_calls",
                                   calls=[PredictedCall(c.name, c.arguments, c.error) for c in found])
    if any(item.type == "message" for item in response.output):
        return PredictedAction("message", text=text, source="message")
    return PredictedAction("none")
