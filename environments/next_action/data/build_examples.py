"""Rebuild ``example.jsonl``: the 5 real NeMo-Gym ``terminal_multi_harness`` rows (unchanged) each
with a matching and a wrong response, rows of the single-step server's shape for its
``search_pivot`` / ``toolcall_schema`` / ``parallel_tool_calls`` variants, terminus command-JSON
rows, and malformed rows (422).

    python -m environments.next_action.data.build_examples
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from servers.wire import response_from_text, text_message

SHARED = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "nemo_gym"
OUT = Path(__file__).with_name("example.jsonl")


def calls(*pairs: tuple[str, Any], preamble: str | None = None) -> dict[str, Any]:
    resp = response_from_text("")
    items = [text_message(preamble)] if preamble else []
    items += [{"type": "function_call", "id": f"fc_{i}", "call_id": f"call_{i}", "name": name,
               "arguments": args if isinstance(args, str) else json.dumps(args), "status": "completed"}
              for i, (name, args) in enumerate(pairs)]
    resp["output"] = items
    return resp


def _agent(name: str) -> dict[str, str]:
    return {"type": "responses_api_agents", "name": name}


def _tool(name: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "function", "name": name, "description": f"The {name} tool.", "strict": True,
            "parameters": {"type": "object", "properties": properties, "required": required,
                           "additionalProperties": False}}


def _with(row: dict[str, Any], response: dict[str, Any], expected: dict[str, Any]) -> dict[str, Any]:
    return {**row, "response": response, "_expected": expected}


def terminal_rows() -> list[dict[str, Any]]:
    real = [json.loads(line) for line in (SHARED / "terminal_multi_harness" / "example.jsonl").read_text().splitlines()]
    message, exec_ls, plan, batch, status = real
    ok = {"reward": 1.0}
    return [
        _with(message, response_from_text("I updated the parser and added tests; all pass."),
              {**ok, "fields": {"category_code": "EXPECTED_CHAT_MESSAGE_FOUND", "profile": "codex"}}),
        _with(message, calls(("exec_command", {"cmd": "git diff"})),
              {"reward": 0.0, "fields": {"category_code": "NO_EXPECTED_CHAT_MESSAGE"}}),
        # Flag order and a trailing slash do not change the command; preamble text is ignored.
        _with(exec_ls, calls(("exec_command", {"cmd": "ls -al /workspace/"}),
                             preamble="Let me look around."),
              {**ok, "fields": {"category_code": "EXPECTED_TOOL_CALL", "similarity": {"arguments.cmd": 1.0}}}),
        _with(exec_ls, calls(("exec_command", {"cmd": "rm -rf /workspace"})),
              {"reward": 0.0, "fields": {"category_code": "ARGUMENT_VALUE_DIFFERENT"}}),
        _with(plan, calls(("update_plan", {"plan": [{"step": "Read the failing test", "status": "in_progress"}]})),
              {**ok, "fields": {"category_code": "EXPECTED_TOOL_CALL"}}),
        _with(plan, calls(("update_plan", {"plan": [{"step": "Read the failing test"}]})),  # schema: status required
              {"reward": 0.0, "fields": {"category_code": "TOOL_SCHEMA_VALIDATION_FAILED"}}),
        _with(batch, calls(("write_stdin", {"session_id": 7, "chars": ""}), ("exec_command", {"cmd": "pwd"})),
              {**ok, "fields": {"category_code": "EXPECTED_TOOL_CALL_BATCH"}}),
        _with(batch, calls(("exec_command", {"cmd": "pwd"}), ("write_stdin", {"session_id": 7, "chars": ""})),
              {"reward": 0.0, "fields": {"category_code": "UNEXPECTED_TOOL"}}),  # the row says ordered
        _with(status, calls(("exec_command", {"cmd": "git status --short"})), ok),
        _with(status, calls(("exec_command", {"cmd": "git status --short", "workdir": "/workspace"})),
              {"reward": 0.0, "fields": {"category_code": "ARGUMENT_OBJECT_KEYS_DIFFERENT"}}),
    ]


SEARCH_TOOLS = [_tool("web_search", {"query": {"type": "string"}, "num_results": {"type": "integer"}}, ["query"]),
                _tool("open_page", {"url": {"type": "string"}}, ["url"])]


def single_step_rows() -> list[dict[str, Any]]:
    search = {"responses_create_params": {"input": [
                  {"role": "system", "content": "You are a research assistant. Choose the next step."},
                  {"role": "user", "content": "How did the 2021 Suez Canal blockage affect oil prices?"}],
                  "tools": SEARCH_TOOLS, "tool_choice": "auto"},
              "expected_action": {"type": "function_call", "name": "web_search",
                                  "arguments": json.dumps({"query": "2021 Suez Canal blockage oil prices impact"})},
              "agent_ref": _agent("search_pivot_single_step_tool_use_with_argument_comparison_agent")}
    schema_row = {**search, "agent_ref": _agent("toolcall_schema_single_step_tool_use_with_argument_comparison_agent"),
                  "expected_action": {"type": "function_call", "name": "web_search",
                                      "arguments": json.dumps({"query": "Suez Canal blockage oil", "num_results": 5})}}
    parallel = {**search, "agent_ref": _agent("parallel_tool_calls_single_step_tool_use_with_argument_comparison_agent"),
                "expected_action": {"type": "function_call_batch", "calls": [
                    {"type": "function_call", "name": "open_page", "arguments": json.dumps({"url": "https://a.example/suez"})},
                    {"type": "function_call", "name": "open_page", "arguments": json.dumps({"url": "https://b.example/oil"})}]}}
    reply = {**search, "agent_ref": _agent("single_step_tool_use_with_argument_comparison_agent"),
             "expected_action": {"type": "message", "content": "Brent rose about 6% during the blockage."}}
    return [
        _with(search, calls(("web_search", {"query": "impact of the 2021 Suez Canal blockage on oil prices"})),
              {"reward": 1.0, "fields": {"profile": "search_pivot"}}),
        _with(search, calls(("web_search", {"query": "Suez Canal history"})),  # overlap 2/(6+3) = 0.22 < 0.3
              {"reward": 0.0, "fields": {"category_code": "ARGUMENT_VALUE_DIFFERENT"}}),
        # A printed <tool_call> block counts when the response has no function_call item.
        _with(search, response_from_text('<tool_call>{"name": "web_search", "arguments": {"query": '
                                         '"2021 Suez Canal blockage oil prices"}}</tool_call>'),
              {"reward": 1.0, "fields": {"predicted_action": {"source": "text_tool_calls"}}}),
        _with(search, response_from_text("Let me think about which search to run."),
              {"reward": 0.0, "fields": {"category_code": "NO_EXPECTED_TOOL_CALL"}}),
        _with(schema_row, calls(("web_search", {"query": "Suez Canal blockage oil", "num_results": 5})),
              {"reward": 1.0, "fields": {"profile": "toolcall_schema"}}),
        _with(schema_row, calls(("web_search", {"query": "Suez Canal blockage oil", "num_results": "5"})),
              {"reward": 0.0, "fields": {"category_code": "TOOL_SCHEMA_VALIDATION_FAILED"}}),
        _with(parallel, calls(("open_page", {"url": "https://b.example/oil"}), ("open_page", {"url": "https://a.example/suez"})),
              {"reward": 1.0, "fields": {"category_code": "EXPECTED_TOOL_CALL_BATCH"}}),
        _with(parallel, calls(("open_page", {"url": "https://a.example/suez"})),  # F1 of 1 matched of 2: 2/3
              {"reward": 2 / 3, "fields": {"category_code": "FUNCTION_CALL_BATCH_LENGTH_DIFFERENT"}}),
        _with(reply, response_from_text("Prices jumped."), {"reward": 1.0}),  # single_step: any message
    ]


def terminus_rows() -> list[dict[str, Any]]:
    gold = {"analysis": "The repo is cloned; tests have not been run.", "plan": "Run the test suite.",
            "commands": [{"keystrokes": "cd /app && python -m pytest -q tests\n", "duration": 30}], "task_complete": False}
    row = {"responses_create_params": {"input": [{"role": "user", "content": "Fix the failing tests in /app."}]},
           "harness": "terminus_2", "expected_action": {"type": "message", "content": json.dumps(gold)},
           "agent_ref": _agent("terminus_next_action_agent")}

    def reply(keystrokes: str, done: bool = False) -> dict[str, Any]:
        return response_from_text("<think>tests first</think>```json\n" + json.dumps(
            {"analysis": "Need the failures.", "plan": "Run pytest.",
             "commands": [{"keystrokes": keystrokes, "duration": 20}], "task_complete": done}) + "\n```")

    return [
        _with(row, reply("cd /app && python3 -m pytest -q tests/\n"),
              {"reward": 1.0, "fields": {"category_code": "EXPECTED_COMMANDS", "profile": "terminus"}}),
        _with(row, reply("cat /app/README.md\n"), {"reward": 0.0, "fields": {"category_code": "COMMANDS_DIFFERENT"}}),
        _with(row, reply("cd /app && python -m pytest -q tests\n", done=True),
              {"reward": 0.0, "fields": {"category_code": "TASK_COMPLETE_DIFFERENT"}}),
        _with(row, response_from_text("I will run the tests now."),
              {"reward": 0.0, "fields": {"category_code": "COMMAND_JSON_INVALID"}}),
    ]


def malformed_rows() -> list[dict[str, Any]]:
    base = {"responses_create_params": {"input": [{"role": "user", "content": "next step?"}]}}
    resp = response_from_text("ok")
    return [
        {**base, "response": resp, "_expected": {"status": 422}},  # no expected_action
        {**base, "expected_action": {"type": "function_call", "name": "ls", "arguments": "{not json"},
         "response": resp, "_expected": {"status": 422}},
        {**base, "expected_action": {"type": "function_call_batch", "calls": []}, "response": resp,
         "_expected": {"status": 422}},
        {**base, "expected_action": {"type": "shell", "command": "ls"}, "response": resp, "_expected": {"status": 422}},
        {**base, "harness": "terminus_2", "expected_action": {"type": "message", "content": "run ls"},
         "response": resp, "_expected": {"status": 422}},
    ]


def build() -> list[dict[str, Any]]:
    return terminal_rows() + single_step_rows() + terminus_rows() + malformed_rows()


if __name__ == "__main__":
    OUT.write_text("".join(json.dumps(r) + "\n" for r in build()))
    print(f"wrote {OUT}")
