"""Conformance with vLLM's RL HTTP surface, checked in both directions without running vLLM (no GPU or
vLLM here; `vllm serve` itself was not run):

* `envs model serve`'s replies validate against vLLM's reply shapes;
* the requests verigym's client (servers.model.rl_client) sends validate against vLLM's request
  shapes — recorded by a stand-in HTTP server that answers the way vLLM's routes answer (the test
  double at the vLLM boundary), which also shows the client reading a vLLM reply that carries no
  per-token weight versions.

The models below transcribe vLLM's own, read at these commits of vllm-project/vllm (main, 2026):
vllm/entrypoints/openai/completion/protocol.py @ 002032ee2b18 (CompletionRequest, CompletionResponse,
CompletionResponseChoice, CompletionLogProbs), vllm/entrypoints/serve/dev/rlhf/api_router.py
@ 0100a2129224 (/pause, /resume, /is_paused, the weight-transfer routes, /update_weight_version,
/weight_info, /get_world_size), docs/training/weight_transfer/disk.md @ c702168cab1a (the disk
backend's update_info), docs/training/async_rl.md @ 006ebac240f3 and
docs/serving/online_serving/token_in_token_out.md @ 006ebac240f3 (weight_versions spans). vLLM's
models accept unknown request fields with a warning and drop them; here ``extra="forbid"``, so a
field vLLM would silently ignore fails the test instead.
"""

from __future__ import annotations

import os
from typing import Any, Literal

import pytest
from aiohttp import web
from pydantic import BaseModel, ConfigDict

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from servers.model.rl_client import GenerationClient  # noqa: E402
from servers.model.tiny import TinyModelConfig, build_tiny_model, build_tiny_tokenizer  # noqa: E402
from tests.test_model_server import start_model_server, stop  # noqa: E402

SHM = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
PauseMode = Literal["abort", "wait", "keep"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ---- vLLM's shapes (transcribed; see the module doc) ---------------------------------------------
class CompletionRequest(Strict):  # the fields a trainer sends; vLLM's defaults
    model: str | None = None
    prompt: list[int] | list[list[int]] | str | list[str] | None = None
    max_tokens: int | None = 16
    n: int = 1
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    stop: str | list[str] | None = []
    stop_token_ids: list[int] | None = []
    ignore_eos: bool = False
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    return_tokens_as_token_ids: bool | None = None
    return_token_ids: bool | None = None
    request_id: str | None = None


class CompletionLogProbs(Strict):
    text_offset: list[int]
    token_logprobs: list[float | None]
    tokens: list[str]
    top_logprobs: list[dict[str, float] | None]


class Logprob(Strict):  # vllm.logprobs.Logprob
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


class WeightVersionSpan(Strict):  # token_in_token_out.md "Weight versions"
    version: str
    start: int
    end: int


class CompletionResponseChoice(Strict):
    index: int
    text: str
    logprobs: CompletionLogProbs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    token_ids: list[int] | None = None
    prompt_logprobs: list[dict[int, Logprob] | None] | None = None
    prompt_token_ids: list[int] | None = None
    routed_experts: str | None = None
    weight_versions: list[WeightVersionSpan] | None = None  # verigym's addition (vLLM: on /inference/v1/generate)


class UsageInfo(Strict):
    prompt_tokens: int = 0
    total_tokens: int = 0
    completion_tokens: int | None = 0


class CompletionResponse(Strict):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionResponseChoice]
    usage: UsageInfo
    system_fingerprint: str | None = None


class InitRequest(Strict):
    init_info: dict[str, Any]


class UpdateRequest(Strict):
    update_info: dict[str, Any]


class DiskUpdateInfo(Strict):
    path: str


class FinishRequest(Strict):
    weight_version: str | None = None


class StartRequest(Strict):
    is_checkpoint_format: bool | None = None  # older vLLM; today's router reads no body


REPLIES: dict[str, dict[str, Any]] = {  # the router's JSON replies
    "/pause": {"status": "paused"}, "/resume": {"status": "resumed"},
    "/init_weight_transfer_engine": {"message": "Weight transfer initialized"},
    "/start_weight_update": {"message": "Weight update started"}, "/update_weights": {"message": "Weights updated"},
    "/finish_weight_update": {"message": "Weight update finished"},
}


# ---- our server against vLLM's reply shapes ---------------------------------------------------------
@pytest.fixture(scope="module")
def server(tmp_path_factory):
    proc, info = start_model_server(tmp_path_factory.mktemp("conf"), "tiny", "--weight-transfer-config",
                                    '{"backend": "disk"}', "--cpu-threads", "1")
    yield info
    stop(proc)


async def _call(method: str, url: str, body: Any = None) -> tuple[int, Any]:
    import aiohttp

    async with aiohttp.ClientSession() as s:
        async with s.request(method, url, json=body) as r:
            return r.status, await r.json(content_type=None)


async def test_completion_replies_have_vllms_shape(server):
    tok = build_tiny_tokenizer()
    prompt = tok("hello there", add_special_tokens=False)["input_ids"]
    for request in (
        {"prompt": prompt, "max_tokens": 5, "return_token_ids": True, "logprobs": 0},
        {"prompt": [prompt, prompt[:3]], "max_tokens": 4, "n": 2, "logprobs": 3, "prompt_logprobs": 2,
         "return_token_ids": True, "return_tokens_as_token_ids": True, "seed": 4, "stop": ["e"]},
        {"prompt": "plain text", "max_tokens": 3, "temperature": 0},
    ):
        CompletionRequest.model_validate(request)  # the test's own requests are vLLM requests
        status, body = await _call("POST", server["base_url"] + "/completions", request)
        assert status == 200, body
        reply = CompletionResponse.model_validate(body)
        for choice in reply.choices:
            if request.get("return_token_ids"):
                assert choice.token_ids is not None and choice.prompt_token_ids is not None
                n = len(choice.token_ids)
                assert choice.weight_versions and choice.weight_versions[-1].end == n
            else:
                assert choice.token_ids is None and choice.prompt_token_ids is None
            if request.get("logprobs") is not None:
                assert choice.logprobs is not None and len(choice.logprobs.tokens) == len(choice.token_ids or [])
            assert (choice.prompt_logprobs is not None) == ("prompt_logprobs" in request)


async def test_rl_route_replies_have_vllms_shape(server, tmp_path):
    url = server["url"]
    assert await _call("POST", url + "/pause?mode=keep") == (200, REPLIES["/pause"])
    assert await _call("GET", url + "/is_paused") == (200, {"is_paused": True})
    assert await _call("POST", url + "/resume") == (200, REPLIES["/resume"])
    assert await _call("POST", url + "/init_weight_transfer_engine", {"init_info": {}}) == \
        (200, REPLIES["/init_weight_transfer_engine"])
    assert await _call("POST", url + "/start_weight_update", {"is_checkpoint_format": True}) == \
        (200, REPLIES["/start_weight_update"])
    from safetensors.torch import save_file

    model = build_tiny_model(build_tiny_tokenizer(), TinyModelConfig(), 0)
    save_file({n: p.detach() for n, p in model.named_parameters()}, str(tmp_path / "model.safetensors"))
    assert await _call("POST", url + "/update_weights", {"update_info": {"path": str(tmp_path)}}) == \
        (200, REPLIES["/update_weights"])
    assert await _call("POST", url + "/finish_weight_update", {"weight_version": "7"}) == \
        (200, REPLIES["/finish_weight_update"])
    assert await _call("GET", url + "/weight_info") == (200, {"weight_version": "7"})
    status, body = await _call("GET", url + "/get_world_size")
    assert status == 200 and set(body) == {"world_size"} and isinstance(body["world_size"], int)


# ---- our client against a stand-in answering as vLLM does --------------------------------------------
class VLLMStandIn:
    """Records what it is sent and answers with vLLM's reply shapes (no weight_versions on
    /v1/completions, as vLLM's completions route)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []
        self.paused = False

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json() if request.can_read_body else None
        self.calls.append((request.path, request.query_string, body))
        if request.path == "/v1/completions":
            req = CompletionRequest.model_validate(body)
            ids = list(range(1, (req.max_tokens or 16) + 1))
            choice = {"index": 0, "text": "x" * len(ids), "finish_reason": "length", "stop_reason": None,
                      "token_ids": ids, "prompt_token_ids": req.prompt, "prompt_logprobs": None, "routed_experts": None,
                      "logprobs": {"text_offset": list(range(len(ids))), "token_logprobs": [-1.0] * len(ids),
                                   "tokens": ["x"] * len(ids), "top_logprobs": [{"x": -1.0}] * len(ids)}}
            return web.json_response({"id": "cmpl-1", "object": "text_completion", "created": 0, "model": "m",
                                      "choices": [choice], "usage": {"prompt_tokens": 1, "completion_tokens": 1,
                                                                     "total_tokens": 2}})
        if request.path == "/pause":
            assert request.query.get("mode", "abort") in ("abort", "wait", "keep")
            self.paused = True
        if request.path == "/resume":
            self.paused = False
        if request.path == "/is_paused":
            return web.json_response({"is_paused": self.paused})
        validators = {"/init_weight_transfer_engine": InitRequest, "/update_weights": UpdateRequest,
                      "/finish_weight_update": FinishRequest, "/start_weight_update": StartRequest}
        if request.path in validators:
            validators[request.path].model_validate(body or {})
        if request.path == "/update_weights":
            DiskUpdateInfo.model_validate(body["update_info"])
        return web.json_response(REPLIES.get(request.path, {}))


async def test_the_client_speaks_vllms_requests_and_reads_its_replies():
    standin = VLLMStandIn()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", standin.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
    try:
        async with GenerationClient(url + "/v1", model="m") as c:
            out = await c.complete([5, 6, 7], max_tokens=4, temperature=0.7, top_p=1.0, seed=3, stop=["\n"],
                                   ignore_eos=True)
            assert out[0].token_ids == [1, 2, 3, 4] and out[0].logprobs == [-1.0] * 4
            assert out[0].versions == []  # vLLM's /v1/completions carries none: the caller knows
            await c.init_weight_transfer({})
            await c.pause("keep")
            assert await c.is_paused()
            model = build_tiny_model(build_tiny_tokenizer(), TinyModelConfig(), 0)
            await c.push_weights(dict(model.named_parameters()), "3", SHM)
            await c.resume()
    finally:
        await runner.cleanup()
    paths = [p for p, _, _ in standin.calls]
    assert paths == ["/v1/completions", "/init_weight_transfer_engine", "/pause", "/is_paused",
                     "/start_weight_update", "/update_weights", "/finish_weight_update", "/resume"]
    assert standin.calls[2][1] == "mode=keep"
    assert standin.calls[6][2] == {"weight_version": "3"}
