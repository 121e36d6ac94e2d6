"""Tool hallucination: classify a response's function calls against the row's own tools.

A response to a tool row is one of

* ``hallucinated_tool``  — it calls a name that is not among the row's tools;
* ``invalid_arguments``  — every name exists, but some call's arguments are not a JSON object
  that the tool's ``parameters`` JSON schema accepts;
* ``clean``              — at least one call, every call names a row tool with valid arguments;
* ``no_call``            — no function call at all (not a hallucination; a plain answer).

A response with several calls takes the worst class (hallucinated > invalid arguments).
The hallucination rate counts ``hallucinated_tool`` + ``invalid_arguments`` over all classified
responses. The tools are the row's ``responses_create_params.tools`` (Responses flat format or
chat format); schemas are checked with ``jsonschema`` (the dialect a schema names in
``$schema``, else Draft 2020-12). Pure functions, no environment imported: the trainer judges
only what the row itself declares.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Iterable

import jsonschema
from jsonschema.exceptions import SchemaError

CLEAN, NO_CALL, HALLUCINATED_TOOL, INVALID_ARGUMENTS = "clean", "no_call", "hallucinated_tool", "invalid_arguments"
KINDS = (CLEAN, NO_CALL, HALLUCINATED_TOOL, INVALID_ARGUMENTS)
HALLUCINATION_KINDS = (HALLUCINATED_TOOL, INVALID_ARGUMENTS)


@dataclass(frozen=True)
class ToolUseVerdict:
    kind: str
    problems: tuple[str, ...] = field(default_factory=tuple)  # one line per bad call, for the pairs file

    @property
    def hallucinated(self) -> bool:
        return self.kind in HALLUCINATION_KINDS


def row_tools(row: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{name: parameters schema}`` of a row's function tools (non-function tools are skipped)."""
    tools = (row.get("responses_create_params") or {}).get("tools") or []
    out: dict[str, dict[str, Any]] = {}
    for tool in tools:
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            continue
        fn = tool.get("function") if isinstance(tool.get("function"), dict) else tool  # chat or flat format
        if isinstance(fn.get("name"), str):
            out[fn["name"]] = fn.get("parameters") or {"type": "object", "properties": {}}
    return out


def response_calls(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``function_call`` output items of a Responses-API response."""
    return [it for it in (response or {}).get("output") or [] if isinstance(it, dict) and it.get("type") == "function_call"]


@lru_cache(maxsize=1024)
def _validator(schema_json: str) -> Any:
    """A checked validator per distinct schema (rows of one dataset share a few tool schemas)."""
    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except SchemaError as exc:
        raise ValueError(f"tool parameters are not a valid JSON schema: {exc.message}") from None
    return cls(schema)


def _argument_problem(arguments: Any, schema: dict[str, Any]) -> str | None:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as exc:
            return f"arguments are not JSON ({exc.msg})"
    if not isinstance(arguments, dict):
        return f"arguments are a JSON {type(arguments).__name__}, not an object"
    errors = sorted(_validator(json.dumps(schema, sort_keys=True)).iter_errors(arguments), key=lambda e: list(map(str, e.absolute_path)))
    if not errors:
        return None
    return "; ".join(f"{'.'.join(['arguments', *map(str, e.absolute_path)])}: {e.message}" for e in errors)


def classify_tool_use(response: dict[str, Any], tools: dict[str, dict[str, Any]]) -> ToolUseVerdict:
    """Classify one response against ``tools`` (as :func:`row_tools` returns them).

    Raises ValueError naming the tool when a row's own schema is not a valid JSON schema."""
    calls = response_calls(response)
    if not calls:
        return ToolUseVerdict(NO_CALL)
    unknown, invalid = [], []
    for call in calls:
        name = call.get("name")
        if name not in tools:
            unknown.append(f"{name!r} is not a tool of this row (tools: {', '.join(sorted(tools)) or 'none'})")
            continue
        try:
            problem = _argument_problem(call.get("arguments", "{}"), tools[name])
        except ValueError as exc:
            raise ValueError(f"tool {name!r}: {exc}") from None
        if problem:
            invalid.append(f"{name}: {problem}")
    if unknown:
        return ToolUseVerdict(HALLUCINATED_TOOL, tuple(unknown + invalid))
    if invalid:
        return ToolUseVerdict(INVALID_ARGUMENTS, tuple(invalid))
    return ToolUseVerdict(CLEAN)


def classify_text(text: str, tools: dict[str, dict[str, Any]]) -> ToolUseVerdict:
    """Verdict of raw generated text (Hermes ``<tool_call>`` syntax, parsed as rollouts parse it),
    for callers that hold text rather than a response, e.g. single-turn validation samples."""
    from trainer.responses import parse_tool_calls

    _, calls = parse_tool_calls(text)
    return classify_tool_use({"output": [{"type": "function_call", **c} for c in calls]}, tools)


def classify_record(record: dict[str, Any]) -> ToolUseVerdict | None:
    """Verdict of a rollout record (row fields + ``response``); None when the row has no tools."""
    tools = row_tools(record)
    if not tools:
        return None
    return classify_tool_use(record.get("response") or {}, tools)


def hallucination_summary(records: Iterable[dict[str, Any]], env_key: str = "_verigym_env") -> dict[str, Any] | None:
    """Counts per kind and the hallucination rate, overall and per environment, over the records
    of tool rows (None when there are none). Records whose row declares an invalid JSON schema are
    counted in ``rows_with_invalid_tool_schema``, not classified."""
    per_env: dict[str, Counter[str]] = defaultdict(Counter)
    bad_schema = 0
    for record in records:
        try:
            verdict = classify_record(record)
        except ValueError:  # the row's own schema is broken: not the model's fault, counted apart
            bad_schema += 1
            continue
        if verdict is not None:
            per_env[record.get(env_key, "?")][verdict.kind] += 1
    if not per_env and not bad_schema:
        return None
    total: Counter[str] = Counter()
    for counts in per_env.values():
        total.update(counts)
    return {**kind_rates(total), "rows_with_invalid_tool_schema": bad_schema,
            "per_env": {env: kind_rates(c) for env, c in sorted(per_env.items())}}


def kind_rates(counts: Counter[str]) -> dict[str, Any]:
    n = sum(counts.values())
    return {"responses": n, "hallucination_rate": sum(counts[k] for k in HALLUCINATION_KINDS) / n if n else 0.0,
            **{f"{k}_rate": counts[k] / n if n else 0.0 for k in KINDS}, "counts": {k: counts[k] for k in KINDS}}
