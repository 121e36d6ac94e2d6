"""next_action: one agent step (message, tool call or parallel calls) vs the expected action.

Answers NeMo-Gym's PivotRL single-step servers with one implementation:
``single_step_tool_use_with_argument_comparison`` and its ``search_pivot`` /
``toolcall_schema`` / ``parallel_tool_calls`` variants, and ``terminal_multi_harness``
(codex, opencode, stirrup, agent006 harnesses; terminus-style command JSON). The variants are
profiles in ``config.yaml`` (``profiles.py``); a row picks one by ``agent_ref.name``, then by
``harness``, else ``default_profile``. Parsing the response is harness-aware (``actions.py``);
the comparison (``compare.py``) uses the matching code shared with ``tool_call`` and
``swe_pivot`` (``environments/agent_actions``). Reward is 1 or 0 (batches: per ``reward_mode``)
with NeMo-Gym's ``category``.
"""

from __future__ import annotations

from typing import Any

import jsonschema
from pydantic import Field, model_validator

from environments.next_action.actions import (TERMINUS_HARNESSES, ExpectedAction, MessageAction,
                                              PredictedAction, parse_command_json, predicted_action)
from environments.next_action.compare import Context, compare_action, declared_schemas, schema_validator
from environments.next_action.profiles import Profile
from servers.environment import EnvConfig, Environment, Verdict
from servers.wire import ResponseObject, RowModel


class NextActionRow(RowModel):
    expected_action: ExpectedAction = Field(..., description="message {content} | function_call {name, arguments} "
                                            "| function_call_batch {calls, ordered?}.")
    harness: str = Field("generic", description="Agent harness that produced the trajectory: codex, opencode, "
                         "stirrup, agent006, terminus_1, terminus_2, generic.")
    declared_tools: list[dict[str, Any]] | None = Field(None, description="Tool definitions the step could call "
                                                        "(schema validation); default responses_create_params.tools.")
    threshold: float | None = Field(None, ge=0, le=1, description="Overrides the profile's similarity_threshold.")
    agent_ref: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> "NextActionRow":
        if self.harness in TERMINUS_HARNESSES:
            if not isinstance(self.expected_action, MessageAction):
                raise ValueError(f"harness {self.harness!r} rows expect a 'message' action holding the command JSON")
            try:
                parse_command_json(self.expected_action.content)
            except ValueError as exc:
                raise ValueError(f"expected_action.content is not a terminus command JSON: {exc}") from None
        # A declared schema that is not a valid JSON Schema would fail every response: a broken row.
        for name, schema in declared_schemas(self.tools).items():
            try:
                schema_validator(schema)
            except jsonschema.exceptions.SchemaError as exc:
                raise ValueError(f"declared tool {name!r}: parameters is not a valid JSON Schema: {exc.message}") from None
        return self

    @property
    def tools(self) -> list[dict[str, Any]]:
        return self.declared_tools if self.declared_tools is not None else self.responses_create_params.tools

    @property
    def agent_name(self) -> str | None:
        name = (self.agent_ref or {}).get("name")
        return name if isinstance(name, str) else None


class NextActionConfig(EnvConfig):
    profiles: dict[str, Profile] = Field(..., description="Named comparison profiles (see profiles.py).")
    agent_profiles: dict[str, str] = Field(default_factory=dict, description="agent_ref.name -> profile.")
    harness_profiles: dict[str, str] = Field(default_factory=dict, description="Row 'harness' -> profile.")
    default_profile: str = Field("single_step", description="Profile of rows neither map names.")
    nemo_gym_parity: bool = Field(
        False, description="Score exactly as NeMo-Gym's documented servers: every profile's extra_calls_limit "
                           "null and min_word_precision 0 (a sprayed set of parallel calls or a keyword-stuffed "
                           "query then pays). Default false: the profiles' guards apply.")

    @model_validator(mode="after")
    def _known_profiles(self) -> "NextActionConfig":
        named = {"default_profile": [self.default_profile], "agent_profiles": list(self.agent_profiles.values()),
                 "harness_profiles": list(self.harness_profiles.values())}
        for key, names in named.items():
            unknown = sorted(set(names) - set(self.profiles))
            if unknown:
                raise ValueError(f"{key} names unknown profile(s) {unknown}; defined: {sorted(self.profiles)}")
        return self


class NextActionEnvironment(Environment):
    name = "next_action"
    domain = "agent"
    summary = ("One agent step (chat message, tool call, parallel calls, terminus command JSON) vs the expected "
               "action; NeMo-Gym single_step / search_pivot / toolcall_schema / terminal_multi_harness profiles.")
    Row = NextActionRow
    Config = NextActionConfig
    max_steps = 1  # one model turn is the task: its action is scored, not run (a Gym agent would post it here)
    agent_names = (
        "single_step_tool_use_with_argument_comparison_agent",
        "search_pivot_single_step_tool_use_with_argument_comparison_agent",
        "toolcall_schema_single_step_tool_use_with_argument_comparison_agent",
        "parallel_tool_calls_single_step_tool_use_with_argument_comparison_agent",
        "terminal_multi_harness_agent",
        "terminal_multi_harness_codex_agent",
        "terminal_multi_harness_opencode_agent",
        "terminal_multi_harness_stirrup_agent",
        "terminal_multi_harness_agent006_agent",
    )

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        cfg: NextActionConfig = self.config  # type: ignore[assignment]
        self._profiles = {name: p.nemo_gym_rules() if cfg.nemo_gym_parity else p for name, p in cfg.profiles.items()}

    def profile_for(self, row: NextActionRow) -> str:
        cfg: NextActionConfig = self.config  # type: ignore[assignment]
        agent = row.agent_name
        if agent is not None and agent in cfg.agent_profiles:
            return cfg.agent_profiles[agent]
        return cfg.harness_profiles.get(row.harness, cfg.default_profile)

    async def verify(self, row: NextActionRow, response: ResponseObject, session: Any | None) -> Verdict:
        cfg: NextActionConfig = self.config  # type: ignore[assignment]
        profile_name = self.profile_for(row)
        profile = self._profiles[profile_name]
        terminus = row.harness in TERMINUS_HARNESSES
        predicted = predicted_action(response, harness=row.harness, parse_text_tool_calls=profile.parse_text_tool_calls)
        tools = row.tools
        ctx = Context(profile, row.threshold if row.threshold is not None else profile.similarity_threshold,
                      declared_schemas(tools) if tools else None)
        outcome = compare_action(row.expected_action, predicted, ctx, terminus=terminus)
        extras: dict[str, Any] = {
            "category": outcome.category.value, "category_code": outcome.category.name, "profile": profile_name,
            "harness": row.harness, "problems": outcome.problems, "predicted_action": _describe(predicted),
        }
        if outcome.similarity:
            extras["similarity"] = outcome.similarity
        return Verdict(outcome.reward, extras=extras)


def _describe(predicted: PredictedAction) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": predicted.kind, "source": predicted.source}
    if predicted.kind == "calls":
        out["calls"] = [{"name": c.name, "arguments": c.arguments} for c in predicted.calls]
    elif predicted.kind == "message":
        out["text"] = predicted.text[:500]
    elif predicted.kind == "command_json":
        out["command_json"] = predicted.command_json
        if predicted.parse_error:
            out["parse_error"] = predicted.parse_error
    return out

