"""Compare the predicted action with the expected one under a profile.

Pure (no I/O). Categories are NeMo-Gym's ``StepRewardCategory`` sentences, so a reply reads
the same as theirs; ``category_code`` is the enum name, for counting.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import jsonschema

from environments.agent_actions.calls import Call, make_call, match_calls, sequence_similarity, texts_match, value_problems
from environments.agent_actions.shell import commands_equivalent
from environments.next_action.actions import (FunctionCallAction, FunctionCallBatchAction, MessageAction,
                                              PredictedAction, PredictedCall, parse_command_json)
from environments.next_action.profiles import Profile


class Category(str, Enum):
    NO_ACTION_FOUND = "No tool call or chat message was found in the response"
    NO_EXPECTED_TOOL_CALL = "No tool call was found when one was expected"
    EXPECTED_CHAT_MESSAGE_FOUND = "A chat message was found as expected"
    NO_EXPECTED_CHAT_MESSAGE = "A tool call was executed when a chat message was expected"
    MESSAGE_CONTENT_DIFFERENT = "The assistant message content is different than expected"
    UNEXPECTED_TOOL = "The tool in a tool call is not the expected tool"
    ARGUMENTS_DECODE_ERROR = "An error occurred when decoding the arguments string in a tool call as a JSON object"
    ARGUMENT_OBJECT_KEYS_DIFFERENT = ("The keys in an object in an argument value in a tool call are different "
                                      "than the keys in the expected object")
    ARGUMENT_VALUE_DIFFERENT = "An argument value in a tool call is different than the expected value"
    TOOL_SCHEMA_NOT_FOUND = "No declared tool schema was found for the tool call"
    TOOL_SCHEMA_VALIDATION_FAILED = "The tool call arguments do not conform to the declared tool schema"
    MULTIPLE_TOOL_CALLS_FOUND = "Multiple tool calls were found when exactly one was expected"
    FUNCTION_CALL_BATCH_LENGTH_DIFFERENT = "The number of tool calls in a batch is different than expected"
    EXPECTED_TOOL_CALL = "A tool call that matches the expected tool call was found"
    EXPECTED_TOOL_CALL_BATCH = "A tool-call batch that matches the expected tool calls was found"
    # Terminus command JSON (terminus_judge's failure codes, as sentences).
    COMMAND_JSON_INVALID = "The response is not a valid command JSON"
    TASK_COMPLETE_DIFFERENT = "The task_complete flag is different than expected"
    COMMANDS_DIFFERENT = "The commands are different than the expected commands"
    EXPECTED_COMMANDS = "Commands that match the expected commands were found"


@dataclass
class Outcome:
    reward: float
    category: Category
    problems: list[str] = field(default_factory=list)
    similarity: dict[str, float] = field(default_factory=dict)  # rule-scored arguments (single call) / keystrokes


@dataclass
class Context:
    """Per-row inputs of a comparison."""

    profile: Profile
    threshold: float  # shell/similar rules and terminus keystrokes
    schemas: dict[str, dict[str, Any]] | None  # declared tool name -> JSON Schema; None: nothing declared
    similarity: dict[str, float] = field(default_factory=dict)


@functools.lru_cache(maxsize=1024)
def _validator(schema_json: str) -> Any:
    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)  # raises SchemaError: the row validator turns it into a 422
    return cls(schema)


def schema_validator(schema: dict[str, Any]) -> Any:
    return _validator(json.dumps(schema, sort_keys=True))


def declared_schemas(tools: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Tool definitions (Responses ``{"name", "parameters"}`` or Chat ``{"function": {...}}``) by name."""
    out: dict[str, dict[str, Any]] = {}
    for tool in tools:
        spec = tool.get("function") if isinstance(tool.get("function"), dict) else tool
        if isinstance(spec.get("name"), str) and isinstance(spec.get("parameters"), dict):
            out[spec["name"]] = spec["parameters"]
    return out


def _nonempty(value: Any) -> bool:
    return value is not None and value != "" and value != [] and value != {}


def _rule_problems(rule: str, key: str, want: Any, got: Any, ctx: Context, where: str) -> list[str]:
    if rule == "nonempty":
        return [] if _nonempty(got) else [f"{where}: must be present and non-empty"]
    if rule == "shell" and isinstance(want, str) and isinstance(got, str):
        if commands_equivalent(want, got):
            ctx.similarity[where] = 1.0
            return []
    if rule in ("shell", "similar"):
        a = want if isinstance(want, str) else json.dumps(want, sort_keys=True)
        b = got if isinstance(got, str) else json.dumps(got, sort_keys=True)
        score = sequence_similarity(a, b, ctx.threshold)
        ctx.similarity[where] = round(score, 4)
        return [] if score >= ctx.threshold else [f"{where}: similarity {score:.2f} < {ctx.threshold:g}"]
    return value_problems(want, got, ctx.profile.match_options, where)


def call_check(expected: Call, predicted: Call, ctx: Context) -> tuple[Category, list[str]]:
    """One expected call vs one predicted call: the failure category (EXPECTED_TOOL_CALL when they
    match) and the problems in words."""
    profile = ctx.profile
    name = profile.canonical_name(expected.name)
    if profile.canonical_name(predicted.name) != name:
        return Category.UNEXPECTED_TOOL, [f"name: expected {expected.name!r}, got {predicted.name!r}"]
    if predicted.arguments is None:
        return Category.ARGUMENTS_DECODE_ERROR, [f"arguments are not a JSON object: {str(predicted.raw_arguments)[:200]!r}"]
    if profile.validate_schema and ctx.schemas is not None:
        schema = ctx.schemas.get(predicted.name) or ctx.schemas.get(name)
        if schema is None:
            return Category.TOOL_SCHEMA_NOT_FOUND, [f"no declared tool named {predicted.name!r}"]
        error = jsonschema.exceptions.best_match(schema_validator(schema).iter_errors(predicted.arguments))
        if error is not None:
            return Category.TOOL_SCHEMA_VALIDATION_FAILED, [f"schema: {error.message}"[:300]]
    ignored = profile.ignored(name)
    rules = profile.argument_rules.get(name, {})
    want = {k: v for k, v in expected.arguments.items() if k not in ignored}  # type: ignore[union-attr]
    got = {k: v for k, v in predicted.arguments.items() if k not in ignored}
    keys: list[str] = [f"arguments.{k}: missing" for k in want if k not in got and rules.get(k) != "ignore"]
    if not profile.allow_extra_arguments:
        keys += [f"arguments.{k}: unexpected" for k in got if k not in want]
    if keys:
        return Category.ARGUMENT_OBJECT_KEYS_DIFFERENT, keys
    problems: list[str] = []
    for key, value in want.items():
        rule = rules.get(key, "default")
        if rule != "ignore":
            problems += _rule_problems(rule, key, value, got.get(key), ctx, f"arguments.{key}")
    if problems:
        return Category.ARGUMENT_VALUE_DIFFERENT, problems
    return Category.EXPECTED_TOOL_CALL, []


def _to_call(call: PredictedCall) -> Call:
    made = make_call(call.name, call.arguments)
    if call.error:
        made.arguments = None
        made.raw_arguments = call.error
    return made


def _score(matched: int, expected: int, predicted: int, profile: Profile) -> float:
    if profile.reward_mode == "f1":
        return 2 * matched / (expected + predicted) if expected + predicted else 0.0
    required = min(expected, predicted) if profile.allow_subset else expected
    if profile.reward_mode == "fractional":
        return matched / required if required else 0.0
    return 1.0 if matched == required else 0.0


def compare_calls(expected: FunctionCallAction | FunctionCallBatchAction, predicted: list[PredictedCall],
                  ctx: Context) -> Outcome:
    profile = ctx.profile
    is_batch = isinstance(expected, FunctionCallBatchAction)
    want = [make_call(c.name, c.parsed_arguments) for c in (expected.calls if is_batch else [expected])]
    got = [_to_call(c) for c in predicted]
    checks: dict[tuple[int, int], tuple[Category, list[str]]] = {}

    def check(i: int, j: int) -> tuple[Category, list[str]]:
        if (i, j) not in checks:
            checks[(i, j)] = call_check(want[i], got[j], ctx)
        return checks[(i, j)]

    if len(want) == 1 and len(got) == 1:
        category, problems = check(0, 0)
        return Outcome(1.0 if not problems else 0.0, category, problems, dict(ctx.similarity))
    if not is_batch and len(got) > 1 and not profile.single_call_allows_extra_calls:
        return Outcome(0.0, Category.MULTIPLE_TOOL_CALLS_FOUND, [f"{len(got)} tool calls, expected exactly one"])
    if not is_batch and len(got) > 1 and profile.extra_calls_limit is not None:
        # Extra calls beside the expected one are allowed, but not a spray: not the same tool again,
        # not more than the limit.
        name = profile.canonical_name(want[0].name)
        same_tool = sum(profile.canonical_name(c.name) == name for c in got)
        if same_tool > 1 or len(got) - 1 > profile.extra_calls_limit:
            return Outcome(0.0, Category.MULTIPLE_TOOL_CALLS_FOUND,
                           [f"{len(got)} tool calls ({same_tool} to {want[0].name!r}): at most "
                            f"{profile.extra_calls_limit} other call(s) to other tools beside the expected one"])
    ordered = is_batch and (expected.ordered if expected.ordered is not None else profile.batch_order == "ordered")
    if ordered:
        if len(got) != len(want):
            return Outcome(0.0, Category.FUNCTION_CALL_BATCH_LENGTH_DIFFERENT, [f"{len(got)} calls, expected {len(want)}"])
        for i in range(len(want)):
            category, problems = check(i, i)
            if problems:
                return Outcome(0.0, category, [f"call #{i}: {p}" for p in problems])
        return Outcome(1.0, Category.EXPECTED_TOOL_CALL_BATCH)
    # Unordered: NeMo-Gym's cardinality gate, then a maximum matching (fuzzy argument matching
    # lets one predicted call fit several expected ones, so greedy pairing is not enough).
    admissible = (len(got) == len(want) or (len(got) < len(want) and profile.allow_subset)
                  or (len(got) > len(want) and (profile.allow_superset or not is_batch)))
    if not admissible:
        return Outcome(0.0, Category.FUNCTION_CALL_BATCH_LENGTH_DIFFERENT, [f"{len(got)} calls, expected {len(want)}"])
    index = {id(c): k for k, c in enumerate(want)} | {id(c): k for k, c in enumerate(got)}
    result = match_calls(want, got, compare=lambda e, p: check(index[id(e)], index[id(p)])[1])
    matched = sum(1 for r in result.calls if r.matched)
    reward = _score(matched, len(want), len(got), profile)
    if reward == 1.0:
        return Outcome(1.0, Category.EXPECTED_TOOL_CALL if len(want) == 1 else Category.EXPECTED_TOOL_CALL_BATCH)
    problems = [f"expected call #{i} ({r.expected}): {'; '.join(r.problems)}" for i, r in enumerate(result.calls)
                if not r.matched]
    unmatched = [i for i, r in enumerate(result.calls) if not r.matched]
    if not unmatched or matched == len(got):
        return Outcome(reward, Category.FUNCTION_CALL_BATCH_LENGTH_DIFFERENT,
                       problems or [f"{len(got)} calls, expected {len(want)}"])
    # The first reason past the tool name for the first unmatched expected call: the near miss.
    first = unmatched[0]
    reasons = [check(first, j)[0] for j in range(len(got))]
    category = next((c for c in reasons if c is not Category.UNEXPECTED_TOOL), Category.UNEXPECTED_TOOL)
    return Outcome(reward, category, problems)


def _task_complete(value: dict[str, Any]) -> bool:
    return bool(value.get("task_complete") or value.get("is_task_complete") or False)


def _shell_lines(keystrokes: list[str]) -> list[str]:
    return [line.strip() for text in keystrokes for line in text.splitlines() if line.strip()]


def compare_commands(expected: dict[str, Any], predicted: PredictedAction, ctx: Context) -> Outcome:
    """Terminus: the task_complete flag, then the keystrokes: equivalent shell lines (flag order,
    quoting, paths) or, failing that, terminus_judge's SequenceMatcher on the joined keystrokes."""
    if predicted.parse_error is not None or predicted.command_json is None:
        return Outcome(0.0, Category.COMMAND_JSON_INVALID, [predicted.parse_error or "no command JSON"])
    got = predicted.command_json
    if _task_complete(expected) != _task_complete(got):
        return Outcome(0.0, Category.TASK_COMPLETE_DIFFERENT,
                       [f"task_complete: expected {_task_complete(expected)}, got {_task_complete(got)}"])
    want_keys = [c["keystrokes"] for c in expected.get("commands", [])]
    got_keys = [c["keystrokes"] for c in got.get("commands", [])]
    if not want_keys and not got_keys:
        return Outcome(1.0, Category.EXPECTED_COMMANDS, similarity={"keystrokes": 1.0})
    if not want_keys or not got_keys:
        return Outcome(0.0, Category.COMMANDS_DIFFERENT, [f"{len(got_keys)} commands, expected {len(want_keys)}"],
                       similarity={"keystrokes": 0.0})
    want_lines, got_lines = _shell_lines(want_keys), _shell_lines(got_keys)
    if len(want_lines) == len(got_lines) and all(commands_equivalent(a, b) for a, b in zip(want_lines, got_lines)):
        return Outcome(1.0, Category.EXPECTED_COMMANDS, similarity={"keystrokes": 1.0})
    score = sequence_similarity(" ".join(want_keys), " ".join(got_keys), ctx.threshold)
    if score >= ctx.threshold:
        return Outcome(1.0, Category.EXPECTED_COMMANDS, similarity={"keystrokes": round(score, 4)})
    return Outcome(0.0, Category.COMMANDS_DIFFERENT, [f"keystrokes: similarity {score:.2f} < {ctx.threshold:g}"],
                   similarity={"keystrokes": round(score, 4)})


def compare_action(expected: MessageAction | FunctionCallAction | FunctionCallBatchAction,
                   predicted: PredictedAction, ctx: Context, *, terminus: bool) -> Outcome:
    if predicted.kind == "none":
        return Outcome(0.0, Category.NO_ACTION_FOUND, ["the response has no tool call and no message"])
    if isinstance(expected, MessageAction):
        if terminus:
            return compare_commands(parse_command_json(expected.content), predicted, ctx)
        if predicted.kind != "message":
            return Outcome(0.0, Category.NO_EXPECTED_CHAT_MESSAGE, [f"{len(predicted.calls)} tool call(s), expected a message"])
        mode = ctx.profile.message_match
        if mode == "any" or (mode == "non_empty" and predicted.text.strip()):
            return Outcome(1.0, Category.EXPECTED_CHAT_MESSAGE_FOUND)
        if mode == "similar" and texts_match(expected.content, predicted.text, ctx.profile.match_options):
            return Outcome(1.0, Category.EXPECTED_CHAT_MESSAGE_FOUND)
        return Outcome(0.0, Category.MESSAGE_CONTENT_DIFFERENT,
                       ["the message is empty" if mode == "non_empty" else "the message differs from the expected one"])
    if predicted.kind != "calls":
        return Outcome(0.0, Category.NO_EXPECTED_TOOL_CALL, ["a message, expected a tool call"])
    return compare_calls(expected, predicted.calls, ctx)
