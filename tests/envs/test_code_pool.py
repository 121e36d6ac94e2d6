"""The code environment's warm pool and zygote path: a pooled sandbox is reused only after a
reset, so nothing one submission leaves (files, processes) reaches the next; and the
pool-less / fresh-interpreter configuration still judges the same."""

from __future__ import annotations

import pytest

from servers import registry
from servers.service import EnvService

from servers.wire import response_from_text
from tests.sandbox_processes import sandbox_pids

LEAVE = ("import os, subprocess\nprint(os.path.exists('left.txt'))\nopen('left.txt', 'w').write('x')\n"
         "subprocess.Popen(['sh', '-c', '(sleep 100 &); sleep 100'], start_new_session=True)")


def row(code: str, inputs: list[str], outputs: list[str]) -> dict:
    return {"responses_create_params": {"input": [{"role": "user", "content": "solve"}]},
            "verifier_metadata": {"unit_tests": {"inputs": inputs, "outputs": outputs}},
            "response": response_from_text(f"```python\n{code}\n```")}


async def verify(service: EnvService, body: dict) -> dict:
    status, reply = await service.verify(body)
    assert status == 200, reply
    assert "_ng_failure_class" not in reply, reply.get("_ng_failure_detail")
    return reply


@pytest.fixture
async def pooled():
    env = registry.instantiate("code", overrides={"test_timeout_s": 2.0, "sandbox_pool_size": 1,
                                                  "sandbox_pool_max": 1})
    svc = EnvService(env)
    await svc.start()
    yield svc, env
    await svc.stop()


async def test_pooled_sandbox_is_reused_clean(pooled):
    svc, env = pooled
    first = await verify(svc, row(LEAVE, ["\n"], ["False"]))
    assert first["reward"] == 1.0, first["tests"]
    (sandbox,) = [sb for sb in env.backend._live]
    zygote_pid = sandbox._zygote.host_pid
    second = await verify(svc, row(LEAVE, ["\n"], ["False"]))  # the first run's file is gone
    assert second["reward"] == 1.0, second["tests"]
    assert list(env.backend._live) == [sandbox] and sandbox._zygote.host_pid == zygote_pid  # reused, warm
    await env.pool._idle.get()  # wait for the background reset, then hold the sandbox
    assert sandbox_pids(sandbox.uid) == {zygote_pid}  # the sleeps are gone, only the idle zygote is left
    assert [e.name for e in sandbox.host_workdir.iterdir()] == []
    env.pool._idle.put_nowait(sandbox)


async def test_closing_the_server_leaves_nothing(pooled):
    svc, env = pooled
    await verify(svc, row("print(input())", ["7\n"], ["7"]))
    (sandbox,) = list(env.backend._live)
    uid = sandbox.uid
    await svc.stop()
    assert not env.backend._live
    assert not sandbox_pids(uid)


async def test_unpooled_fresh_interpreter_judges_the_same():
    import sys
    env = registry.instantiate("code", overrides={"test_timeout_s": 2.0, "sandbox_pool_size": 0,
                                                  "python": sys.executable})
    svc = EnvService(env)
    await svc.start()
    try:
        reply = await verify(svc, row("print(int(input()) * 2)", ["4\n", "5\n"], ["8", "11"]))
        assert reply["verdicts"] == ["AC", "WA"]
        assert not env.backend._live  # destroyed after the verification
    finally:
        await svc.stop()
