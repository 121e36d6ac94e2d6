"""A scripted policy for tests/gym: an OpenAI-compatible ``/v1/chat/completions`` that calls the
tools a table names, then answers. The test double of a policy that can use tools (the tiny
model cannot), so a tool call goes through NeMo-Gym's own agent to a verigym server.

    python tests/gym/scripted_policy.py --table T.json --port 0     # prints "scripted policy on URL"

Table: ``[{"contains": "text of the first user turn", "calls": [{"name", "arguments"}], "answer": "..."}]``.
A request whose first user turn holds ``contains`` gets the calls (a turn with no tool results
yet), then the answer (at once when ``calls`` is empty); any other request gets ``"I cannot help."``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from pathlib import Path
from typing import Any

from aiohttp import web


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")


def reply_for(table: list[dict[str, Any]], messages: list[dict[str, Any]]) -> dict[str, Any]:
    first_user = next((_text(m) for m in messages if m.get("role") == "user"), "")
    rule = next((r for r in table if r["contains"] in first_user), None)
    if rule is None:
        return {"role": "assistant", "content": "I cannot help."}
    if not rule["calls"] or any(m.get("role") == "tool" for m in messages):
        return {"role": "assistant", "content": rule["answer"]}
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
         "function": {"name": call["name"], "arguments": call["arguments"]}} for call in rule["calls"]]}


def make_app(table: list[dict[str, Any]]) -> web.Application:
    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        message = reply_for(table, body.get("messages") or [])
        return web.json_response({
            "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", "scripted-policy"),
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "scripted-policy", "object": "model"}]})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    return app


async def serve(table: list[dict[str, Any]], port: int) -> None:
    runner = web.AppRunner(make_app(table))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    bound = site._server.sockets[0].getsockname()[1]  # noqa: SLF001 - aiohttp exposes no other way to read port 0's pick
    print(f"scripted policy on http://127.0.0.1:{bound}/v1", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", type=Path, required=True)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    asyncio.run(serve(json.loads(args.table.read_text()), args.port))


if __name__ == "__main__":
    main()
