"""vLLM's RL surface on `envs model serve`, over real HTTP on loopback (tiny preset, CPU): token-id
completions with logprobs, pause/resume with requests in flight, weight transfer through the disk
backend, and a server that dies mid-run. The client is servers.model.rl_client (the one the trainer
uses). Untrained weights: the tests assert the protocol, versions and equalities, not what is said."""

from __future__ import annotations

import asyncio
import os
import signal
import tempfile
from pathlib import Path

import aiohttp
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from servers.model.rl_client import GenerationClient, GenerationServerError  # noqa: E402
from servers.model.tiny import TinyModelConfig, build_tiny_model, build_tiny_tokenizer  # noqa: E402
from servers.wire import FailureClass  # noqa: E402
from tests.test_model_server import start_model_server, stop  # noqa: E402

TOK = build_tiny_tokenizer()
PROMPT = TOK(TOK.apply_chat_template([{"role": "user", "content": "count to ten"}], tokenize=False,
                                     add_generation_prompt=True), add_special_tokens=False)["input_ids"]
SHM = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None


def weights(seed: int) -> dict[str, torch.Tensor]:
    """The tiny preset's parameters at ``seed`` (the server starts with seed 0)."""
    return dict(build_tiny_model(TOK, TinyModelConfig(), seed).named_parameters())


@pytest.fixture(scope="module")
def rl_server(tmp_path_factory):
    proc, info = start_model_server(tmp_path_factory.mktemp("rl"), "tiny", "--weight-transfer-config",
                                    '{"backend": "disk"}', "--max-batch-size", "8", "--cpu-threads", "1")
    yield info
    stop(proc)
    assert proc.returncode == 0


async def _metric(info: dict, name: str) -> float:
    async with aiohttp.ClientSession() as s:
        async with s.get(info["url"] + "/metrics") as r:
            text = await r.text()
    return float(next(x for x in text.splitlines() if x.startswith(name + "{")).rsplit(" ", 1)[1])


async def decoding(info: dict, since: float) -> None:
    """Wait until the server runs a batch that has taken decode steps past ``since`` (its /metrics)."""
    for _ in range(6000):
        if await _metric(info, "verigym_model_running") >= 1 and \
                await _metric(info, "verigym_model_decode_steps_total") > since:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the batch never started decoding")


async def steps(info: dict) -> float:
    return await _metric(info, "verigym_model_decode_steps_total")


async def greedy(c: GenerationClient, n: int = 12) -> list[int]:
    return (await c.complete(PROMPT, max_tokens=n, temperature=0, ignore_eos=True))[0].token_ids


# ---- generation ----------------------------------------------------------------------------
async def test_token_ids_and_logprobs_are_the_models(rl_server):
    async with GenerationClient(rl_server["url"]) as c:
        await c.init_weight_transfer({})
        await c.push_weights(weights(0), "default", SHM)  # the server's own weights, whatever ran before
        outs = await c.complete(PROMPT, max_tokens=10, temperature=0.8, seed=7, n=2, ignore_eos=True)
        again = await c.complete(PROMPT, max_tokens=10, temperature=0.8, seed=7, n=2, ignore_eos=True)
    assert [o.token_ids for o in outs] == [o.token_ids for o in again]  # seeded: reproducible
    assert outs[0].token_ids != outs[1].token_ids  # n choices are different samples
    model = build_tiny_model(TOK, TinyModelConfig(), 0).eval()
    for out in outs:
        assert out.prompt_ids == PROMPT and len(out.token_ids) == 10 and out.finish_reason == "length"
        assert out.versions == ["default"] * 10
        with torch.no_grad():
            logits = model(torch.tensor([PROMPT + out.token_ids])).logits[0, len(PROMPT) - 1:-1].float() / 0.8
        ref = torch.log_softmax(logits, -1).gather(1, torch.tensor(out.token_ids).unsqueeze(1)).squeeze(1)
        assert torch.allclose(torch.tensor(out.logprobs), ref, atol=1e-4)  # the trainer's convention
        assert out.text == TOK.decode(out.token_ids, skip_special_tokens=True)


async def test_prompt_logprobs_and_several_prompts(rl_server):
    async with aiohttp.ClientSession() as s:
        async with s.post(rl_server["base_url"] + "/completions", json={
                "prompt": [PROMPT, PROMPT[:5]], "max_tokens": 3, "n": 2, "prompt_logprobs": 1, "logprobs": 2,
                "return_token_ids": True, "return_tokens_as_token_ids": True, "temperature": 0}) as r:
            body = await r.json()
    assert r.status == 200, body
    assert [c["index"] for c in body["choices"]] == [0, 1, 2, 3]
    assert [c["prompt_token_ids"] for c in body["choices"]] == [PROMPT, PROMPT, PROMPT[:5], PROMPT[:5]]
    first = body["choices"][0]
    assert first["prompt_logprobs"][0] is None and len(first["prompt_logprobs"]) == len(PROMPT)
    assert str(PROMPT[1]) in first["prompt_logprobs"][1]
    assert first["logprobs"]["tokens"] == [f"token_id:{t}" for t in first["token_ids"]]
    assert all(1 <= len(top) <= 3 for top in first["logprobs"]["top_logprobs"])
    assert body["usage"]["prompt_tokens"] == len(PROMPT) + 5
    assert body["usage"]["completion_tokens"] == sum(len(c["token_ids"]) for c in body["choices"])


@pytest.mark.parametrize("body,param", [
    ({"prompt": []}, "prompt"), ({"prompt": [1, -2]}, "prompt"), ({"prompt": "x", "stream": True}, "stream"),
    ({"prompt": "x", "echo": True}, "echo"), ({"prompt": "x", "top_k": 5}, "top_k"),
    ({"prompt": "x", "logprobs": 21}, "logprobs"), ({"prompt": "x", "frequency_penalty": 1}, "frequency_penalty"),
    ({"prompt": [1, 2], "max_tokens": 10 ** 6}, "max_tokens"), ({"prompt": [10 ** 6]}, "prompt"),
    ({"prompt": "x", "best_of": 2}, "best_of"),
])
async def test_completions_refuse_what_they_cannot_honour(rl_server, body, param):
    async with aiohttp.ClientSession() as s:
        async with s.post(rl_server["base_url"] + "/completions", json=body) as r:
            reply = await r.json()
    assert r.status == 400 and reply["error"]["param"] == param, reply


# ---- pause / resume with requests in flight ----------------------------------------------------
async def test_pause_keep_holds_requests_in_flight_across_a_weight_update(rl_server):
    async with GenerationClient(rl_server["url"]) as c:
        await c.init_weight_transfer({})
        since = await steps(rl_server)
        long = asyncio.create_task(c.complete(PROMPT, max_tokens=1500, temperature=1.0, seed=1, ignore_eos=True))
        await decoding(rl_server, since)
        await c.pause("keep")
        try:
            assert await c.is_paused()
            late = asyncio.create_task(c.complete(PROMPT, max_tokens=4, temperature=1.0, seed=2))  # sent while paused
            await c.push_weights(weights(1), "1", SHM)
            assert not long.done() and not late.done()  # nothing decodes while paused
        finally:
            await c.resume()
        out, after = (await long)[0], (await late)[0]
        await c.push_weights(weights(0), "default", SHM)
    switch = out.versions.index("1")
    assert 0 < switch < 1500 and out.versions == ["default"] * switch + ["1"] * (1500 - switch)
    assert len(out.token_ids) == 1500 and out.finish_reason == "length"
    assert after.versions == ["1"] * len(after.token_ids) and after.token_ids


async def test_pause_abort_ends_the_batch_in_flight(rl_server):
    async with GenerationClient(rl_server["url"]) as c:
        since = await steps(rl_server)
        long = asyncio.create_task(c.complete(PROMPT, max_tokens=1500, temperature=1.0, seed=3, ignore_eos=True))
        await decoding(rl_server, since)
        await c.pause("abort")
        try:
            out = (await long)[0]
            late = asyncio.create_task(c.complete(PROMPT, max_tokens=3, temperature=0))
            await asyncio.sleep(0.2)
            assert not late.done() and await c.is_paused()  # paused after the abort: new work waits
        finally:
            await c.resume()
        assert (await late)[0].finish_reason in ("stop", "length")
    assert out.finish_reason == "abort" and 0 < len(out.token_ids) < 1500
    assert len(out.logprobs) == len(out.token_ids) == len(out.versions)


async def test_pause_wait_lets_submitted_requests_finish(rl_server):
    async with GenerationClient(rl_server["url"]) as c:
        try:
            since = await steps(rl_server)
            first = asyncio.create_task(c.complete(PROMPT, max_tokens=300, temperature=1.0, seed=4, ignore_eos=True))
            await decoding(rl_server, since)
            await c.pause("wait")
            assert await _metric(rl_server, "verigym_model_running") == 0  # /pause answered after it ended
            out = (await first)[0]
            assert out.finish_reason == "length" and len(out.token_ids) == 300
            late = asyncio.create_task(c.complete(PROMPT, max_tokens=3, temperature=0))
            await asyncio.sleep(0.2)
            assert not late.done()
        finally:
            await c.resume()
        assert not await c.is_paused() and len((await late)[0].token_ids) <= 3


# ---- weight transfer -----------------------------------------------------------------------
async def test_weight_transfer_changes_the_outputs_and_back(rl_server):
    async def sampled(c: GenerationClient):
        return (await c.complete(PROMPT, max_tokens=12, temperature=1.0, seed=5, ignore_eos=True))[0]

    async with GenerationClient(rl_server["url"]) as c:
        await c.init_weight_transfer({})
        await c.push_weights(weights(0), "a", SHM)
        before = await sampled(c)
        await c.push_weights(weights(1), "b", SHM)
        changed = await sampled(c)
        assert await c.weight_version() == "b" and changed.versions == ["b"] * 12
        await c.push_weights(weights(0), "c", SHM)
        restored = await sampled(c)
    assert changed.token_ids != before.token_ids
    reference = build_tiny_model(TOK, TinyModelConfig(), 1).eval()
    with torch.no_grad():  # the changed output is what the pushed weights say
        logits = reference(torch.tensor([PROMPT + changed.token_ids])).logits[0, len(PROMPT) - 1:-1].float()
    ref = torch.log_softmax(logits, -1).gather(1, torch.tensor(changed.token_ids).unsqueeze(1)).squeeze(1)
    assert torch.allclose(torch.tensor(changed.logprobs), ref, atol=1e-4)
    assert restored.token_ids == before.token_ids and restored.logprobs == before.logprobs


async def _post(url: str, body=None) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as s:
        async with s.post(url, json=body) as r:
            return r.status, await r.json(content_type=None)


async def test_weight_transfer_refuses_bad_calls_and_keeps_serving(rl_server, tmp_path):
    url = rl_server["url"]
    async with GenerationClient(url) as c:
        await c.push_weights(weights(0), "default", SHM)
        before = await greedy(c)
    assert (await _post(url + "/update_weights", {"update_info": {"path": "/tmp"}}))[0] == 409  # no start
    assert (await _post(url + "/finish_weight_update", {}))[0] == 409
    assert (await _post(url + "/init_weight_transfer_engine", {"init_info": {"master_port": 1}}))[0] == 400
    assert (await _post(url + "/start_weight_update", {}))[0] == 200
    assert (await _post(url + "/start_weight_update", {}))[0] == 409  # double start
    status, reply = await _post(url + "/update_weights", {"update_info": {"path": "relative/dir"}})
    assert status == 400 and "absolute" in reply["error"]["message"]
    from safetensors.torch import save_file

    partial = weights(1)
    save_file({"model.norm.weight": partial["model.norm.weight"].detach()}, str(tmp_path / "model.safetensors"))
    status, reply = await _post(url + "/update_weights", {"update_info": {"path": str(tmp_path)}})
    assert status == 400 and "lacks" in reply["error"]["message"]  # nothing applied
    save_file({"model.bogus": torch.zeros(2)}, str(tmp_path / "model.safetensors"))
    assert (await _post(url + "/update_weights", {"update_info": {"path": str(tmp_path)}}))[0] == 400
    assert (await _post(url + "/finish_weight_update", {"weight_version": "x"}))[0] == 200
    async with GenerationClient(url) as c:
        assert await greedy(c) == before  # refused updates changed nothing
        assert await c.weight_version() == "x"
        await c.push_weights(weights(0), "default", SHM)


async def test_rl_routes_and_world_size(rl_server):
    async with aiohttp.ClientSession() as s:
        async with s.get(rl_server["url"] + "/get_world_size") as r:
            assert (await r.json()) == {"world_size": 1}
        async with s.post(rl_server["url"] + "/pause?mode=sideways") as r:
            assert r.status == 400 and (await r.json())["error"]["param"] == "mode"
        async with s.post(rl_server["url"] + "/update_weight_version", json={"new_version": "v8"}) as r:
            assert (await r.json()) == {"success": True, "new_version": "v8"}
        async with s.get(rl_server["url"] + "/weight_info") as r:
            assert (await r.json()) == {"weight_version": "v8"}
        async with s.post(rl_server["url"] + "/update_weight_version", json={"new_version": "default"}) as r:
            assert r.status == 200


# ---- a server that dies or hangs -------------------------------------------------------------
async def test_a_server_that_dies_mid_run_is_a_connection_error_not_a_hang():
    with tempfile.TemporaryDirectory() as tmp:
        proc, info = start_model_server(Path(tmp), "tiny", "--weight-transfer-config", '{"backend": "disk"}',
                                        "--cpu-threads", "1")
        try:
            async with GenerationClient(info["url"], timeout_s=60, retries=1, backoff_s=0.05) as c:
                long = asyncio.create_task(c.complete(PROMPT, max_tokens=1500, temperature=1.0, ignore_eos=True))
                await decoding(info, 0)
                proc.kill()
                with pytest.raises(GenerationServerError) as died:
                    await asyncio.wait_for(long, 30)
                assert died.value.failure_class == FailureClass.CONNECTION_ERROR
                with pytest.raises(GenerationServerError) as gone:
                    await asyncio.wait_for(c.pause("keep"), 30)
                assert gone.value.failure_class == FailureClass.CONNECTION_ERROR
        finally:
            stop(proc)


async def test_stopping_a_paused_server_ends_its_requests_and_exits():
    with tempfile.TemporaryDirectory() as tmp:
        proc, info = start_model_server(Path(tmp), "tiny", "--weight-transfer-config", '{"backend": "disk"}',
                                        "--cpu-threads", "1")
        try:
            async with GenerationClient(info["url"], timeout_s=120) as c:
                long = asyncio.create_task(c.complete(PROMPT, max_tokens=1500, temperature=1.0, ignore_eos=True))
                await decoding(info, 0)
                await c.pause("keep")
                proc.terminate()
                out = (await asyncio.wait_for(long, 60))[0]
            assert out.finish_reason == "abort" and 0 < len(out.token_ids) < 1500
            assert proc.wait(timeout=60) == 0
        finally:
            stop(proc)


async def test_a_hung_server_times_out_as_a_connection_error():
    with tempfile.TemporaryDirectory() as tmp:
        proc, info = start_model_server(Path(tmp), "tiny", "--cpu-threads", "1")
        try:
            proc.send_signal(signal.SIGSTOP)
            async with GenerationClient(info["url"], timeout_s=2, retries=3) as c:
                with pytest.raises(GenerationServerError) as hung:
                    await asyncio.wait_for(c.complete(PROMPT, max_tokens=2), 30)
            assert hung.value.failure_class == FailureClass.CONNECTION_ERROR
            assert "timeout" in str(hung.value)
        finally:
            proc.send_signal(signal.SIGCONT)
            stop(proc)
