"""Rebuild ``example.jsonl``: the 5 real NeMo-Gym swe_pivot rows (unchanged) each with an
equivalent-but-differently-spelled call (full reward) and a wrong call (zero or partial),
plus text-call, no-call, bad-JSON and malformed rows.

    python -m environments.swe_pivot.data.build_examples
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from servers.wire import response_from_text

SHARED = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "nemo_gym"
OUT = Path(__file__).with_name("example.jsonl")


def call_response(name: str, arguments: dict[str, Any] | str, *, extra_calls: int = 0) -> dict[str, Any]:
    resp = response_from_text("")
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    resp["output"] = [{"type": "function_call", "id": f"fc_{i}", "call_id": f"call_{i}", "name": name,
                       "arguments": args, "status": "completed"} for i in range(1 + extra_calls)]
    return resp


# uuid -> (equivalent call, wrong call, expected reply of the wrong call)
VARIANTS: dict[str, tuple[tuple[str, dict], tuple[str, dict], dict]] = {
    "example_1": (("str_replace_editor", {"command": "str_replace", "path": "/workspace/proj/./foo.py",
                                          "old_str": "    result = 0\n    return None",
                                          "new_str": "    result = 0\r\n    for v in values:\n        result += v  \n    return result\n"}),
                  ("str_replace_editor", {"command": "str_replace", "path": "/workspace/proj/foo.py",
                                          "old_str": "    result = 0\n    return None",
                                          "new_str": "    return sum(values)"}),
                  {"reward": 0.2, "fields": {"argument_match": {"mismatched": ["new_str"]}}}),
    "example_2": (("execute_bash", {"command": "grep  -n -r \"def calculate_total\" /workspace/proj/"}),
                  ("execute_bash", {"command": "grep -rn 'def calculate_total' /workspace"}),
                  {"reward": 0.2, "fields": {"argument_match": {"mismatched": ["command"]}}}),
    "example_3": (("str_replace_editor", {"command": "view", "path": "/workspace/proj/models.py",
                                          "view_range": ["40", 80]}),
                  ("str_replace_editor", {"command": "view", "path": "/workspace/proj/models.py"}),
                  {"reward": 0.2, "fields": {"argument_match": {"missing": ["view_range"]}}}),
    "example_4": (("file_editor", {"command": "create", "path": "/workspace/proj/tests/test_utils.py",
                                   "file_text": "from proj.foo import total\n\n\ndef test_total():\n    assert total([1, 2, 3]) == 6"}),
                  ("execute_bash", {"command": "touch /workspace/proj/tests/test_utils.py"}),
                  {"reward": 0.0, "fields": {"name_match": False}}),
    "example_5": (("bash", {"command": "python3 -m pytest -q /workspace/proj/tests//test_utils.py"}),
                  ("execute_bash", {"command": "python -m pytest /workspace/proj/tests"}),
                  {"reward": 0.2, "fields": {"argument_match": {"mismatched": ["command"]}}}),
}


def main() -> None:
    rows: list[dict[str, Any]] = []
    real = [json.loads(line) for line in (SHARED / "swe_pivot" / "example.jsonl").read_text().splitlines() if line.strip()]
    for row in real:
        expected = row["expected_action"]
        exact = call_response(expected["name"], expected["arguments"])
        rows.append({**row, "response": exact, "_expected": {"reward": 1.0, "fields": {
            "reward_components": {"tool_name": 0.2, "arguments": 0.8}}}})
        (good_name, good_args), (bad_name, bad_args), bad_expected = VARIANTS[row["uuid"]]
        rows.append({**row, "response": call_response(good_name, good_args), "_expected": {"reward": 1.0}})
        rows.append({**row, "response": call_response(bad_name, bad_args), "_expected": bad_expected})
    first = real[1]
    # A model that prints its call as text (Hermes <tool_call> format).
    text = ('I will search first.\n<tool_call>{"name": "execute_bash", "arguments": '
            '{"command": "grep -r -n \'def calculate_total\' /workspace/proj"}}</tool_call>')
    rows.append({**first, "response": response_from_text(text), "_expected": {"reward": 1.0}})
    rows.append({**first, "response": response_from_text("The function is probably in utils.py."),
                 "_expected": {"reward": 0.0, "fields": {"predicted_action": None}}})
    rows.append({**first, "response": call_response("execute_bash", "{\"command\": \"grep -rn"),
                 "_expected": {"reward": 0.2, "fields": {"name_match": True}}})
    # Malformed rows: no expected_action; expected_action arguments that are not JSON.
    broken = {k: v for k, v in first.items() if k != "expected_action"}
    rows.append({**broken, "response": call_response("execute_bash", {"command": "ls"}), "_expected": {"status": 422}})
    rows.append({**first, "expected_action": {"type": "function_call", "name": "execute_bash", "arguments": "{oops"},
                 "response": call_response("execute_bash", {"command": "ls"}), "_expected": {"status": 422}})
    OUT.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"wrote {len(rows)} rows to {OUT}")


if __name__ == "__main__":
    main()
