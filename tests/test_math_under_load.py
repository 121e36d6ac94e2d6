"""math served as ``envs serve`` runs it (CPU pool forked from the zygote), under a burst of
verifications that pass their deadline mixed with ordinary ones:

* an answer that burns the CPU until the deadline scores 0 (``scored_by: deadline``): its cost is
  the answer's, never a masked sample a wrong answer could hide in (issue 26);
* a call that passes the deadline without the CPU (workers frozen: an overloaded machine) carries
  failure class ``timeout`` and ``instance_config.mask_sample`` — never a reward a trainer would learn from;
* every other reply scores exactly what the example file expects;
* a deadline kill replaces only the worker that ran the slow call, and the server's
  (gold, answer) result cache lives in the server process: with every pool worker frozen, an
  answer scored before the burst is still answered from it.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import aiohttp
import pytest

from servers import registry
from servers.cli_serve import spawn_servers, stop_servers
from servers.examples import EXPECTED_KEY, compare, load_examples
from servers.wire import response_from_text

pytestmark = pytest.mark.timeout(300)
JSON = {"Content-Type": "application/json"}


def _children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _row(gold: str, text: str) -> dict:
    return {"responses_create_params": {"input": [{"role": "user", "content": "q"}]}, "expected_answer": gold,
            "response": response_from_text(text)}


async def test_deadline_replies_are_masked_and_caches_survive_a_worker_kill():
    examples = [row for _, row in load_examples(registry.get("math").example_path)
                if row.get(EXPECTED_KEY, {}).get("status", 200) == 200
                and "failure_class" not in row.get(EXPECTED_KEY, {})]
    # A pair only math-verify decides (a fractional power is outside the symbolic fast path).
    symbolic = _row("\\sqrt{2}", "So \\boxed{2^{1/2}}.")
    slow = _row("(x+1)^{3000}", "\\boxed{(x+2)^{2999}}")  # ~20 s of sympy
    (child,) = await spawn_servers(["math"], workers=1, echo_output=False,
                                   overrides=["cpu_workers=2", "cpu_task_timeout_s=4", "deadline_cpu_share=0.1"])
    frozen: list[int] = []
    try:
        async with aiohttp.ClientSession() as http:
            async def verify(row: dict) -> tuple[int, dict]:
                body = {k: v for k, v in row.items() if k != EXPECTED_KEY}
                async with http.post(child.url + "/verify", json=body, headers=JSON) as r:
                    return r.status, await r.json()

            status, first = await verify(symbolic)
            assert status == 200 and first["reward"] == 1.0 and first["scored_by"] == "math_verify"
            (zygote,) = _children(child.process.pid)
            pool_before = set(_children(zygote))
            assert len(pool_before) == 2

            burst = [slow] * 4 + examples * 2
            replies = await asyncio.gather(*(verify(row) for row in burst))
            slow_replies, example_replies = replies[:4], replies[4:]
            for status, reply in slow_replies:  # (before issue 26: failure class timeout, masked)
                assert status == 200 and "_ng_failure_class" not in reply, reply
                assert reply["reward"] == 0.0 and reply["scored_by"] == "deadline"
            problems = [p for row, (status, reply) in zip(examples * 2, example_replies)
                        for p in compare(row[EXPECTED_KEY], status, reply)]
            assert not problems, problems
            for status, reply in example_replies:  # nothing ordinary was turned into a failure
                assert "_ng_failure_class" not in reply or reply["_ng_failure_class"] != "timeout"

            async with http.get(child.url + "/health") as r:
                health = await r.json()
            pool = health["checks"]["cpu_pool"]
            assert r.status == 200 and pool["ok"] and pool["timeouts"] == 4 and pool["crashes"] == 0
            pool_after = set(_children(zygote))
            assert len(pool_after) == 2 and pool_after != pool_before  # killed ones were replaced

            # Freeze every pool worker: an answer scored before the burst comes from the server's
            # result cache (an uncached one would wait for a worker and time out).
            frozen = sorted(pool_after)
            for pid in frozen:
                os.kill(pid, signal.SIGSTOP)
            status, again = await verify(symbolic)
            assert status == 200 and again["reward"] == 1.0 and "_ng_failure_class" not in again
            # ...while an uncached pair waits on a frozen worker, which uses no CPU: infrastructure, masked
            status, starved = await verify(_row("\\sqrt{3}", "So \\boxed{3^{1/2}}."))
            assert status == 200 and starved["_ng_failure_class"] == "timeout", starved
            assert starved["instance_config"]["mask_sample"] is True
    finally:
        for pid in frozen:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        await stop_servers([child])
