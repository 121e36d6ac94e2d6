"""tool_call: single-step function calling scored against the row's expected calls.

Expected calls come from ``expected_answers`` (xLAM / ``xlam_fc`` rows: a list) or
``expected_action`` (PivotRL / ``swe_pivot`` rows: one call). Predicted calls are the
response's ``function_call`` items. Matching rules live in ``environments/agent_actions/calls.py`` (shared with swe_pivot and next_action).

Reward components (they sum to the reward):
  name      = name_weight      * name score       (multiset name overlap / max(#expected, #predicted))
  arguments = arguments_weight * arguments score  (fully matched calls / same denominator)
In ``binary`` mode both scores are 1 only when the call sets match exactly (xLAM's rule:
same count, every call matched), else 0.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from environments.agent_actions.calls import (DeclaredTypes, MatchOptions, call_problems, make_call, match_calls,
                                             parse_arguments, type_problems)
from servers.environment import EnvConfig, Environment, Verdict
from servers.wire import ResponseObject, RowModel


class ExpectedCall(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1)
    arguments: dict[str, Any] | str = Field(default_factory=dict)

    @field_validator("arguments")
    @classmethod
    def _json_object(cls, value: dict[str, Any] | str) -> dict[str, Any] | str:
        # A gold call whose arguments are not a JSON object could never be matched: every
        # response would silently score 0. That is a broken row (422), not a wrong answer.
        if parse_arguments(value) is None:
            raise ValueError(f"arguments must be an object or a JSON string of one, got {str(value)[:100]!r}")
        return value


class ToolCallRow(RowModel):
    expected_answers: list[ExpectedCall] | None = Field(None, description="xLAM: the expected calls (any order).")
    expected_action: ExpectedCall | None = Field(None, description="Pivot rows: the one expected call.")

    @model_validator(mode="after")
    def _one_source(self) -> "ToolCallRow":
        if (self.expected_answers is None) == (self.expected_action is None):
            raise ValueError("give exactly one of 'expected_answers' (list of calls) or 'expected_action' (one call)")
        return self

    def expected_calls(self) -> list[ExpectedCall]:
        return self.expected_answers if self.expected_answers is not None else [self.expected_action]


class ToolCallConfig(EnvConfig):
    scoring: Literal["binary", "partial"] = Field("binary", description="binary: 1 only for an exact call-set "
                                                  "match (xLAM); partial: weighted name/argument scores.")
    name_weight: float = Field(0.2, ge=0, description="Weight of the name component.")
    arguments_weight: float = Field(0.8, ge=0, description="Weight of the arguments component.")
    rel_tol: float = Field(1e-6, ge=0, description="Relative tolerance for expected real numbers (integers are exact).")
    abs_tol: float = Field(1e-9, ge=0, description="Absolute tolerance for expected real numbers.")
    whitespace: Literal["collapse", "strip", "exact"] = Field("collapse", description="String whitespace rule.")
    case_sensitive: bool = Field(True, description="Compare string arguments case-sensitively.")
    allow_extra_arguments: bool = Field(False, description="Accept predicted arguments the expected call lacks.")
    typed_arguments: bool = Field(True, description="A predicted argument must have the JSON type the row's tool "
                                                    "declares for it (\"02134\" for a string is not 2134); false = "
                                                    "values compared without the tool's types.")

    @model_validator(mode="after")
    def _weights(self) -> "ToolCallConfig":
        if abs(self.name_weight + self.arguments_weight - 1.0) > 1e-9:
            raise ValueError("name_weight + arguments_weight must be 1 (the reward is in [0, 1])")
        return self


class ToolCall(Environment):
    name = "tool_call"
    agent_names = ("xlam_fc_simple_agent", "tool_call_simple_agent",)  # NeMo-Gym agent_ref.name values routed here
    domain = "agent"
    max_steps = 1  # one model turn is the task: its calls are scored, not run (a Gym agent would post them here)
    summary = ("Single-step function calling: the response's function_call items vs the expected calls "
               "(name, JSON-normalised arguments with numeric tolerance, order-insensitive).")
    Row = ToolCallRow
    Config = ToolCallConfig
    config: ToolCallConfig

    async def verify(self, row: ToolCallRow, response: ResponseObject, session: Any) -> Verdict:
        cfg = self.config
        options = MatchOptions(rel_tol=cfg.rel_tol, abs_tol=cfg.abs_tol, whitespace=cfg.whitespace,
                               case_sensitive=cfg.case_sensitive, allow_extra_arguments=cfg.allow_extra_arguments)
        expected = [make_call(c.name, c.arguments) for c in row.expected_calls()]
        predicted = [make_call(item.name or "", item.arguments) for item in response.function_calls]
        if cfg.typed_arguments:
            declared = DeclaredTypes(row.responses_create_params.tools)
            result = match_calls(expected, predicted, options,
                                 lambda e, p: call_problems(e, p, options) or type_problems(p, declared))
        else:
            result = match_calls(expected, predicted, options)
        if cfg.scoring == "binary":
            name_score = arguments_score = 1.0 if result.exact else 0.0
        else:
            name_score, arguments_score = result.name_score, result.arguments_score
        components = {"name": cfg.name_weight * name_score, "arguments": cfg.arguments_weight * arguments_score}
        return Verdict(
            reward=sum(components.values()), components=components,
            extras={"exact_match": result.exact, "name_score": result.name_score,
                    "arguments_score": result.arguments_score, "num_expected_calls": len(expected),
                    "num_predicted_calls": len(predicted), "call_matches": [c.as_dict() for c in result.calls],
                    "unmatched_predicted_calls": [predicted[k].name for k in result.unmatched_predicted]})
