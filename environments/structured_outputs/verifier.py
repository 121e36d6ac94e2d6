"""structured_outputs: does the response parse as ``schema_type`` and satisfy ``schema_str``?

Two response surfaces, as in NeMo-Gym's ``structured_outputs`` server:

* ``response_mode: text`` (default; NeMo-Gym v1-v3 rows): the assistant's text is parsed
  as JSON / YAML / XML / TOML / CSV;
* ``response_mode: tool_call`` (v4 rows): the answer is a ``function_call`` to
  ``tool_name``; its ``arguments`` JSON is the payload, unwrapped from
  ``tool_payload_key`` when the row uses a wrapper mode.

reward = parse_weight * parsed + schema_weight * schema_valid (weights in config.yaml).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from environments.structured_outputs.parsing import (
    FORMATS,
    ParseFailure,
    coerce,
    parse_text,
    unwrap_xml_root,
)
from environments.structured_outputs.schema import InvalidSchema, compile_schema
from servers import json_values
from servers.answer_text import is_blank, strip_think
from servers.environment import EnvConfig, Environment, Verdict
from servers.wire import ResponseObject, RowModel


class StructuredOutputsConfig(EnvConfig):
    parse_weight: float = Field(0.0, ge=0.0, le=1.0, description="Reward share for a response that parses.")
    schema_weight: float = Field(1.0, ge=0.0, le=1.0, description="Reward share for a parsed response that validates.")
    strict_objects: bool = Field(True, description="Objects with 'properties' require all of them and forbid others (NeMo-Gym parity).")
    coerce_types: bool = Field(True, description="XML/CSV: convert strings to the schema's number/integer/boolean types before validating.")
    strip_thinking: bool = Field(True, description="Drop <think>...</think> reasoning before parsing text responses; "
                                                   "a block that never closes leaves no answer.")
    max_response_chars: int = Field(200_000, gt=0, description="Longer text responses score zero (error_type 'too_long') without parsing.")

    @model_validator(mode="after")
    def _weights_sum_to_one(self) -> "StructuredOutputsConfig":
        if abs(self.parse_weight + self.schema_weight - 1.0) > 1e-9:
            raise ValueError(f"parse_weight + schema_weight must be 1, got {self.parse_weight} + {self.schema_weight}")
        return self


class StructuredOutputsRow(RowModel):
    schema_str: str = Field(description="The JSON Schema (as a string) the output must satisfy.")
    schema_type: str = Field("json", description="Output format: json | yaml | xml | toml | csv.")
    response_mode: Literal["text", "tool_call"] = Field("text", description="Where the answer is: text or a function call.")
    tool_name: str | None = Field(None, description="tool_call mode: the function the answer must call.")
    tool_payload_key: str | None = Field(None, description="tool_call mode: argument key wrapping the payload, if any.")

    @field_validator("schema_type", mode="before")
    @classmethod
    def _known_format(cls, value: Any) -> str:
        fmt = str(value).strip().lower()
        if fmt not in FORMATS:
            raise ValueError(f"schema_type must be one of {list(FORMATS)}, got {value!r}")
        return fmt

    @field_validator("schema_str")
    @classmethod
    def _valid_schema(cls, value: str) -> str:
        # A broken schema is the dataset's fault, not the policy's: reject the row (422)
        # rather than hand the model a zero it could not have avoided.
        try:
            compile_schema(value, False)
        except InvalidSchema as exc:
            raise ValueError(str(exc)) from None
        return value

    @model_validator(mode="after")
    def _tool_mode_needs_tool(self) -> "StructuredOutputsRow":
        if self.response_mode == "tool_call" and not self.tool_name:
            raise ValueError("response_mode 'tool_call' needs 'tool_name'")
        return self


class StructuredOutputs(Environment):
    name = "structured_outputs"
    agent_names = ("structured_outputs_simple_agent", "structured_outputs_v4_simple_agent",)  # NeMo-Gym agent_ref.name values routed here
    domain = "instruction_following"
    summary = "Parses JSON/YAML/XML/TOML/CSV text or a tool call's arguments and validates it against the row's JSON Schema."
    Row = StructuredOutputsRow
    Config = StructuredOutputsConfig
    reads_create_params = False  # rows are 17-30 KB of prompt and tools only echoed back: not built

    async def verify(self, row: StructuredOutputsRow, response: ResponseObject, session: Any | None) -> Verdict:
        cfg: StructuredOutputsConfig = self.config  # type: ignore[assignment]
        compiled = compile_schema(row.schema_str, cfg.strict_objects)
        if row.response_mode == "tool_call":
            payload, error = _tool_payload(row, response)
        else:
            payload, error = self._text_payload(row, response, compiled.schema)
        if error is not None:
            return self._score(parsed=False, valid=False, error=error)
        # NaN and Infinity compare false with every bound: a schema's minimum/maximum would let them pass.
        # JSON (text or tool arguments) is parsed without them; YAML and TOML have their own literals.
        if row.response_mode == "text" and row.schema_type in ("yaml", "toml") \
                and (where := json_values.non_finite_path(payload)) is not None:
            return self._score(parsed=True, valid=False, error=("not_a_number", f"{where}: NaN/Infinity is not a number"))
        problem = compiled.first_error(payload)
        if problem is not None:
            return self._score(parsed=True, valid=False, error=("validation_error", problem))
        return self._score(parsed=True, valid=True, error=None)

    def _text_payload(self, row: StructuredOutputsRow, response: ResponseObject,
                      schema: Any) -> tuple[Any, tuple[str, str] | None]:
        cfg: StructuredOutputsConfig = self.config  # type: ignore[assignment]
        text = response.output_text
        if cfg.strip_thinking:  # the shared reading: reasoning that never closes is no answer
            text = strip_think(text)
        if is_blank(text):  # invisible characters are not an answer either
            return None, ("empty_response", "no assistant text in the response")
        if len(text) > cfg.max_response_chars:
            return None, ("too_long", f"{len(text)} characters > max_response_chars {cfg.max_response_chars}")
        try:
            payload = parse_text(row.schema_type, text)
        except ParseFailure as exc:
            return None, ("parse_error", str(exc))
        if row.schema_type == "xml":
            payload = unwrap_xml_root(payload, schema)
        if cfg.coerce_types and row.schema_type in ("xml", "csv"):
            payload = coerce(payload, schema)
        return payload, None

    def _score(self, *, parsed: bool, valid: bool, error: tuple[str, str] | None) -> Verdict:
        cfg: StructuredOutputsConfig = self.config  # type: ignore[assignment]
        components = {"parse": cfg.parse_weight * parsed, "schema": cfg.schema_weight * valid}
        extras: dict[str, Any] = {"parsed": parsed, "schema_valid": valid,
                                  "error_type": error[0] if error else None,
                                  "error_message": error[1] if error else None}
        return Verdict(reward=components["parse"] + components["schema"], components=components, extras=extras)


def _tool_payload(row: StructuredOutputsRow, response: ResponseObject) -> tuple[Any, tuple[str, str] | None]:
    """The payload of the last call to ``row.tool_name`` (NeMo-Gym v4 semantics)."""
    calls = response.function_calls
    if not calls:
        return None, ("missing_tool_call", f"no function_call in the response (expected {row.tool_name!r})")
    matching = [call for call in calls if call.name == row.tool_name]
    if not matching:
        names = sorted({str(call.name) for call in calls})
        return None, ("wrong_tool_name", f"called {names}, expected {row.tool_name!r}")
    try:
        arguments = json_values.loads(matching[-1].arguments or "")
    except ValueError as exc:
        return None, ("tool_arguments_parse_error", f"arguments are not JSON: {exc}")
    if row.tool_payload_key:
        if not isinstance(arguments, dict) or row.tool_payload_key not in arguments:
            return None, ("missing_tool_payload_key", f"arguments lack key {row.tool_payload_key!r}")
        arguments = arguments[row.tool_payload_key]
    return arguments, None
