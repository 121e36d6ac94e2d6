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
import numbers
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable

import jsonschema
from jsonschema._types import draft202012_type_checker
from jsonschema.exceptions import SchemaError, best_match
from jsonschema.validators import validator_for


class InvalidSchema(ValueError):
    """``schema_str`` is not JSON, or not a valid JSON Schema: a malformed row (422)."""


@dataclass(frozen=True)
class CompiledSchema:
    schema: dict[str, Any] | bool
    validator: Any  # a jsonschema Validator instance
    # A closure deciding validity for schemas built only from the keywords in _FAST_KEYWORDS,
    # or None. It only ever answers "valid": any instance it rejects goes to jsonschema, which
    # decides and words the error, so the verdict is jsonschema's in every case.
    fast_is_valid: Callable[[Any], bool] | None = None

    def first_error(self, instance: Any) -> str | None:
        """None when valid, else the most relevant error as 'path: message'."""
        if self.fast_is_valid is not None:
            if self.fast_is_valid(instance):
                return None
        elif self.validator.is_valid(instance):
            return None
        err = best_match(self.validator.iter_errors(instance))
        if err is None:  # jsonschema found nothing: valid (the fast path is never the last word)
            return None
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
    validator = cls(schema)
    return CompiledSchema(schema=schema, validator=validator, fast_is_valid=_fast_validator(schema, validator))


# Why a fast path: a profile of the server put jsonschema's per-subschema validator evolution
# (descend -> evolve) at ~2/3 of a structured_outputs verify. The real rows' schemas use only
# type / properties / required / additionalProperties / items, which compile to plain closures.
# Keyword semantics below are copied from jsonschema._keywords for Draft 6 and later (boolean
# subschemas allowed, ``items`` a single schema); types use _TYPE_PREDICATES, the Draft 6+ checker's.
_FAST_DRAFTS = (jsonschema.Draft6Validator, jsonschema.Draft7Validator,
                jsonschema.Draft201909Validator, jsonschema.Draft202012Validator)
_ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$comment", "format",
                          "deprecated", "readOnly", "writeOnly"})  # no effect on validity (no format_checker)
_FAST_KEYWORDS = frozenset({"type", "properties", "required", "additionalProperties", "items"}) | _ANNOTATIONS


class _Unsupported(Exception):
    pass


def _is_integer(instance: Any) -> bool:
    return (isinstance(instance, int) and not isinstance(instance, bool)) or \
        (isinstance(instance, float) and instance.is_integer())


# The Draft 6+ type checker's predicates as plain functions (jsonschema._types: integer admits
# 1.0 from Draft 6 on; booleans are neither integers nor numbers). A profile of unique traffic
# put jsonschema's TypeChecker dispatch (is_type -> TypeChecker.is_type -> the predicate) at
# half of a verification's schema check; these are called directly.
_TYPE_PREDICATES: dict[str, Callable[[Any], bool]] = {
    "object": lambda instance: isinstance(instance, dict),
    "array": lambda instance: isinstance(instance, list),
    "string": lambda instance: isinstance(instance, str),
    "boolean": lambda instance: isinstance(instance, bool),
    "null": lambda instance: instance is None,
    "integer": _is_integer,
    "number": lambda instance: isinstance(instance, numbers.Number) and not isinstance(instance, bool),
}


def _fast_validator(schema: Any, validator: Any) -> Callable[[Any], bool] | None:
    if type(validator) not in _FAST_DRAFTS or validator.TYPE_CHECKER is not draft202012_type_checker:
        return None
    if isinstance(schema, dict):
        schema = {k: v for k, v in schema.items() if k != "$schema"}  # the dialect: only at the root
    try:
        return _compile_fast(schema)
    except _Unsupported:
        return None


def _all_of(checks: list[Callable[[Any], bool]]) -> Callable[[Any], bool]:
    if not checks:
        return lambda instance: True
    if len(checks) == 1:
        return checks[0]
    if len(checks) == 2:
        first, second = checks
        return lambda instance: first(instance) and second(instance)
    return lambda instance: all(check(instance) for check in checks)


def _compile_fast(schema: Any) -> Callable[[Any], bool]:
    if schema is True:
        return lambda instance: True
    if schema is False:
        return lambda instance: False
    if not isinstance(schema, dict) or not schema.keys() <= _FAST_KEYWORDS:
        raise _Unsupported
    checks: list[Callable[[Any], bool]] = []
    if "type" in schema:
        names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not all(isinstance(name, str) and name in _TYPE_PREDICATES for name in names):
            raise _Unsupported  # an unknown type name: jsonschema words that error
        predicates = [_TYPE_PREDICATES[name] for name in names]
        if len(predicates) == 1:
            checks.append(predicates[0])
        else:
            checks.append(lambda instance: any(predicate(instance) for predicate in predicates))
    properties = schema.get("properties", {})
    if not isinstance(properties, dict):
        raise _Unsupported
    compiled_properties = [(name, _compile_fast(sub)) for name, sub in properties.items()]
    required = schema.get("required", [])
    if not isinstance(required, list):
        raise _Unsupported
    additional = schema.get("additionalProperties", True)
    additional_check = None if additional is True else _compile_fast(additional)
    if compiled_properties or required or additional_check is not None:
        def object_ok(instance: Any) -> bool:
            if not isinstance(instance, dict):
                return True
            for name, check in compiled_properties:
                if name in instance and not check(instance[name]):
                    return False
            for name in required:
                if name not in instance:
                    return False
            if additional_check is not None:
                for name, value in instance.items():
                    if name not in properties and not additional_check(value):
                        return False
            return True
        checks.append(object_ok)
    if "items" in schema:
        if not isinstance(schema["items"], (dict, bool)):
            raise _Unsupported  # tuple-form items (Draft 6-2019-09)
        item_check = _compile_fast(schema["items"])

        def items_ok(instance: Any) -> bool:
            if not isinstance(instance, list):
                return True
            for item in instance:
                if not item_check(item):
                    return False
            return True
        checks.append(items_ok)
    return _all_of(checks)
