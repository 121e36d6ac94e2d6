"""OpenAI request parsing and response shapes: Chat Completions and the Responses API.

Requests become chat messages (+ tools) for the tokenizer's chat template and one
:class:`SamplingParams` (the request-level one; the engine's per-sequence parameters are
:class:`servers.model.sampling.SamplingParams`); results become the two APIs' response objects, with token usage.
A parameter the engine cannot honour (``stream``, ``logprobs``, a JSON ``response_format``...)
is a 400 naming it, not silently dropped; bookkeeping parameters (``user``, ``metadata``,
``store``...) are accepted.

Tool calls: tools are rendered by the chat template; ``<tool_call>{"name", "arguments"}</tool_call>``
blocks in the output (Hermes syntax, which the tiny preset's template teaches) come back as
``tool_calls`` / ``function_call`` items.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from dataclasses import dataclass
from typing import Any


# Accepted and without effect on generation (request bookkeeping).
_BOOKKEEPING = {"user", "metadata", "store", "service_tier", "stream_options", "parallel_tool_calls", "tool_choice",
                "truncation", "include", "background", "prompt_cache_key", "safety_identifier", "previous_response_id"}
_CHAT_KEYS = {"model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "n", "stop",
              "tools", "stream", "logprobs", "top_logprobs", "response_format", "seed", "frequency_penalty",
              "presence_penalty", "logit_bias", "chat_template_kwargs"}
_RESPONSES_KEYS = {"model", "input", "instructions", "max_output_tokens", "temperature", "top_p", "tools", "stream",
                   "text", "top_logprobs", "chat_template_kwargs"}
_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
# A GenRM's chat template adds roles for the two answers it compares (and an optional principle);
# vLLM passes any role to the template, and so does this server (environments/genrm).
_CHAT_ROLES = ("system", "developer", "user", "assistant", "tool", "response_1", "response_2", "principle")


@dataclass
class GenerationResult:
    """What the chat and Responses shapes need of one generated sequence."""

    text: str
    completion_tokens: int
    finish_reason: str  # "stop" (a stop token or string) | "length" (max tokens reached) | "abort"


class BadRequest(Exception):
    """An invalid request: 400 with OpenAI's ``{"error": {message, type, param}}``."""

    def __init__(self, message: str, param: str | None = None, status: int = 400, code: str | None = None):
        super().__init__(message)
        self.param, self.status, self.code = param, status, code

    def body(self) -> dict[str, Any]:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return {"error": {"message": str(self), "type": kind, "param": self.param, "code": self.code}}


@dataclass
class SamplingParams:
    max_new_tokens: int | None  # None: the server's default
    temperature: float
    top_p: float
    n: int
    stop: tuple[str, ...]
    seed: int | None = None


@dataclass
class ParsedRequest:
    model: str | None
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    sampling: SamplingParams
    template_kwargs: dict[str, Any]


def _check_keys(body: dict[str, Any], allowed: set[str]) -> None:
    for key in body:
        if key not in allowed and key not in _BOOKKEEPING:
            raise BadRequest(f"unsupported parameter {key!r}", param=key)
    unsupported = {"stream": True, "logprobs": True}
    for key, bad in unsupported.items():
        if body.get(key) == bad:
            raise BadRequest(f"{key}=true is not supported by this server (it answers whole responses)", param=key)
    for key in ("top_logprobs", "logit_bias"):
        if body.get(key) not in (None, 0, {}):
            raise BadRequest(f"{key} is not supported by this server", param=key)
    for key in ("frequency_penalty", "presence_penalty"):
        if body.get(key) not in (None, 0, 0.0):
            raise BadRequest(f"{key} other than 0 is not supported by this server", param=key)
    fmt = body.get("response_format")
    if isinstance(body.get("text"), dict):  # the Responses API's spelling
        fmt = body["text"].get("format", fmt)
    if isinstance(fmt, dict) and fmt.get("type") not in (None, "text"):
        raise BadRequest("structured output formats are not supported by this server", param="response_format")


def number(body: dict[str, Any], key: str, default: float, lo: float, hi: float) -> float:
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
        raise BadRequest(f"{key} must be a number in [{lo}, {hi}], got {value!r}", param=key)
    return float(value)


def max_tokens_of(body: dict[str, Any], *keys: str, allow_zero: bool = False) -> int | None:
    lowest = 0 if allow_zero else 1
    for key in keys:
        value = body.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
            kind = "a non-negative" if allow_zero else "a positive"
            raise BadRequest(f"{key} must be {kind} integer, got {value!r}", param=key)
        return value
    return None


def seed_of(body: dict[str, Any]) -> int | None:
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not -2**63 <= seed < 2**63):
        raise BadRequest("seed must be a 64-bit integer", param="seed")
    return seed


def stop_strings(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or len(value) > 4 or not all(isinstance(s, str) for s in value):
        raise BadRequest("stop must be a string or a list of at most 4 strings", param="stop")
    return tuple(value)


def _text_of(content: Any, param: str) -> str:
    """Message content: a string, or a list of text parts (``text`` / ``input_text`` / ``output_text``)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for i, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") not in ("text", "input_text", "output_text"):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise BadRequest(f"content part of type {kind!r} is not supported (text only)", param=f"{param}[{i}]")
            parts.append(str(part.get("text", "")))
        return "".join(parts)
    raise BadRequest("content must be a string or a list of text parts", param=param)


def _template_kwargs(body: dict[str, Any]) -> dict[str, Any]:
    kwargs = body.get("chat_template_kwargs") or {}
    if not isinstance(kwargs, dict):
        raise BadRequest("chat_template_kwargs must be an object", param="chat_template_kwargs")
    return kwargs


def parse_chat(body: dict[str, Any]) -> ParsedRequest:
    _check_keys(body, _CHAT_KEYS)
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise BadRequest("messages must be a non-empty list", param="messages")
    messages = []
    for i, msg in enumerate(raw):
        if not isinstance(msg, dict) or msg.get("role") not in _CHAT_ROLES:
            raise BadRequest(f"each message needs a role: {', '.join(_CHAT_ROLES)}", param=f"messages[{i}]")
        out = {"role": "system" if msg["role"] == "developer" else msg["role"],
               "content": _text_of(msg.get("content"), f"messages[{i}].content")}
        if msg.get("tool_calls"):
            out["tool_calls"] = msg["tool_calls"]
        messages.append(out)
    n = body.get("n", 1)
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 16:
        raise BadRequest(f"n must be an integer in [1, 16], got {n!r}", param="n")
    sampling = SamplingParams(max_new_tokens=max_tokens_of(body, "max_completion_tokens", "max_tokens"),
                              temperature=number(body, "temperature", 1.0, 0.0, 2.0),
                              top_p=number(body, "top_p", 1.0, 0.0, 1.0), n=n, stop=stop_strings(body.get("stop")),
                              seed=seed_of(body))
    if sampling.top_p == 0.0:
        raise BadRequest("top_p must be > 0", param="top_p")
    return ParsedRequest(model=body.get("model"), messages=messages, tools=body.get("tools") or None,
                         sampling=sampling, template_kwargs=_template_kwargs(body))


def parse_responses(body: dict[str, Any]) -> ParsedRequest:
    _check_keys(body, _RESPONSES_KEYS)
    raw = body.get("input")
    messages: list[dict[str, Any]] = []
    if body.get("instructions"):
        messages.append({"role": "system", "content": str(body["instructions"])})
    if isinstance(raw, str):
        messages.append({"role": "user", "content": raw})
    elif isinstance(raw, list) and raw:
        for i, item in enumerate(raw):
            messages.extend(_responses_item(item, f"input[{i}]"))
    else:
        raise BadRequest("input must be a string or a non-empty list of items", param="input")
    if not any(m["role"] != "system" for m in messages):
        raise BadRequest("input has no user, assistant or tool item", param="input")
    tools = [{"type": "function", "function": {k: t.get(k) for k in ("name", "description", "parameters")}}
             for t in body.get("tools") or [] if isinstance(t, dict) and t.get("type") == "function"]
    sampling = SamplingParams(max_new_tokens=max_tokens_of(body, "max_output_tokens"),
                              temperature=number(body, "temperature", 1.0, 0.0, 2.0),
                              top_p=number(body, "top_p", 1.0, 0.0, 1.0), n=1, stop=())
    if sampling.top_p == 0.0:
        raise BadRequest("top_p must be > 0", param="top_p")
    return ParsedRequest(model=body.get("model"), messages=messages, tools=tools or None, sampling=sampling,
                         template_kwargs=_template_kwargs(body))


def _responses_item(item: Any, param: str) -> list[dict[str, Any]]:
    if not isinstance(item, dict):
        raise BadRequest("each input item must be an object", param=param)
    kind = item.get("type", "message")
    if kind == "message":
        role = item.get("role")
        if role not in ("system", "developer", "user", "assistant"):
            raise BadRequest("a message item needs role system, developer, user or assistant", param=f"{param}.role")
        return [{"role": "system" if role == "developer" else role, "content": _text_of(item.get("content"), param)}]
    if kind == "function_call":
        call = {"type": "function", "id": item.get("call_id"),
                "function": {"name": item.get("name"), "arguments": _json_or_text(item.get("arguments"))}}
        return [{"role": "assistant", "content": "", "tool_calls": [call]}]
    if kind == "function_call_output":
        return [{"role": "tool", "content": str(item.get("output", "")), "tool_call_id": item.get("call_id")}]
    if kind == "reasoning":
        return []  # earlier reasoning is not re-rendered (what reasoning chat templates do too)
    raise BadRequest(f"input item type {kind!r} is not supported", param=f"{param}.type")


def _json_or_text(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def split_tool_calls(text: str) -> tuple[str, list[dict[str, Any]]]:
    """Hermes ``<tool_call>`` blocks out of the text: (remaining text, [{name, arguments(json str)}])."""
    calls = []
    for block in _TOOL_CALL.findall(text):
        try:
            parsed = json.loads(block)
        except ValueError:
            continue  # not a call: stays in the text
        if isinstance(parsed, dict) and isinstance(parsed.get("name"), str):
            args = parsed.get("arguments", {})
            calls.append({"name": parsed["name"], "arguments": args if isinstance(args, str) else json.dumps(args)})
    if calls:
        text = _TOOL_CALL.sub("", text).strip()
    return text, calls


# ---- response shapes -------------------------------------------------------------------------
def chat_completion(model: str, prompt_tokens: int, results: list[GenerationResult]) -> dict[str, Any]:
    choices = []
    for i, r in enumerate(results):
        text, calls = split_tool_calls(r.text)
        message: dict[str, Any] = {"role": "assistant", "content": text}
        finish = r.finish_reason
        if calls:
            message["tool_calls"] = [{"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function", "function": c}
                                     for c in calls]
            finish = "tool_calls"
        choices.append({"index": i, "message": message, "finish_reason": finish, "logprobs": None})
    completion = sum(r.completion_tokens for r in results)
    return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": model, "choices": choices,
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion,
                      "total_tokens": prompt_tokens + completion}}


def response_object(model: str, prompt_tokens: int, result: GenerationResult, request: dict[str, Any]) -> dict[str, Any]:
    text, calls = split_tool_calls(result.text)
    output: list[dict[str, Any]] = []
    if text or not calls:
        output.append({"id": f"msg_{uuid.uuid4().hex}", "type": "message", "role": "assistant", "status": "completed",
                       "content": [{"type": "output_text", "text": text, "annotations": []}]})
    for c in calls:
        output.append({"id": f"fc_{uuid.uuid4().hex}", "type": "function_call", "call_id": f"call_{uuid.uuid4().hex[:24]}",
                       "name": c["name"], "arguments": c["arguments"], "status": "completed"})
    incomplete = result.finish_reason == "length"
    return {"id": f"resp_{uuid.uuid4().hex}", "object": "response", "created_at": int(time.time()), "model": model,
            "status": "incomplete" if incomplete else "completed",
            "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "output": output, "parallel_tool_calls": True, "tool_choice": "auto", "tools": request.get("tools") or [],
            "temperature": request.get("temperature"), "top_p": request.get("top_p"),
            "max_output_tokens": request.get("max_output_tokens"), "instructions": request.get("instructions"),
            "usage": {"input_tokens": prompt_tokens, "output_tokens": result.completion_tokens,
                      "total_tokens": prompt_tokens + result.completion_tokens,
                      "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}}}
