"""The local model server (`envs model serve`) as a real subprocess on loopback, tiny preset.

Outputs of an untrained tiny model are noise: these tests assert the protocol (shapes, usage
counts, finish reasons, errors) and batching (counted by /metrics), not what the model says.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from servers.model import openai_api
from servers.model.openai_api import BadRequest

REPO = Path(__file__).resolve().parents[1]
pytest.importorskip("torch")
pytest.importorskip("transformers")


def start_model_server(tmp_path: Path, source: str, *args: str, timeout: float = 180) -> tuple[subprocess.Popen, dict]:
    ready = tmp_path / f"ready-{time.monotonic_ns()}.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen([sys.executable, "-m", "servers.cli", "model", "serve", source, "--port", "0",
                             "--ready-file", str(ready), *args], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"model server did not start: {proc.communicate()[1][-3000:]}")
        time.sleep(0.2)
    return proc, json.loads(ready.read_text())


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def tiny_server(tmp_path_factory: pytest.TempPathFactory):
    proc, info = start_model_server(tmp_path_factory.mktemp("model"), "tiny", "--max-tokens", "16")
    yield info
    stop(proc)
    assert proc.returncode == 0, "SIGTERM is a clean stop"


async def post(url: str, body, *, content_type: str = "application/json") -> tuple[int, dict]:
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    async with aiohttp.ClientSession() as s:
        async with s.post(url, data=data, headers={"Content-Type": content_type}) as r:
            return r.status, await r.json(content_type=None)


def metric(text: str, name: str) -> float:
    m = re.search(rf"^{name}{{[^}}]*}} (\S+)$", text, re.MULTILINE)
    assert m, f"{name} missing from /metrics"
    return float(m.group(1))


async def get_text(url: str) -> str:
    async with aiohttp.ClientSession() as s:
        async with s.get(url) as r:
            assert r.status == 200
            return await r.text()


# ---- the three routes ---------------------------------------------------------------------
async def test_models_route(tiny_server):
    async with aiohttp.ClientSession() as s:
        async with s.get(tiny_server["base_url"] + "/models") as r:
            body = await r.json()
    assert r.status == 200 and body["object"] == "list"
    assert [m["id"] for m in body["data"]] == ["tiny"] and body["data"][0]["object"] == "model"


async def test_chat_completions_shape_usage_and_n(tiny_server):
    status, body = await post(tiny_server["base_url"] + "/chat/completions", {
        "model": "tiny", "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
        "max_tokens": 5, "temperature": 0.8, "top_p": 0.9, "n": 3})
    assert status == 200, body
    assert body["object"] == "chat.completion" and body["model"] == "tiny"
    assert [c["index"] for c in body["choices"]] == [0, 1, 2]
    for choice in body["choices"]:
        assert choice["message"]["role"] == "assistant" and isinstance(choice["message"]["content"], str)
        assert choice["finish_reason"] in ("stop", "length")
    usage = body["usage"]
    assert usage["prompt_tokens"] > 0 and 1 <= usage["completion_tokens"] <= 15
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


async def test_responses_shape_and_max_output_tokens(tiny_server):
    status, body = await post(tiny_server["base_url"] + "/responses", {
        "model": "tiny", "instructions": "answer", "input": [{"role": "user", "content": [
            {"type": "input_text", "text": "2+2?"}]}], "max_output_tokens": 4, "temperature": 0})
    assert status == 200, body
    assert body["object"] == "response" and body["model"] == "tiny"
    msg = body["output"][0]
    assert msg["type"] == "message" and msg["role"] == "assistant" and msg["content"][0]["type"] == "output_text"
    assert body["usage"]["output_tokens"] <= 4
    assert body["usage"]["total_tokens"] == body["usage"]["input_tokens"] + body["usage"]["output_tokens"]
    if body["usage"]["output_tokens"] == 4:
        assert body["status"] == "incomplete" and body["incomplete_details"] == {"reason": "max_output_tokens"}


async def test_stop_string_cuts_the_text(tiny_server):
    url = tiny_server["base_url"] + "/chat/completions"
    request = {"messages": [{"role": "user", "content": "count"}], "max_tokens": 12, "temperature": 0}
    _, full = await post(url, request)
    text = full["choices"][0]["message"]["content"]
    assert text, "12 greedy tokens decode to some text"
    stop_string = text[len(text) // 2]
    _, cut = await post(url, {**request, "stop": [stop_string]})
    choice = cut["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert choice["message"]["content"] == text[:text.index(stop_string)]
    assert cut["usage"]["completion_tokens"] <= full["usage"]["completion_tokens"]


# ---- errors -------------------------------------------------------------------------------
@pytest.mark.parametrize("route,body,status,param", [
    ("/chat/completions", b"{not json", 400, None),
    ("/chat/completions", b"[1, 2]", 400, None),
    ("/chat/completions", {"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]}, 404, "model"),
    ("/responses", {"model": "gpt-9", "input": "x"}, 404, "model"),
    ("/chat/completions", {"model": "tiny"}, 400, "messages"),
    ("/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]}, 400, "messages[0]"),
    ("/chat/completions", {"messages": [{"role": "user", "content": "x"}], "stream": True}, 400, "stream"),
    ("/chat/completions", {"messages": [{"role": "user", "content": "x"}], "temperature": 7}, 400, "temperature"),
    ("/chat/completions", {"messages": [{"role": "user", "content": "x"}], "n": 0}, 400, "n"),
    ("/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 10**6}, 400, "max_tokens"),
    ("/chat/completions", {"messages": [{"role": "user", "content": "x"}], "bogus": 1}, 400, "bogus"),
    ("/responses", {"input": []}, 400, "input"),
    ("/responses", {"input": [{"type": "input_image", "image_url": "x"}]}, 400, "input[0].type"),
])
async def test_bad_requests_are_openai_errors(tiny_server, route, body, status, param):
    got, reply = await post(tiny_server["base_url"] + route, body)
    assert got == status, reply
    assert reply["error"]["type"] == "invalid_request_error" and reply["error"]["message"]
    assert reply["error"]["param"] == param


async def test_content_type_route_and_method_errors(tiny_server):
    got, reply = await post(tiny_server["base_url"] + "/chat/completions", "{}", content_type="text/plain")
    assert got == 415 and "application/json" in reply["error"]["message"]
    async with aiohttp.ClientSession() as s:
        async with s.get(tiny_server["base_url"] + "/chat/completions") as r:
            assert r.status == 405 and r.headers["Allow"] == "POST"
        async with s.get(tiny_server["url"] + "/v2/nothing") as r:
            assert r.status == 404 and "routes" in (await r.json())["error"]["message"]
    metrics = await get_text(tiny_server["url"] + "/metrics")
    assert re.search(r'route="other",status="404"} [1-9]', metrics)
    assert re.search(r'route="/v1/chat/completions",status="415"} [1-9]', metrics)


async def test_rl_routes_are_off_without_weight_transfer_config(tiny_server):
    """A judge's server (no --weight-transfer-config) cannot be paused or rewritten."""
    for route in ("/pause?mode=keep", "/start_weight_update", "/update_weights"):
        got, reply = await post(tiny_server["url"] + route, {})
        assert got == 404 and "--weight-transfer-config" in reply["error"]["message"]


# ---- batching and trainer checkpoints --------------------------------------------------------
def _trainer_checkpoint(root: Path) -> Path:
    """A driver-style checkpoint root (checkpoints/step_000003 + latest) of the tiny policy."""
    from trainer.grpo.checkpoint import finalize, save_trainer_state, staging_dir
    from trainer.policy import Policy

    policy = Policy.load()
    ckpt_root = root / "run7" / "checkpoints"
    stage = staging_dir(ckpt_root, 3)
    save_trainer_state(stage, policy.model, None, tokenizer=policy.tokenizer)
    finalize(ckpt_root, stage, 3, {"step": 3}, keep=None)
    return ckpt_root


async def test_trainer_checkpoint_served_and_concurrent_requests_batched(tmp_path):
    # the batch closes when full (4 rows), well before the 60 s wait: batching is asserted by
    # counters, independent of timing
    proc, info = start_model_server(tmp_path, str(_trainer_checkpoint(tmp_path)), "--max-batch-size", "4",
                                    "--max-wait-ms", "60000")
    try:
        async with aiohttp.ClientSession() as s:
            async with s.get(info["base_url"] + "/models") as r:
                assert [m["id"] for m in (await r.json())["data"]] == ["run7/step_000003"]
        before = await get_text(info["url"] + "/metrics")
        assert metric(before, "verigym_model_batches_total") == 0
        replies = await asyncio.gather(*(post(info["base_url"] + "/chat/completions", {
            "model": "run7/step_000003", "messages": [{"role": "user", "content": f"question {i}" * (i + 1)}],
            "max_tokens": 3 + i, "temperature": 0}) for i in range(4)))
        assert [status for status, _ in replies] == [200] * 4
        for i, (_, body) in enumerate(replies):
            assert body["usage"]["completion_tokens"] <= 3 + i  # each row keeps its own limit
        after = await get_text(info["url"] + "/metrics")
        assert metric(after, "verigym_model_batches_total") == 1
        assert metric(after, "verigym_model_batch_rows_total") == 4
        assert metric(after, "verigym_model_max_batch_rows") == 4
    finally:
        stop(proc)


# ---- units: resolution, parsing, the missing-extra message -------------------------------------
def test_resolve_source_errors(tmp_path):
    from servers.model.loading import ModelLoadError, resolve_source

    assert resolve_source("tiny") == "tiny"
    assert resolve_source("Qwen/Qwen3-0.6B") == "Qwen/Qwen3-0.6B"  # a hub id is left to transformers
    with pytest.raises(ModelLoadError, match="does not exist"):
        resolve_source(str(tmp_path / "nope"))
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "model.safetensors").write_bytes(b"")
    with pytest.raises(ModelLoadError, match="no config.json: a trainer checkpoint"):
        resolve_source(str(tmp_path / "old"))


def test_missing_train_extra_is_named(monkeypatch):
    import importlib.util

    from servers.model import loading

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    with pytest.raises(loading.ModelLoadError, match=r"\[train\] extra"):
        loading.require_torch()


def test_responses_items_become_chat_messages():
    parsed = openai_api.parse_responses({"instructions": "sys", "input": [
        {"role": "user", "content": "q"}, {"type": "reasoning", "summary": []},
        {"type": "function_call", "name": "add", "arguments": "{\"a\": 1}", "call_id": "c1"},
        {"type": "function_call_output", "call_id": "c1", "output": "2"},
    ], "tools": [{"type": "function", "name": "add", "parameters": {"type": "object"}}], "max_output_tokens": 7})
    assert [m["role"] for m in parsed.messages] == ["system", "user", "assistant", "tool"]
    assert parsed.messages[2]["tool_calls"][0]["function"] == {"name": "add", "arguments": {"a": 1}}
    assert parsed.tools == [{"type": "function", "function": {"name": "add", "description": None,
                                                              "parameters": {"type": "object"}}}]
    assert parsed.sampling.max_new_tokens == 7


def test_tool_call_blocks_are_parsed_out():
    text, calls = openai_api.split_tool_calls('ok <tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>')
    assert text == "ok" and calls == [{"name": "f", "arguments": "{\"x\": 1}"}]
    text, calls = openai_api.split_tool_calls("<tool_call>not json</tool_call>")
    assert calls == [] and text == "<tool_call>not json</tool_call>"


def test_unsupported_parameters_name_themselves():
    for body, param in (({"messages": [{"role": "user", "content": "x"}], "logprobs": True}, "logprobs"),
                        ({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 3}, "top_logprobs"),
                        ({"messages": [{"role": "user", "content": "x"}],
                          "response_format": {"type": "json_object"}}, "response_format")):
        with pytest.raises(BadRequest) as err:
            openai_api.parse_chat(body)
        assert err.value.param == param
    # bookkeeping parameters are accepted, and so is a seed (the engine honours it)
    openai_api.parse_chat({"messages": [{"role": "user", "content": "x"}], "user": "u", "metadata": {}})
    assert openai_api.parse_chat({"messages": [{"role": "user", "content": "x"}], "seed": 3}).sampling.seed == 3


def test_vllm_command_exports_tiny_once(tmp_path):
    from servers.model.vllm_engine import vllm_command

    cmd = vllm_command("tiny", host="0.0.0.0", port=9000, served_name=None, dtype="auto", seed=2,
                       cache_dir=tmp_path, extra=["--max-model-len", "2048"])
    folder = tmp_path / "tiny-seed2"
    assert (folder / "config.json").exists() and (folder / "model.safetensors").exists()
    assert str(folder) in cmd and cmd[cmd.index("--served-model-name") + 1] == "tiny"
    assert cmd[cmd.index("--port") + 1] == "9000" and cmd[-2:] == ["--max-model-len", "2048"]
    mtime = (folder / "config.json").stat().st_mtime_ns
    vllm_command("tiny", host="h", port=1, served_name="judge", dtype="auto", seed=2, cache_dir=tmp_path, extra=[])
    assert (folder / "config.json").stat().st_mtime_ns == mtime  # exported once


def test_cli_usage_errors_exit_2(capsys, tmp_path):
    from servers.cli import main

    assert main(["model", "serve", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["model", "serve", "Qwen/Qwen3-0.6B", "--seed", "3"]) == 2
    assert "tiny preset" in capsys.readouterr().err
    assert main(["model", "serve", "tiny", "--max-batch-size", "0"]) == 2
    assert main(["model", "serve", "tiny", "--engine", "vllm"]) == 2  # no vLLM / GPU on this machine
    assert "vllm" in capsys.readouterr().err
