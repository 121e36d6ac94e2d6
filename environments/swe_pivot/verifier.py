"""swe_pivot: one coding-agent step (a tool call) scored against the expected action.

PivotRL-style single-step rows (NeMo-Gym ``swe_pivot``): the prompt is a trajectory prefix,
``expected_action`` is the reference next call. The predicted call is the response's first
``function_call`` item (or, for models that print calls as text, a ``<tool_call>{...}``
block in the final message). Reward = ``name_weight`` * (tool name matches) +
``arguments_weight`` * (arguments match after normalisation, see
``environments/agent_actions/arguments.py``), reported as ``reward_components``;
arguments only score when the name matches.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from environments.agent_actions.arguments import compare_arguments, parse_arguments
from environments.agent_actions.text_calls import text_tool_calls
from servers.environment import EnvConfig, Environment, Verdict
from servers.wire import ResponseObject, RowModel


class ExpectedAction(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str = "function_call"
    name: str = Field(..., min_length=1)
    arguments: str | dict[str, Any] = "{}"

    @field_validator("arguments")
    @classmethod
    def _json_object(cls, value: str | dict[str, Any]) -> str | dict[str, Any]:
        parse_arguments(value)  # a reference whose arguments do not parse is a broken row: 422
        return value


class SwePivotRow(RowModel):
    expected_action: ExpectedAction = Field(..., description="The reference next tool call.")
    uuid: str | None = None
    pivot_tags: list[str] = Field(default_factory=list)


class SwePivotConfig(EnvConfig):
    name_weight: float = Field(0.2, ge=0, description="Reward for calling the expected tool.")
    arguments_weight: float = Field(0.8, ge=0, description="Reward for its arguments matching (exact, or fraction).")
    argument_scoring: Literal["exact", "fraction"] = Field(
        "exact", description="exact: all arguments must match; fraction: matched keys / all keys.")
    shell_tools: list[str] = Field(["execute_bash", "bash", "run_shell", "shell"],
                                   description="Tools whose 'command' argument is a shell command line.")
    editor_tools: list[str] = Field(["str_replace_editor", "file_editor", "edit_file"],
                                    description="Tools with str_replace_editor-style arguments.")
    name_aliases: dict[str, str] = Field({"bash": "execute_bash", "file_editor": "str_replace_editor"},
                                         description="Tool names treated as the same tool (alias -> canonical).")
    ignored_arguments: list[str] = Field(["security_risk", "thought"],
                                         description="Argument keys that never affect the score.")
    parse_text_tool_calls: bool = Field(True, description="Accept a <tool_call>{json}</tool_call> block when the response has no function_call item.")

    @model_validator(mode="after")
    def _weights(self) -> "SwePivotConfig":
        if self.name_weight + self.arguments_weight <= 0:
            raise ValueError("name_weight + arguments_weight must be positive")
        return self


class SwePivotEnvironment(Environment):
    name = "swe_pivot"
    agent_names = ("swe_pivot_simple_agent", "swe_pivot_tool_simulation_agent",
                   "swe_pivot_single_step_tool_use_with_argument_comparison_agent",)  # NeMo-Gym agent_ref.name values routed here
    domain = "agent"
    summary = "One coding-agent tool call vs the expected action (shell/path/editor-aware argument matching)"
    max_steps = 1  # one model turn is the task (NeMo-Gym's swe_pivot config): its calls are scored, not run
    Row = SwePivotRow
    Config = SwePivotConfig

    def _canonical_name(self, name: str) -> str:
        cfg: SwePivotConfig = self.config  # type: ignore[assignment]
        name = name.strip()
        return cfg.name_aliases.get(name, name)

    def _family(self, name: str) -> str:
        cfg: SwePivotConfig = self.config  # type: ignore[assignment]
        canon = {self._canonical_name(n) for n in cfg.shell_tools}
        if name in canon:
            return "shell"
        if name in {self._canonical_name(n) for n in cfg.editor_tools}:
            return "editor"
        return "generic"

    def _predicted_call(self, response: ResponseObject) -> tuple[str, Any, int] | None:
        calls = response.function_calls
        if calls:
            return calls[0].name or "", calls[0].arguments, len(calls)
        cfg: SwePivotConfig = self.config  # type: ignore[assignment]
        if cfg.parse_text_tool_calls:
            found = text_tool_calls(response.last_message_text)
            if found:
                first = found[0]
                if first.error:
                    return "", "<unparsable <tool_call> block>", len(found)
                return first.name, first.arguments, len(found)
        return None

    async def verify(self, row: SwePivotRow, response: ResponseObject, session: Any | None) -> Verdict:
        cfg: SwePivotConfig = self.config  # type: ignore[assignment]
        total = cfg.name_weight + cfg.arguments_weight
        w_name, w_args = cfg.name_weight / total, cfg.arguments_weight / total  # reward stays in [0, 1]
        expected_name = self._canonical_name(row.expected_action.name)
        extras: dict[str, Any] = {"expected_action": {"name": row.expected_action.name,
                                                      "arguments": row.expected_action.arguments}}
        predicted = self._predicted_call(response)
        if predicted is None:
            extras["predicted_action"] = None
            return Verdict(0.0, components={"tool_name": 0.0, "arguments": 0.0},
                           extras={**extras, "mismatch": "no tool call in the response"})
        name, raw_args, count = predicted
        extras["predicted_action"] = {"name": name, "arguments": raw_args}
        extras["predicted_calls"] = count
        name_ok = self._canonical_name(name) == expected_name
        extras["name_match"] = name_ok
        args_score = 0.0
        if name_ok:
            try:
                got = parse_arguments(raw_args)
            except ValueError as exc:  # json.JSONDecodeError is a ValueError
                extras["arguments_error"] = f"predicted arguments are not a JSON object: {exc}"
                got = None
            if got is not None:
                want = parse_arguments(row.expected_action.arguments)
                cmp = compare_arguments(self._family(expected_name), want, got, frozenset(cfg.ignored_arguments))
                extras["argument_match"] = {"matched": cmp.matched, "mismatched": cmp.mismatched,
                                            "missing": cmp.missing, "extra": cmp.extra}
                args_score = 1.0 if cmp.exact else (cmp.fraction if cfg.argument_scoring == "fraction" else 0.0)
        components = {"tool_name": w_name * name_ok, "arguments": w_args * args_score}
        return Verdict(sum(components.values()), components=components, extras=extras)
