"""Rebuild ``example.jsonl``: the real NeMo-Gym rows (unchanged) plus responses and expectations.

    python -m environments.structured_outputs.data.build_examples

Valid payloads are synthesised from each row's schema (``instance_for``), so the
full-reward rows really are valid and the zero-reward rows break exactly one thing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from servers.wire import response_from_text

SHARED = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "nemo_gym" / "structured_outputs" / "example.jsonl"
OUT = Path(__file__).with_name("example.jsonl")

_SCALARS = {"string": "text", "integer": 7, "number": 1.5, "boolean": True, "null": None}


def instance_for(schema: dict[str, Any]) -> Any:
    """A minimal instance satisfying ``schema`` (the subset of keywords the datasets use)."""
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        return {key: instance_for(sub) for key, sub in schema.get("properties", {}).items()}
    if kind == "array":
        return [instance_for(schema.get("items", {"type": "string"}))]
    return _SCALARS[kind]


def function_call(name: str, arguments: Any) -> dict[str, Any]:
    return {"type": "function_call", "name": name, "call_id": "call_0", "id": "fc_0",
            "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments), "status": "completed"}


def tool_response(name: str, arguments: Any, text: str = "") -> dict[str, Any]:
    response = response_from_text(text)
    response["output"] = ([response["output"][0]] if text else []) + [function_call(name, arguments)]
    return response


def real_rows() -> list[dict[str, Any]]:
    rows = []
    for number, line in enumerate(SHARED.read_text().splitlines()):
        row = json.loads(line)
        payload = instance_for(json.loads(row["schema_str"]))
        arguments = {row["tool_payload_key"]: payload} if row.get("tool_payload_key") else payload
        rows.append({**row, "response": tool_response(row["tool_name"], arguments), "_expected": {"reward": 1.0}})
        broken = dict(row)
        if number == 0:  # right tool, payload missing a required field
            bad = dict(payload)
            bad.pop(next(iter(bad)))
            args = {row["tool_payload_key"]: bad} if row.get("tool_payload_key") else bad
            broken.update(response=tool_response(row["tool_name"], args),
                          _expected={"reward": 0.0, "fields": {"error_type": "validation_error", "parsed": True}})
        elif number == 1:  # a distractor tool name
            broken.update(response=tool_response("not_" + row["tool_name"], arguments),
                          _expected={"reward": 0.0, "fields": {"error_type": "wrong_tool_name"}})
        elif number == 2:  # truncated arguments JSON
            broken.update(response=tool_response(row["tool_name"], json.dumps(arguments)[:-5]),
                          _expected={"reward": 0.0, "fields": {"error_type": "tool_arguments_parse_error"}})
        elif number == 3:  # answered in text instead of calling the tool
            broken.update(response=response_from_text(json.dumps(arguments)),
                          _expected={"reward": 0.0, "fields": {"error_type": "missing_tool_call"}})
        else:  # wrapper key missing
            broken.update(response=tool_response(row["tool_name"], payload),
                          _expected={"reward": 0.0, "fields": {"error_type": "missing_tool_payload_key"}})
        rows.append(broken)
    return rows


PERSON = json.dumps({"type": "object", "properties": {
    "name": {"type": "string"}, "age": {"type": "integer"}, "member": {"type": "boolean"},
    "tags": {"type": "array", "items": {"type": "string"}}, "nickname": {"type": "string", "nullable": True}}})
TABLE = json.dumps({"type": "array", "items": {"type": "object", "properties": {
    "city": {"type": "string"}, "population": {"type": "integer"}, "area": {"type": "number"}}}})


def text_row(schema_str: str, schema_type: str, text: str, expected: dict[str, Any]) -> dict[str, Any]:
    return {"responses_create_params": {"input": [{"role": "user", "content": f"Answer as {schema_type}."}]},
            "schema_str": schema_str, "schema_type": schema_type, "response": response_from_text(text),
            "_expected": expected}


def text_rows() -> list[dict[str, Any]]:
    ok = {"reward": 1.0}
    return [
        text_row(PERSON, "json", 'Let me think. {"draft": 1}\nFinal:\n```json\n{"name": "Ada", "age": 36, '
                 '"member": true, "tags": ["math"], "nickname": null}\n```', ok),
        text_row(PERSON, "json", 'Reasoning first... the answer is {"name": "Ada", "age": 36, "member": false, '
                 '"tags": [], "nickname": "Countess"} as requested.', ok),
        text_row(PERSON, "json", '{"name": "Ada", "age": "36", "member": true, "tags": [], "nickname": null}',
                 {"reward": 0.0, "fields": {"error_type": "validation_error", "parsed": True}}),
        text_row(PERSON, "json", "I cannot produce JSON today.",
                 {"reward": 0.0, "fields": {"error_type": "parse_error", "parsed": False}}),
        text_row(PERSON, "yaml", "```yaml\nname: Ada\nage: 36\nmember: true\ntags: [math, poetry]\nnickname: null\n```", ok),
        text_row(PERSON, "toml", 'name = "Ada"\nage = 36\nmember = true\ntags = ["math"]\nnickname = "Countess"\n', ok),
        text_row(PERSON, "xml", "<person><name>Ada</name><age>36</age><member>true</member>"
                 "<tags><tag>math</tag><tag>poetry</tag></tags><nickname/></person>", ok),
        text_row(PERSON, "xml", "<person><name>Ada</name><age>old</age><member>true</member>"
                 "<tags><tag>math</tag></tags><nickname>Countess</nickname></person>",
                 {"reward": 0.0, "fields": {"error_type": "validation_error", "parsed": True}}),
        text_row(TABLE, "csv", "city,population,area\nParis,2100000,105.4\nLyon,520000,47.9\n", ok),
        text_row(TABLE, "csv", "city,population,area\nParis,many,105.4\n",
                 {"reward": 0.0, "fields": {"error_type": "validation_error"}}),
        # malformed rows: the dataset's fault, rejected before scoring
        text_row("{not a schema", "json", "{}", {"status": 422}),
        text_row(json.dumps({"type": "object", "properties": {"a": {"type": "strng"}}}), "json", "{}", {"status": 422}),
        text_row(PERSON, "protobuf", "{}", {"status": 422}),
        {**text_row(PERSON, "json", "{}", {"status": 422}), "response_mode": "tool_call"},
    ]


def main() -> None:
    rows = real_rows() + text_rows()
    OUT.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    print(f"wrote {len(rows)} rows to {OUT}")


if __name__ == "__main__":
    main()
