"""JSON Schema handling: compile once per distinct schema, validate cheaply.

Rows carry their schema as a string (``schema_str``). Thousands of rollouts share a few
hundred schemas, so each distinct (schema, strictness) pair is compiled once and cached.

We validate with the ``jsonschema`` library. The draft is auto-detected from ``$schema``
and defaults to Draft 2020-12. Two OpenAPI habits are accepted on top, because NeMo-Gym
validates with ``openapi-schema-validator`` and the datasets were written for it:

* ``nullable: true`` (OpenAPI 3.0) means "null is also allowed";
* "strict" objects: NeMo-Gym rewrites every object schema that lists ``properties`` to
  require all of them and forbid others (OpenAI strict-mode semantics). Config
  ``strict_objects`` switches this on (default, for parity) or off.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import jsonschema
from jsonschema.exceptions import SchemaError, best_match
from jsonschema.validators import validator_for


class InvalidSchema(ValueError):
    """``schema_str`` is not JSON, or not a valid JSON Schema: a malformed row (422)."""


@dataclass(frozen=True)
class CompiledSchema:
    schema: dict[str, Any] | bool
    validator: Any  # a jsonschema Validator instance

    def first_error(self, instance: Any) -> str | None:
        """None when valid, else the most relevant error as 'path: message'."""
        if self.validator.is_valid(instance):
            return None
        err = best_match(self.validator.iter_errors(instance))
        if err is None:  # pragma: no cover - is_valid False always yields an error
            return "invalid"
        where = "/".join(str(p) for p in err.absolute_path) or "<root>"
        return f"{where}: {err.message}"[:500]


def _openapi_to_jsonschema(node: Any, strict_objects: bool) -> Any:
    """Rewrite OpenAPI-isms in place-free fashion (we work on a deep copy)."""
    if isinstance(node, list):
        return [_openapi_to_jsonschema(item, strict_objects) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _openapi_to_jsonschema(value, strict_objects) for key, value in node.items()}
    if out.pop("nullable", False) is True:
        kind = out.get("type")
        if isinstance(kind, str):
            out["type"] = [kind, "null"]
        elif isinstance(kind, list) and "null" not in kind:
            out["type"] = [*kind, "null"]
        if isinstance(out.get("enum"), list) and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
    if strict_objects and isinstance(out.get("properties"), dict):
        out["required"] = list(out["properties"])
        out["additionalProperties"] = False
    return out


@lru_cache(maxsize=4096)
def compile_schema(schema_str: str, strict_objects: bool) -> CompiledSchema:
    """Parse, normalise and check ``schema_str``; raises :class:`InvalidSchema`."""
    try:
        raw = json.loads(schema_str)
    except json.JSONDecodeError as exc:
        raise InvalidSchema(f"schema_str is not valid JSON: {exc}") from None
    if not isinstance(raw, (dict, bool)):
        raise InvalidSchema(f"schema_str must be a JSON object (a JSON Schema), got {type(raw).__name__}")
    schema = _openapi_to_jsonschema(copy.deepcopy(raw), strict_objects) if isinstance(raw, dict) else raw
    cls = validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "<root>"
        raise InvalidSchema(f"schema_str is not a valid JSON Schema at {where}: {exc.message}") from None
    return CompiledSchema(schema=schema, validator=cls(schema))
