"""End to end: the local model server (a real subprocess) hosting a tiny driver checkpoint as the
judge of a judged environment served over HTTP. An untrained tiny model writes noise, so this
asserts the protocol, the batching and the failure classes — never a verdict's quality."""

from __future__ import annotations

import asyncio
import re

import aiohttp
import pytest

from servers.wire import response_from_text
from tests.test_model_server import _trainer_checkpoint, start_model_server, stop

pytest.importorskip("torch")
pytest.importorskip("transformers")

SHORT_PROMPT = "Q: {question}\nGOLD: {expected_answer}\nCANDIDATE: {generated_answer}\nAnswer [[A=B]] or [[A!=B]]."


def row(i: int) -> dict:
    return {"responses_create_params": {"input": [{"role": "user", "content": f"What is {i} + {i}?"}]},
            "expected_answer": str(2 * i)}


async def metrics(url: str) -> dict[str, float]:
    async with aiohttp.ClientSession() as s:
        async with s.get(url + "/metrics") as r:
            text = await r.text()
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(verigym_model_\w+)\{[^}]*\} (\S+)$", text, re.M)}


@pytest.fixture(scope="module")
def tiny_judge(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("judge")
    # batches close when full (4 rows); the long wait only makes the grouping independent of timing
    proc, info = start_model_server(tmp, str(_trainer_checkpoint(tmp)), "--max-batch-size", "4",
                                    "--max-wait-ms", "60000")
    yield info
    stop(proc)


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_tiny_checkpoint_as_judge(serve_env, tiny_judge, api):
    judge = {"base_url": tiny_judge["base_url"], "model": "run7/step_000003", "api": api, "max_output_tokens": 8,
             "temperature": 0.0, "parse_retries": 1, "max_retries": 0, "timeout_s": 120.0}
    client, env = await serve_env("equivalence_llm_judge", judges={"judge": judge},
                                  judge_prompt_template=SHORT_PROMPT)
    status, health = await client.get("equivalence_llm_judge", "/health")
    assert status == 200 and health["checks"]["environment"]["judges"]["judge"]["ok"] is True
    before = await metrics(tiny_judge["url"])
    replies = await asyncio.gather(*(client.verify("equivalence_llm_judge", row(i), response_from_text(str(2 * i)))
                                     for i in range(4)))
    # noise has no [[A=B]]/[[A!=B]]: every sample is asked twice, then fails with judge_error, masked
    for reply in replies:
        assert reply["_ng_failure_class"] == "judge_error", reply
        assert reply["judge_error_kind"] == "unparseable" and reply["instance_config"]["mask_sample"] is True
        assert reply["reward"] == 0.0
    after = await metrics(tiny_judge["url"])
    assert after["verigym_model_generations_total"] - before["verigym_model_generations_total"] == 8
    assert after["verigym_model_batches_total"] - before["verigym_model_batches_total"] == 2  # 4 + 4 re-asks
    assert after["verigym_model_max_batch_rows"] == 4
    judge_metrics = env.metrics_text()
    assert re.search(r'verigym_judge_errors_total\{[^}]*kind="unparseable"\} 4', judge_metrics), judge_metrics


async def test_prompt_over_the_models_context_is_judge_error(serve_env, tiny_judge):
    # the default equivalence prompt plus a long question exceeds the tiny model's 2048 positions:
    # the model server answers 400 context_length_exceeded, which is not retried
    judge = {"base_url": tiny_judge["base_url"], "model": "run7/step_000003", "max_output_tokens": 8}
    client, _ = await serve_env("equivalence_llm_judge", judges={"judge": judge})
    long_row = {"responses_create_params": {"input": [{"role": "user", "content": "why? " * 400}]},
                "expected_answer": "because"}
    reply = await client.verify("equivalence_llm_judge", long_row, response_from_text("because"))
    assert reply["_ng_failure_class"] == "judge_error"
    assert "context" in reply["_ng_failure_detail"], reply["_ng_failure_detail"]
