"""The local OpenAI-compatible model server on the one decode engine, aiohttp.

Routes
  GET  /v1/models             the one served model
  POST /v1/completions        vLLM's completions: prompt text or token ids in; token ids, logprobs,
                              prompt logprobs and per-token weight versions out (servers.model.completions)
  POST /v1/chat/completions   Chat Completions (messages, max_tokens, temperature, top_p, n, stop, seed, tools)
  POST /v1/responses          Responses API (input, instructions, max_output_tokens, temperature, top_p, tools)
  GET  /health                {"ok": true, "model", "engine", "device", "decode", "weight_version", "paused"}
  GET  /metrics               Prometheus text: requests by route/status, batches, batch sizes, tokens
  + vLLM's RL control routes (pause/resume, weight transfer) with --weight-transfer-config
    (servers.model.rl_routes)

Errors are OpenAI's ``{"error": {message, type, param, code}}``: bad JSON or an invalid
parameter 400, a model other than the served one 404, a non-JSON content type 415, a full
queue 503 with Retry-After, a generation that raised 500.

Every route decodes with the one engine (servers.model.engine) through the scheduler
(servers.model.scheduler). A cluster points judges' ``base_url`` at ``vllm serve`` instead, which
speaks the same API.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from dataclasses import replace
from typing import Any, Awaitable, Callable

import orjson
from aiohttp import web

from servers.model import completions, openai_api
from servers.model.engine import DecodeEngine, EngineRequest
from servers.model.loading import LoadedModel
from servers.model.openai_api import BadRequest, GenerationResult, ParsedRequest
from servers.model.rl_routes import RLRoutes
from servers.model.sampling import SamplingParams, SequenceOutput, seed_for
from servers.model.scheduler import BATCH_BUCKETS, QueueFull, Scheduler
from servers.model.weight_transfer import WeightTransfer

log = logging.getLogger("verigym.model")


def _json(status: int, body: Any, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json", headers=headers)


class ModelServer:
    def __init__(self, loaded: LoadedModel, *, max_batch_size: int = 16, max_wait_ms: float = 10.0,
                 max_queued: int = 1024, default_max_tokens: int = 512, weight_transfer: str | None = None,
                 enforce_eager: bool = False, compile: bool = False):
        self.loaded = loaded
        self.engine = DecodeEngine(loaded.model, loaded.tokenizer, graphs=not enforce_eager, compile=compile,
                                   stop_token_ids=loaded.stop_token_ids)
        self.scheduler = Scheduler(self.engine, max_batch_size=max_batch_size, max_wait_s=max_wait_ms / 1000,
                                   max_queued=max_queued)
        self.default_max_tokens = default_max_tokens
        self.requests: Counter[tuple[str, int]] = Counter()
        self.created = int(time.time())
        self._routes: dict[tuple[str, str], Callable[[web.Request], Awaitable[web.Response]]] = {
            ("GET", "/v1/models"): self._models, ("POST", "/v1/completions"): self._completions,
            ("POST", "/v1/chat/completions"): self._chat, ("POST", "/v1/responses"): self._responses,
            ("GET", "/health"): self._health, ("GET", "/metrics"): self._metrics,
        }
        self.transfer = WeightTransfer(self.engine, weight_transfer) if weight_transfer else None
        if self.transfer is not None:
            rl = RLRoutes(self.scheduler, self.transfer, self._body)
            for key, handler in rl.routes().items():
                self._routes[key] = self._json_route(handler)

    @staticmethod
    def _json_route(handler: Callable[[web.Request], Awaitable[dict[str, Any]]]
                    ) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def route(request: web.Request) -> web.Response:
            return _json(200, await handler(request))
        return route

    def make_app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        app.on_startup.append(self._on_startup)
        app.on_shutdown.append(self._on_shutdown)
        app.on_cleanup.append(self._on_cleanup)
        return app

    async def _on_startup(self, app: web.Application) -> None:
        self.scheduler.start()

    async def _on_shutdown(self, app: web.Application) -> None:
        # before aiohttp waits for open requests: a batch parked by /pause?mode=keep would never end
        self.scheduler.gate.pause(abort=True)

    async def _on_cleanup(self, app: web.Application) -> None:
        await self.scheduler.close()

    async def _dispatch(self, request: web.Request) -> web.Response:
        path = request.path.rstrip("/") or "/"
        handler = self._routes.get((request.method, path))
        if handler is None:
            allowed = [m for (m, p) in self._routes if p == path]
            if allowed:
                resp = _json(405, BadRequest(f"{request.method} {path} is not allowed; use {allowed[0]}").body(),
                             headers={"Allow": ", ".join(allowed)})
            else:
                hint = "" if self.transfer else " (the RL control routes need --weight-transfer-config)"
                resp = _json(404, BadRequest(f"no route {path}; routes: " + ", ".join(sorted({p for _, p in self._routes}))
                                             + hint, status=404).body())
        else:
            try:
                resp = await handler(request)
            except BadRequest as exc:
                resp = _json(exc.status, exc.body())
            except QueueFull as exc:
                resp = _json(503, BadRequest(str(exc), status=503, code="overloaded").body(), headers={"Retry-After": "1"})
            except Exception as exc:  # noqa: BLE001 - the server stays up; the client sees what failed
                log.exception("generation failed")
                resp = _json(500, BadRequest(f"generation failed: {type(exc).__name__}: {exc}", status=500).body())
        self.requests[(path if handler else "other", resp.status)] += 1
        return resp

    # ---- routes ------------------------------------------------------------------------
    async def _models(self, request: web.Request) -> web.Response:
        return _json(200, {"object": "list", "data": [{"id": self.loaded.name, "object": "model",
                                                      "created": self.created, "owned_by": "verigym"}]})

    async def _health(self, request: web.Request) -> web.Response:
        return _json(200, {"ok": True, "model": self.loaded.name, "engine": "verigym", "decode": self.engine.kind,
                           "device": self.loaded.device, "queued": self.scheduler.queued,
                           "running": self.scheduler.running,
                           "paused": self.scheduler.paused, "weight_version": self.engine.weight_version,
                           "weight_transfer": self.transfer.backend if self.transfer else None})

    async def _completions(self, request: web.Request) -> web.Response:
        req = completions.parse(await self._body(request))
        self._check_model(req.model)
        prompts = [p if isinstance(p, list) else await asyncio.to_thread(self._encode, p, req.add_special_tokens)
                   for p in req.prompts]
        for ids in prompts:
            room = self.loaded.max_context - len(ids)
            if room < 1 or req.params.max_new_tokens > room:
                raise BadRequest(f"prompt ({len(ids)} tokens) + max_tokens ({req.params.max_new_tokens}) exceed the "
                                 f"model's context ({self.loaded.max_context})", param="max_tokens",
                                 code="context_length_exceeded")
            if max(ids) >= len(self.loaded.tokenizer):
                raise BadRequest(f"prompt token id {max(ids)} is outside the vocabulary ({len(self.loaded.tokenizer)})",
                                 param="prompt")
        seeds = [None if req.params.seed is None else seed_for(req.params.seed, i) for i in range(len(prompts) * req.n)]
        outputs = await asyncio.gather(*(
            self.scheduler.generate(EngineRequest(ids, replace(req.params, seed=seeds[p * req.n + j])))
            for p, ids in enumerate(prompts) for j in range(req.n)))
        with self.engine.tokenizer_lock:
            body = completions.response(self.loaded.tokenizer, self.loaded.name, req, list(outputs))
        return _json(200, body)

    async def _chat(self, request: web.Request) -> web.Response:
        parsed = openai_api.parse_chat(await self._body(request))
        prompt_ids, max_new = await self._prepare(parsed)
        outputs = await asyncio.gather(*(self.scheduler.generate(self._gen_request(parsed, prompt_ids, max_new, i))
                                         for i in range(parsed.sampling.n)))
        results = [self._result(o) for o in outputs]
        return _json(200, openai_api.chat_completion(self.loaded.name, len(prompt_ids), results))

    async def _responses(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        parsed = openai_api.parse_responses(body)
        prompt_ids, max_new = await self._prepare(parsed)
        output = await self.scheduler.generate(self._gen_request(parsed, prompt_ids, max_new, 0))
        return _json(200, openai_api.response_object(self.loaded.name, len(prompt_ids), self._result(output), body))

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(text=self.render_metrics(), content_type="text/plain")

    # ---- helpers -----------------------------------------------------------------------
    @staticmethod
    async def _body(request: web.Request) -> dict[str, Any]:
        mime = (request.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
        if mime != "application/json":
            # a browser page may POST text/plain to localhost without a preflight; never act on one
            raise BadRequest("send the body as application/json", status=415)
        raw = await request.read()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise BadRequest(f"the body is not valid JSON: {exc}") from None
        if not isinstance(body, dict):
            raise BadRequest("the body must be a JSON object")
        return body

    def _check_model(self, model: str | None) -> None:
        if model not in (None, "", self.loaded.name):
            raise BadRequest(f"the model {model!r} does not exist; this server serves {self.loaded.name!r}",
                             param="model", status=404, code="model_not_found")

    def _encode(self, text: str, add_special_tokens: bool) -> list[int]:
        with self.engine.tokenizer_lock:
            return self.loaded.tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"]

    def _result(self, out: SequenceOutput) -> GenerationResult:
        with self.engine.tokenizer_lock:
            text = completions.output_text(self.loaded.tokenizer, out)
        return GenerationResult(text=text, completion_tokens=len(out.token_ids), finish_reason=out.finish_reason)

    async def _prepare(self, parsed: ParsedRequest) -> tuple[list[int], int]:
        self._check_model(parsed.model)
        prompt_ids = await asyncio.to_thread(self._render, parsed)
        room = self.loaded.max_context - len(prompt_ids)
        if room < 1:
            raise BadRequest(f"the prompt is {len(prompt_ids)} tokens; the model's context is "
                             f"{self.loaded.max_context}", param="messages", code="context_length_exceeded")
        wanted = parsed.sampling.max_new_tokens
        if wanted is not None and wanted > room:
            raise BadRequest(f"prompt ({len(prompt_ids)} tokens) + max tokens ({wanted}) exceed the model's context "
                             f"({self.loaded.max_context}); ask for at most {room}", param="max_tokens",
                             code="context_length_exceeded")
        return prompt_ids, wanted if wanted is not None else min(self.default_max_tokens, room)

    def _render(self, parsed: ParsedRequest) -> list[int]:
        tok = self.loaded.tokenizer
        with self.engine.tokenizer_lock:  # see DecodeEngine.tokenizer_lock
            try:
                text = tok.apply_chat_template(parsed.messages, tools=parsed.tools, tokenize=False,
                                               add_generation_prompt=True, **parsed.template_kwargs)
            except Exception as exc:  # noqa: BLE001 - a template error is the request's (roles, tool shapes)
                raise BadRequest(f"the chat template rejected these messages: {type(exc).__name__}: {exc}",
                                 param="messages") from None
            return tok(text, add_special_tokens=False)["input_ids"]

    @staticmethod
    def _gen_request(parsed: ParsedRequest, prompt_ids: list[int], max_new: int, index: int) -> EngineRequest:
        s = parsed.sampling
        return EngineRequest(prompt_ids, SamplingParams(
            max_new_tokens=max_new, temperature=s.temperature, top_p=s.top_p, stop=s.stop,
            seed=None if s.seed is None else seed_for(s.seed, index)))

    def render_metrics(self) -> str:
        st = self.scheduler.stats
        model = f'model="{self.loaded.name}"'
        lines = ["# HELP verigym_model_requests_total HTTP requests by route and status.",
                 "# TYPE verigym_model_requests_total counter"]
        for (route, status), n in sorted(self.requests.items()):
            lines.append(f'verigym_model_requests_total{{{model},route="{route}",status="{status}"}} {n}')
        lines += [
            "# HELP verigym_model_generations_total Sequences submitted for generation (n>1 counts n).",
            "# TYPE verigym_model_generations_total counter", f"verigym_model_generations_total{{{model}}} {st.requests}",
            "# HELP verigym_model_batches_total Batched generate calls run.",
            "# TYPE verigym_model_batches_total counter", f"verigym_model_batches_total{{{model}}} {st.batches}",
            "# HELP verigym_model_batch_rows_total Sequences generated in batches (rows / batches = mean batch size).",
            "# TYPE verigym_model_batch_rows_total counter", f"verigym_model_batch_rows_total{{{model}}} {st.batch_rows}",
            "# TYPE verigym_model_max_batch_rows gauge", f"verigym_model_max_batch_rows{{{model}}} {st.max_batch_rows}",
            "# HELP verigym_model_batch_rows Batch sizes.", "# TYPE verigym_model_batch_rows histogram",
        ]
        cumulative = 0
        for bound, n in zip(BATCH_BUCKETS, st.batch_size_counts):
            cumulative += n
            lines.append(f'verigym_model_batch_rows_bucket{{{model},le="{bound}"}} {cumulative}')
        lines += [
            f'verigym_model_batch_rows_bucket{{{model},le="+Inf"}} {st.batches}',
            f"verigym_model_batch_rows_sum{{{model}}} {st.batch_rows}",
            f"verigym_model_batch_rows_count{{{model}}} {st.batches}",
            "# TYPE verigym_model_prompt_tokens_total counter",
            f"verigym_model_prompt_tokens_total{{{model}}} {st.prompt_tokens}",
            "# TYPE verigym_model_completion_tokens_total counter",
            f"verigym_model_completion_tokens_total{{{model}}} {st.completion_tokens}",
            "# TYPE verigym_model_generate_seconds_total counter",
            f"verigym_model_generate_seconds_total{{{model}}} {st.generate_seconds:.6f}",
            "# TYPE verigym_model_generation_errors_total counter",
            f"verigym_model_generation_errors_total{{{model}}} {st.errors}",
            "# TYPE verigym_model_rejected_queue_full_total counter",
            f"verigym_model_rejected_queue_full_total{{{model}}} {st.rejected_queue_full}",
            "# TYPE verigym_model_queued gauge", f"verigym_model_queued{{{model}}} {self.scheduler.queued}",
            "# HELP verigym_model_running Sequences in the batch being decoded (a paused batch included).",
            "# TYPE verigym_model_running gauge", f"verigym_model_running{{{model}}} {self.scheduler.running}",
            "# HELP verigym_model_decode_steps_total Decode steps launched (one token per sequence of the batch).",
            "# TYPE verigym_model_decode_steps_total counter",
            f"verigym_model_decode_steps_total{{{model}}} {self.engine.stats['decode_steps']}",
            "# TYPE verigym_model_pauses_total counter", f"verigym_model_pauses_total{{{model}}} {st.pauses}",
            "# TYPE verigym_model_paused gauge", f"verigym_model_paused{{{model}}} {int(self.scheduler.paused)}",
            "# TYPE verigym_model_weight_updates_total counter",
            f"verigym_model_weight_updates_total{{{model}}} {self.transfer.updates if self.transfer else 0}",
            "# TYPE verigym_model_finish_total counter",
        ]
        for reason, n in sorted(st.finish_reasons.items()):
            lines.append(f'verigym_model_finish_total{{{model},reason="{reason}"}} {n}')
        return "\n".join(lines) + "\n"
