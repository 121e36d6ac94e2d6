"""Responses API <-> chat messages, and the ``response`` object the policy returns.

A NeMo-Gym row carries ``responses_create_params`` (OpenAI Responses API: ``input`` is a
string or a list of items, ``tools`` are flat ``{type, name, description, parameters}``).
HF chat templates want chat messages and ``{type: function, function: {...}}`` tools.
This module converts both ways and parses tool calls out of generated text (Hermes
``<tool_call>{json}</tool_call>`` syntax, which the tiny preset's template teaches and
Qwen/Nemotron chat templates use).

Training token fields follow NeMo-Gym's ``...ForTraining`` output items (nemo-gym.md
§2.6): ``prompt_token_ids``, ``generation_token_ids``, ``generation_log_probs`` on the
item that closes each model turn. We add ``generation_policy_versions`` (one int per
generated token) for the async GRPO engine; extra item keys are kept by our servers.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from typing import Any

TOOL_CALL_RE = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


def _content_text(content: Any) -> str:
    """Flatten Responses content parts (input_text / output_text / text) into one string."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for part in content:
        if isinstance(part, str):
            parts.append(part)
        elif isinstance(part, dict) and part.get("type") in ("input_text", "output_text", "text"):
            parts.append(part.get("text") or "")
    return "".join(parts)


def chat_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Responses-format function tools -> chat-template tools. Non-function tools are skipped
    (hosted tools have no local meaning)."""
    out = []
    for tool in tools or []:
        if tool.get("type", "function") != "function":
            continue
        if "function" in tool:  # already chat format
            out.append(tool)
            continue
        out.append({"type": "function", "function": {
            "name": tool["name"], "description": tool.get("description") or "",
            "parameters": tool.get("parameters") or {"type": "object", "properties": {}}}})
    return out


def _arguments_obj(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except json.JSONDecodeError:
            return arguments
    return arguments


def to_chat_messages(create_params: dict[str, Any]) -> list[dict[str, Any]]:
    """``responses_create_params`` (instructions + input items) -> chat messages."""
    messages: list[dict[str, Any]] = []
    if create_params.get("instructions"):
        messages.append({"role": "system", "content": create_params["instructions"]})
    items = create_params.get("input", [])
    if isinstance(items, str):
        return messages + [{"role": "user", "content": items}]
    for item in items:
        kind = item.get("type", "message")
        if kind == "message" or (kind is None and "role" in item):
            role = "system" if item.get("role") == "developer" else item.get("role", "user")
            messages.append({"role": role, "content": _content_text(item.get("content"))})
        elif kind == "function_call":
            call = {"type": "function", "id": item.get("call_id"),
                    "function": {"name": item["name"], "arguments": _arguments_obj(item.get("arguments", "{}"))}}
            # Consecutive calls of one turn belong to one assistant message.
            if messages and messages[-1]["role"] == "assistant" and messages[-1].get("_open_calls"):
                messages[-1]["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": "", "tool_calls": [call], "_open_calls": True})
        elif kind == "function_call_output":
            output = item.get("output")
            messages.append({"role": "tool", "tool_call_id": item.get("call_id"),
                             "content": output if isinstance(output, str) else json.dumps(output)})
        elif kind == "reasoning":
            continue  # reasoning traces are not replayed into the prompt (chat templates drop them too)
        else:
            raise ValueError(f"input item of type {kind!r} cannot be rendered by a local chat template")
    for message in messages:
        message.pop("_open_calls", None)
    return messages


def parse_tool_calls(text: str) -> tuple[str, list[dict[str, Any]]]:
    """Split generated text into (visible text, function calls). A ``<tool_call>`` whose body
    is not a JSON object with a ``name`` stays in the text: the environment then sees (and
    may penalise) exactly what the model wrote."""
    calls: list[dict[str, Any]] = []
    kept: list[str] = []
    cursor = 0
    for match in TOOL_CALL_RE.finditer(text):
        try:
            body = json.loads(match.group(1))
        except json.JSONDecodeError:
            continue
        if not isinstance(body, dict) or not isinstance(body.get("name"), str):
            continue
        kept.append(text[cursor:match.start()])
        cursor = match.end()
        arguments = body.get("arguments", {})
        calls.append({"name": body["name"],
                      "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments)})
    kept.append(text[cursor:])
    return "".join(kept), calls


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def message_item(text: str) -> dict[str, Any]:
    return {"id": new_id("msg"), "type": "message", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def function_call_item(name: str, arguments: str) -> dict[str, Any]:
    return {"id": new_id("fc"), "type": "function_call", "name": name, "arguments": arguments,
            "call_id": new_id("call"), "status": "completed"}


def function_call_output_item(call_id: str, output: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": output}


def offers_tools(create_params: dict[str, Any]) -> bool:
    """Whether the row gives the model function tools: then the ``<tool_call>`` blocks it writes
    are calls, sent to the environment as ``function_call`` items (what NeMo-Gym's agents send;
    the same call left as message text scores as text)."""
    return bool(chat_tools(create_params.get("tools")))


def turn_items(text: str, *, prompt_ids: list[int], gen_ids: list[int], logprobs: list[float],
               versions: list[int], parse_tools: bool) -> list[dict[str, Any]]:
    """Output items of one model turn, training token fields on the last one (the turn's
    tokens are recorded exactly once, as NeMo-RL's contiguity check expects). With
    ``parse_tools`` (see :func:`offers_tools`) tool calls become ``function_call`` items."""
    visible, calls = parse_tool_calls(text) if parse_tools else (text, [])
    return parsed_turn_items(visible, calls, prompt_ids=prompt_ids, gen_ids=gen_ids, logprobs=logprobs,
                             versions=versions)


def parsed_turn_items(visible: str, calls: list[dict[str, Any]], *, prompt_ids: list[int], gen_ids: list[int],
                      logprobs: list[float], versions: list[int]) -> list[dict[str, Any]]:
    """:func:`turn_items` of a turn whose text the caller already split (:func:`parse_tool_calls`)."""
    items: list[dict[str, Any]] = []
    if visible.strip() or not calls:
        items.append(message_item(visible))
    items += [function_call_item(c["name"], c["arguments"]) for c in calls]
    items[-1].update(prompt_token_ids=list(prompt_ids), generation_token_ids=list(gen_ids),
                     generation_log_probs=list(logprobs), generation_policy_versions=list(versions))
    return items


def single_turn_response(text: str, *, create_params: dict[str, Any], model: str, prompt_ids: list[int],
                         gen_ids: list[int], logprobs: list[float], versions: list[int],
                         truncated: bool) -> dict[str, Any]:
    """The ``response`` of a one-turn rollout: its tool calls as ``function_call`` items when
    the row offers tools (:func:`offers_tools`)."""
    items = turn_items(text, prompt_ids=prompt_ids, gen_ids=gen_ids, logprobs=logprobs, versions=versions,
                       parse_tools=offers_tools(create_params))
    return build_response(items, create_params=create_params, model=model, input_tokens=len(prompt_ids),
                          output_tokens=len(gen_ids), incomplete=truncated)


def build_response(output: list[dict[str, Any]], *, create_params: dict[str, Any], model: str,
                   input_tokens: int, output_tokens: int, incomplete: bool) -> dict[str, Any]:
    """A complete Responses-API ``Response`` (the fields NeMo-Gym requires, plus usage)."""
    return {
        "id": new_id("resp"), "created_at": time.time(), "model": model, "object": "response",
        "output": output, "status": "incomplete" if incomplete else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "parallel_tool_calls": create_params.get("parallel_tool_calls", True),
        "tool_choice": create_params.get("tool_choice", "auto"),
        "tools": create_params.get("tools", []),
        "temperature": create_params.get("temperature"), "top_p": create_params.get("top_p"),
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens,
                  "total_tokens": input_tokens + output_tokens,
                  "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}},
    }
