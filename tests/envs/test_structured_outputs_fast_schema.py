"""The structured_outputs schema fast path must agree with jsonschema on every instance.

``CompiledSchema.fast_is_valid`` is a speed-up for schemas made of type / properties /
required / additionalProperties / items only. These tests compare it with jsonschema's
``is_valid`` on the shipped rows' schemas and on seeded random schemas and instances.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from environments.structured_outputs.schema import compile_schema

EXAMPLES = Path(__file__).parents[2] / "environments" / "structured_outputs" / "data" / "example.jsonl"
TYPES = ["string", "integer", "number", "boolean", "null", "object", "array"]


def _random_value(rng: random.Random, depth: int = 0) -> object:
    kind = rng.choice(TYPES if depth < 3 else TYPES[:5])
    if kind == "string":
        return rng.choice(["", "a", "name", "x y"])
    if kind == "integer":
        return rng.choice([0, 1, -3, 10**12])
    if kind == "number":
        return rng.choice([0.5, 1.0, -2.25, float(3)])
    if kind == "boolean":
        return rng.choice([True, False])
    if kind == "null":
        return None
    if kind == "object":
        return {rng.choice(["a", "b", "c", "name", "id"]): _random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))}
    return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]


def _random_schema(rng: random.Random, depth: int = 0) -> object:
    if rng.random() < 0.1:
        return rng.choice([True, False])
    schema: dict[str, object] = {}
    if rng.random() < 0.7:
        schema["type"] = rng.choice(TYPES) if rng.random() < 0.7 else rng.sample(TYPES, rng.randint(1, 3))
    if depth < 3 and rng.random() < 0.5:
        schema["properties"] = {name: _random_schema(rng, depth + 1)
                                for name in rng.sample(["a", "b", "c", "name"], rng.randint(0, 3))}
        if rng.random() < 0.5:
            schema["required"] = rng.sample(["a", "b", "name", "id"], rng.randint(0, 2))
        if rng.random() < 0.5:
            schema["additionalProperties"] = rng.choice([True, False, {"type": "string"}])
    if depth < 3 and rng.random() < 0.3:
        schema["items"] = _random_schema(rng, depth + 1)
    if rng.random() < 0.2:
        schema["description"] = "annotation only"
    return schema


def _example_schemas() -> list[str]:
    rows = [json.loads(line) for line in EXAMPLES.read_text().splitlines() if line.strip()]
    return sorted({row["schema_str"] for row in rows if isinstance(row.get("schema_str"), str)})


@pytest.mark.parametrize("strict", [False, True])
def test_fast_path_covers_and_agrees_on_shipped_schemas(strict: bool):
    rng = random.Random(7)
    covered = 0
    for schema_str in _example_schemas():
        try:
            compiled = compile_schema(schema_str, strict)
        except ValueError:
            continue  # the deliberately broken schema of a malformed row
        if compiled.fast_is_valid is None:
            continue
        covered += 1
        for _ in range(300):
            value = _random_value(rng)
            assert compiled.fast_is_valid(value) == compiled.validator.is_valid(value), (schema_str, value)
    assert covered > 0


@pytest.mark.parametrize("dialect", [None, "http://json-schema.org/draft-07/schema#",
                                     "https://json-schema.org/draft/2019-09/schema"])
def test_fast_path_agrees_on_random_schemas(dialect: str | None):
    rng = random.Random(11)
    for _ in range(300):
        schema = _random_schema(rng)
        if dialect and isinstance(schema, dict):
            schema["$schema"] = dialect
        compiled = compile_schema(json.dumps(schema), False)
        assert compiled.fast_is_valid is not None, schema
        for _ in range(30):
            value = _random_value(rng)
            assert compiled.fast_is_valid(value) == compiled.validator.is_valid(value), (schema, value)


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"a": {"$ref": "#/$defs/x"}}, "$defs": {"x": {"type": "string"}}},
    {"type": "string", "pattern": "^a"},
    {"$schema": "http://json-schema.org/draft-07/schema#", "type": "array", "items": [{"type": "string"}]},
    {"type": "object", "properties": {"a": {"type": "string", "$schema": "http://json-schema.org/draft-07/schema#"}}},
    {"$schema": "http://json-schema.org/draft-04/schema#", "type": "object"},
])
def test_other_keywords_and_draft4_use_jsonschema_only(schema: dict):
    assert compile_schema(json.dumps(schema), False).fast_is_valid is None
