"""/verify bodies of an environment that never reads its prompt (``reads_create_params = False``,
structured_outputs) are decoded without building ``responses_create_params`` (servers/lazy_body.py):
every reply, error or not, must be the one the full parse gives, through a real loopback server."""

from __future__ import annotations

import json

import aiohttp
import orjson
import pytest

from servers import registry
from servers.app import start_server
from servers.lazy_body import UnreadCreateParams, decode_unread_prompt

SCHEMA = json.dumps({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}})
PROMPT = {"input": [{"role": "user", "content": "Give a person as JSON é"}],
          "tools": [{"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}}],
          "temperature": 1.0}


def _row(text: str, **extra: object) -> dict:
    return {"responses_create_params": PROMPT, "schema_str": SCHEMA, "schema_type": "json",
            "response": {"output": [{"type": "message", "role": "assistant",
                                     "content": [{"type": "output_text", "text": text}]}]}, **extra}


BODIES = [
    orjson.dumps(_row('{"name": "Ada", "age": 36}')),  # valid
    orjson.dumps(_row('{"name": "Ada", "age": "x"}', metadata={"k": [1, 2.5, None]})),  # invalid: error message
    orjson.dumps(_row('{"name": "Ada", "age": 36}', reward=0.0)),  # a field the reply overwrites: not spliced
    orjson.dumps(_row("not json"), option=orjson.OPT_INDENT_2),
    orjson.dumps({**_row("{}"), "responses_create_params": {"input": None}}),  # 422 naming input
    orjson.dumps({**_row("{}"), "responses_create_params": {"input": "hi", "tools": [1]}}),  # 422 naming tools.0
    orjson.dumps({**_row("{}"), "responses_create_params": "hi"}),
    orjson.dumps({k: v for k, v in _row("{}").items() if k != "responses_create_params"}),  # 422: missing
    orjson.dumps({k: v for k, v in _row("{}").items() if k != "response"}),
    b'{"responses_create_params": {"input": "\xff"}, "schema_str": "{}", "response": {"output": []}}',  # bad UTF-8: 400
    b'{"responses_create_params": {"input": "hi", "x": [1,,]}, "schema_str": "{}", "response": {"output": []}}',
    b"[]", b"",
]


async def _replies(reads_create_params: bool, monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, bytes]]:
    env = registry.instantiate("structured_outputs")
    monkeypatch.setattr(type(env), "reads_create_params", reads_create_params)
    running = await start_server(env)
    out = []
    try:
        async with aiohttp.ClientSession(headers={"Content-Type": "application/json"}) as http:
            for body in BODIES:
                async with http.post(running.url + "/verify", data=body) as resp:
                    out.append((resp.status, await resp.read()))
    finally:
        await running.stop()
    return out


async def test_replies_equal_the_full_parse(monkeypatch: pytest.MonkeyPatch):
    lazy = await _replies(False, monkeypatch)
    full = await _replies(True, monkeypatch)
    assert lazy == full
    assert [status for status, _ in lazy] == [200, 200, 200, 200, 422, 422, 422, 422, 422, 400, 400, 422, 422]
    assert orjson.loads(lazy[0][1])["responses_create_params"] == PROMPT  # the echo holds the unread prompt
    assert orjson.loads(lazy[2][1])["reward"] == 1.0
    locs = [d["loc"] for d in orjson.loads(lazy[5][1])["detail"]]
    assert locs == ["responses_create_params.tools.0"]


def test_decoder_checks_without_building():
    body = decode_unread_prompt(BODIES[1])
    assert isinstance(body["responses_create_params"], UnreadCreateParams)
    assert body["metadata"] == {"k": [1, 2.5, None]} and body["schema_str"] == SCHEMA
    for raw in BODIES[4:7] + BODIES[9:]:  # the full parse words these errors
        assert decode_unread_prompt(raw) is None
    assert "responses_create_params" not in decode_unread_prompt(BODIES[7])  # pydantic names the missing field
