"""/verify replies spliced onto the request's bytes (servers/replies.py splice_reply) are the
object build_reply makes, key order included; anything that would differ falls back to it."""

from __future__ import annotations

import orjson
import pytest

from servers import registry
from servers.app import start_server
from servers.environment import Verdict
from servers.replies import build_reply, splice_reply
from servers.wire import FailureClass, response_from_text

BODY = {"responses_create_params": {"input": [{"role": "user", "content": "q é \u2028"}]},
        "options": [{"A": "x"}, {"B": "y"}], "expected_answer": "B", "response": response_from_text("\\boxed{B}")}


@pytest.mark.parametrize("raw", [orjson.dumps(BODY), orjson.dumps(BODY, option=orjson.OPT_INDENT_2) + b"\n  "])
@pytest.mark.parametrize("verdict", [
    Verdict(1.0, extras={"extracted_answer": "B", "nested": {"k": [1, 2.5, None]}}),
    Verdict(0.5, components={"parse": 0.0, "schema": 0.5}, extras={"parsed": True}),
    Verdict(1.0, extras={"expected_answer": "B", "grading_method": "x"}),  # a field the row has, same value
])
def test_spliced_reply_is_build_reply(raw: bytes, verdict: Verdict):
    spliced = splice_reply(raw, orjson.loads(raw), verdict)
    assert spliced is not None
    assert list(orjson.loads(spliced).items()) == list(build_reply(orjson.loads(raw), verdict).items())


def test_falls_back_where_build_reply_merges():
    raw = orjson.dumps({**BODY, "reward": 0.0})  # a reply sent back for re-verification
    assert splice_reply(raw, orjson.loads(raw), Verdict(1.0)) is None
    raw = orjson.dumps({**BODY, "instance_config": {"x": 1}})
    assert splice_reply(raw, orjson.loads(raw), Verdict.failure(FailureClass.TIMEOUT, "slow")) is None
    assert splice_reply(b"{}", {}, Verdict(1.0)) is None
    raw = orjson.dumps(BODY)  # the row's field with another value (or type) is overwritten by build_reply
    assert splice_reply(raw, orjson.loads(raw), Verdict(1.0, extras={"expected_answer": "b"})) is None
    raw = orjson.dumps({**BODY, "parse": 1})  # a component name the row already has: build_reply keeps the row's
    spliced = splice_reply(raw, orjson.loads(raw), Verdict(1.0, components={"parse": 1.0}))
    assert list(orjson.loads(spliced).items()) == list(build_reply(orjson.loads(raw), Verdict(1.0, components={"parse": 1.0})).items())


async def test_served_reply_echoes_the_request_bytes():
    import aiohttp

    running = await start_server(registry.instantiate("mcqa"))
    raw = orjson.dumps(BODY, option=orjson.OPT_INDENT_2)
    try:
        async with aiohttp.ClientSession() as http:
            async with http.post(running.url + "/verify", data=raw, headers={"Content-Type": "application/json"}) as r:
                body = await r.read()
        assert r.status == 200 and body.startswith(raw[:-1])  # the request's own bytes, then the verdict
        reply = orjson.loads(body)
        assert reply["reward"] == 1.0 and reply["extracted_answer"] == "B"
        assert {k: reply[k] for k in BODY} == BODY
    finally:
        await running.stop()
