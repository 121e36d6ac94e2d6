"""A scripted OpenAI-compatible judge: the documented test double of a large judge model.

A real aiohttp HTTP server (``/v1/chat/completions``, ``/v1/responses``, ``/v1/models``)
that answers from a table instead of a model: the first rule whose ``contains`` strings all
occur in the request's messages gives the reply text. It is what ``envs check`` and the
conformance suite run judged environments' example rows against (the boundary we cannot
reach in CI is the judge model, not HTTP), and what tests use to inject failures:

* ``latency_s``: every answer waits this long (a 50 ms judge for benchmarks);
* ``fail_next``: HTTP statuses answered before normal service resumes (429, 503, ...);
* ``garbage``: answer 200 with a reply that holds no verdict;
* ``stall_s``: answer only after this long (past the client's deadline);
* ``await stop()`` / ``await start(port=same)``: the judge goes down and comes back;
* ``responder``: a function of the prompt that replaces the table (a naive model for adversarial
  tests: one that quotes the response after its verdict, or counts labels).
* ``models``: the model names ``GET /v1/models`` lists (what a judge's readiness checks); with
  ``strict_models`` a completion asking for another answers 404 "does not exist", as vLLM
  does (without it the table answers whatever model a test names).

Table file (``environments/<name>/data/scripted_judge.yaml``)::

    rules:
      - contains: ["apple slices", "avoid suggesting peanuts"]
        reply: "The snack has no peanuts. [[YES]]"
    default: "I cannot decide."      # optional; no rule and no default = an empty reply

Run one by hand: ``python -m servers.scripted_judge --table T.yaml --port 8000 --latency-ms 50``.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import time
from collections import deque
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Callable

import orjson
import yaml
from aiohttp import web

MODEL_NAME = "scripted-judge"


@dataclass(frozen=True)
class Rule:
    contains: tuple[str, ...]
    reply: str


def load_table(path: Path) -> tuple[list[Rule], str]:
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict) or not isinstance(data.get("rules", []), list):
        raise ValueError(f"{path}: expected {{rules: [{{contains: [...], reply: ...}}], default: ...}}")
    rules = []
    for i, rule in enumerate(data.get("rules", [])):
        if not isinstance(rule, dict) or set(rule) - {"contains", "reply"} or "reply" not in rule:
            raise ValueError(f"{path}: rule {i} must be {{contains: [strings], reply: string}}, got {rule!r}")
        rules.append(Rule(tuple(rule.get("contains") or ()), str(rule["reply"])))
    return rules, str(data.get("default", ""))


def _prompt_text(body: dict[str, Any]) -> str:
    messages = body.get("messages") if "messages" in body else body.get("input")
    if isinstance(messages, str):
        return messages
    parts = []
    for message in messages or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(str(c.get("text", "")) for c in content if isinstance(c, dict))
    return "\n".join(parts)


class ScriptedJudge:
    def __init__(self, rules: list[Rule] | None = None, default_reply: str = "", *, latency_s: float = 0.0,
                 responder: Callable[[str], str] | None = None, models: tuple[str, ...] = (MODEL_NAME,),
                 strict_models: bool = False):
        self.rules = list(rules or [])
        self.models = tuple(models)
        self.strict_models = strict_models
        self.default_reply = default_reply
        self.responder = responder
        self.latency_s = latency_s
        self.stall_s = 0.0
        self.garbage = False
        self.fail_next: deque[int] = deque()
        self.requests = 0  # completions requested (any outcome)
        self.answered = 0  # completions answered 200
        self.prompts: deque[str] = deque(maxlen=10000)  # the latest prompts received (tests inspect them)
        self.bodies: deque[dict[str, Any]] = deque(maxlen=100)  # the latest request bodies
        self.last_authorization: str | None = None  # the Authorization header of the latest request (any route)
        self.port: int | None = None
        self._runner: web.AppRunner | None = None

    @classmethod
    def from_table(cls, path: Path, **kwargs: Any) -> "ScriptedJudge":
        rules, default = load_table(path)
        return cls(rules, default, **kwargs)

    @property
    def url(self) -> str:
        """The ``base_url`` a judge config points at."""
        return f"http://127.0.0.1:{self.port}/v1"

    def reply_for(self, prompt: str) -> str:
        if self.responder is not None:
            return self.responder(prompt)
        for rule in self.rules:
            if all(s in prompt for s in rule.contains):
                return rule.reply
        return self.default_reply

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/responses", self._responses)
        app.router.add_get("/v1/models", self._models)
        # A short shutdown: stop() is 'the judge died', in-flight calls see their connection drop.
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=0.2)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port or self.port or 0, reuse_address=True, backlog=4096)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self.url

    async def stop(self) -> None:
        """Close the listener and every open connection: callers see connection errors."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _answer(self, request: web.Request) -> tuple[str, str] | web.Response:
        self.requests += 1
        self.last_authorization = request.headers.get("Authorization")
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            return web.json_response({"error": {"message": "malformed JSON"}}, status=400)
        if self.fail_next:
            status = self.fail_next.popleft()
            return web.json_response({"error": {"message": f"scripted failure {status}"}}, status=status,
                                     headers={"Retry-After": "0"} if status == 429 else None)
        model = str(body.get("model", ""))
        if self.strict_models and model not in self.models:
            return web.json_response({"object": "error", "type": "NotFoundError", "code": 404,
                                      "message": f"The model `{model}` does not exist."}, status=404)
        delay = self.stall_s or self.latency_s
        if delay:
            await asyncio.sleep(delay)
        prompt = _prompt_text(body)
        self.prompts.append(prompt)
        self.bodies.append(body)
        text = "Thinking about it... the answer is unclear." if self.garbage else self.reply_for(prompt)
        self.answered += 1
        return model, text

    async def _chat(self, request: web.Request) -> web.Response:
        got = await self._answer(request)
        if isinstance(got, web.Response):
            return got
        model, text = got
        return web.Response(body=orjson.dumps({
            "id": f"chatcmpl-{self.requests}", "object": "chat.completion", "created": int(time.time()),
            "model": model, "choices": [{"index": 0, "finish_reason": "stop",
                                         "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}),
            content_type="application/json")

    async def _responses(self, request: web.Request) -> web.Response:
        got = await self._answer(request)
        if isinstance(got, web.Response):
            return got
        model, text = got
        return web.Response(body=orjson.dumps({
            "id": f"resp_{self.requests}", "object": "response", "created_at": time.time(), "model": model,
            "status": "completed", "output": [{"id": "msg_0", "type": "message", "role": "assistant",
                                               "status": "completed",
                                               "content": [{"type": "output_text", "text": text, "annotations": []}]}],
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": []}), content_type="application/json")

    async def _models(self, request: web.Request) -> web.Response:
        self.last_authorization = request.headers.get("Authorization")
        return web.json_response({"object": "list", "data": [{"id": m, "object": "model", "owned_by": "verigym"}
                                                              for m in self.models]})


TABLE_NAME = "scripted_judge.yaml"


@asynccontextmanager
async def example_judges(env_name: str, env_cls: Any, folder: Path) -> AsyncIterator[dict[str, Any]]:
    """For a judged environment (``"judge" in needs``): a scripted judge answering from the
    folder's ``data/scripted_judge.yaml``, and the config overrides that point every judge of
    the environment at it. Other environments get no server and no overrides."""
    if "judge" not in getattr(env_cls, "needs", ()):
        yield {}
        return
    table = folder / "data" / TABLE_NAME
    if not table.is_file():
        raise FileNotFoundError(f"{table} is missing: a judged environment's example rows run against a "
                                "scripted judge answering from it (see servers/scripted_judge.py)")
    configured = (yaml.safe_load((folder / "config.yaml").read_text()) or {}) if (folder / "config.yaml").is_file() else {}
    known = set(configured.get("judges") or {})
    models = {MODEL_NAME} | {str(configured["judges"][name]["model"]) for name in known
                             if isinstance(configured["judges"][name], dict) and "model" in configured["judges"][name]}
    judge = ScriptedJudge.from_table(table, models=tuple(sorted(models)))
    url = await judge.start()
    names = set(getattr(env_cls, "judge_names", ("judge",))) | known
    try:
        # Configured judges keep their model, API and sampling (the request shape is tested too).
        yield {"judges": {name: {"base_url": url} if name in known else {"base_url": url, "model": MODEL_NAME}
                          for name in sorted(names)}}
    finally:
        await judge.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m servers.scripted_judge", description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", type=Path, help="rules YAML (see the module docstring); none = empty replies")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 = a free port (the printed URL says which)")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="delay before every answer")
    parser.add_argument("--reply", help="the reply when no rule matches (overrides the table's default)")
    parser.add_argument("--model", action="append", dest="models", metavar="NAME",
                        help=f"a model name it serves (repeatable; default {MODEL_NAME!r}): a judge configured "
                             "with another is not ready and its calls answer 404, as with a real server")
    args = parser.parse_args(argv)
    models = tuple(args.models or (MODEL_NAME,))
    # By hand it behaves as a real server would: another model name is a 404, not an answer.
    judge = (ScriptedJudge.from_table(args.table, models=models, strict_models=True) if args.table
             else ScriptedJudge(models=models, strict_models=True))
    if args.reply is not None:
        judge.default_reply = args.reply
    judge.latency_s = args.latency_ms / 1000

    async def serve() -> None:
        await judge.start(args.host, args.port)
        print(f"scripted judge on http://{args.host}:{judge.port}/v1 (chat/completions, responses, models), "
              f"serving {', '.join(judge.models)}; Ctrl-C stops it", flush=True)
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
        await stop.wait()
        await judge.stop()

    from servers.app import run_event_loop  # uvloop when installed, like the environment servers

    run_event_loop(serve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
