"""Comparison profiles: NeMo-Gym's single-step / terminal-multi-harness server variants as data.

NeMo-Gym runs one resources server per variant (``search_pivot``, ``toolcall_schema``,
``parallel_tool_calls``, ``terminal_multi_harness_codex``...), each a config of the same
comparator. Here they are named profiles of one environment; a row picks its profile by
``agent_ref.name``, then by ``harness``, else the default (see ``config.yaml``).
"""

from __future__ import annotations

import functools
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from environments.agent_actions.calls import MatchOptions

ArgumentRule = Literal["default", "shell", "similar", "nonempty", "ignore"]


class Profile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    message_match: Literal["any", "non_empty", "similar"] = Field(
        "non_empty", description="Expected message: any message passes (single_step), a non-empty one "
        "(codex/opencode rulebooks), or one similar to the expected text (text_match/text_threshold).")
    text_match: Literal["normalized", "word_overlap", "sequence"] = Field(
        "word_overlap", description="String argument values: word_overlap (NeMo-Gym single_step: "
        "|common words| / (|expected| + |got|), max 0.5), sequence (SequenceMatcher ratio), normalized (equal "
        "after whitespace collapsing).")
    text_threshold: float = Field(0.1, ge=0, le=1, description="Pass mark of word_overlap / sequence.")
    float_tolerance: float = Field(1e-6, ge=0, description="Absolute tolerance for expected real numbers.")
    numeric_strings: bool = Field(False, description="Accept \"14\" for 14 (NeMo-Gym: types must match).")
    allow_extra_arguments: bool = Field(False, description="Accept predicted argument keys the expected call lacks.")
    ignored_arguments: dict[str, list[str]] = Field(
        default_factory=dict, description="Tool -> argument keys never compared (volatile: yield_time_ms...); "
        "tool '*' applies to every tool.")
    argument_rules: dict[str, dict[str, ArgumentRule]] = Field(
        default_factory=dict, description="Tool -> argument -> rule: shell (canonical command equal, else "
        "SequenceMatcher >= similarity_threshold), similar (SequenceMatcher of the text or canonical JSON >= "
        "similarity_threshold), nonempty (present and non-empty), ignore; others use the value rules above.")
    similarity_threshold: float = Field(0.9, ge=0, le=1, description="Pass mark of the shell/similar rules and of "
                                        "terminus keystrokes; a row's 'threshold' overrides it.")
    name_aliases: dict[str, str] = Field(default_factory=dict, description="Tool names treated as one (alias -> name).")
    validate_schema: bool = Field(False, description="Predicted arguments must validate against the tool's JSON "
                                  "Schema in the row's declared_tools (else responses_create_params.tools).")
    batch_order: Literal["ordered", "unordered"] = Field(
        "unordered", description="function_call_batch without 'ordered': calls compared in order, or as a multiset.")
    single_call_allows_extra_calls: bool = Field(
        True, description="An expected single call is met by a response that also makes other calls "
        "(NeMo-Gym single_step); false: exactly one call (terminal_multi_harness).")
    extra_calls_limit: int | None = Field(
        1, ge=0, description="With single_call_allows_extra_calls: an expected single call is met only when the "
        "response makes at most this many other calls, none to the expected tool (sprayed variants of the call, "
        "or one call per tool, would otherwise pay); null = any number (NeMo-Gym).")
    min_word_precision: float = Field(
        0.25, ge=0, le=1, description="word_overlap strings: at least this share of the predicted words must be "
        "expected words (a query stuffed with every plausible keyword passes NeMo-Gym's overlap >= 0.1); "
        "0 = NeMo-Gym's rule alone.")
    allow_subset: bool = Field(False, description="Batches: fewer calls than expected are admissible.")
    allow_superset: bool = Field(False, description="Batches: more calls than expected are admissible.")
    reward_mode: Literal["binary_strict", "fractional", "f1"] = Field(
        "binary_strict", description="Admissible batches: 1 iff every required call matched; matched fraction; "
        "or 2*matched/(expected+predicted).")
    parse_text_tool_calls: bool = Field(True, description="With no function_call item, read <tool_call>{...}"
                                        "</tool_call> blocks in the message text as the calls.")

    @functools.cached_property
    def match_options(self) -> MatchOptions:
        return MatchOptions(rel_tol=0.0, abs_tol=self.float_tolerance, whitespace="exact",
                            allow_extra_arguments=self.allow_extra_arguments, text_match=self.text_match,
                            text_threshold=self.text_threshold, numeric_strings=self.numeric_strings,
                            min_word_precision=self.min_word_precision)

    def nemo_gym_rules(self) -> "Profile":
        """This profile with the anti-dumping guards off: NeMo-Gym's documented scoring."""
        return self.model_copy(update={"extra_calls_limit": None, "min_word_precision": 0.0})

    def canonical_name(self, name: str) -> str:
        name = name.strip()
        return self.name_aliases.get(name, name)

    def ignored(self, tool: str) -> frozenset[str]:
        return frozenset(self.ignored_arguments.get(tool, ())) | frozenset(self.ignored_arguments.get("*", ()))
