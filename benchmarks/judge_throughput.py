"""Judged verification: throughput, the server's own overhead, and what the judge cache saves.

    python benchmarks/judge_throughput.py [--judge-latency-ms 50] [--concurrency 512]
                                          [--requests 4000] [--latency-requests 200]

Three processes, as deployed: a scripted OpenAI-compatible judge answering every call after
``--judge-latency-ms`` (servers/scripted_judge.py), one ``multichallenge`` server (envs serve)
pointed at it, and this load generator. Prints one JSON object:

* ``throughput``: verifications of 2-item rubrics, every response distinct (no cache hits),
  at ``--concurrency``; judged rubric items/s = verifications/s x 2. Target >= 1,000 items/s at 512.
  Also the server process's CPU time per verification (1000 / it = verifications/s one core
  can serve), the figure to trust on a machine whose cores are shared.
* ``overhead``: at concurrency 1, p50 of a judged 1-item verification through the server, and
  p50 of the same judge request sent straight to the judge (the no-judge-server baseline, same
  run); their difference is the server's own overhead per judged verification (target <= 2 ms).
* ``cache``: a GRPO-like workload (groups of 16 responses per prompt, 30% of them repeating an
  earlier response of their group) sent at ``--concurrency`` with the judge cache on and off;
  judge calls from the server's /metrics. Target: the cache cuts judge calls by >= 25%.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from environments.multichallenge.verifier import DEFAULT_TEMPLATE  # noqa: E402
from servers.cli_serve import spawn_servers, stop_servers  # noqa: E402
from servers.judge import JudgeConfig  # noqa: E402
from servers.judge.protocol import request_body, request_path  # noqa: E402
from servers.loadgen import encode_bodies, run_load  # noqa: E402
from servers.wire import response_from_text  # noqa: E402

SYSTEM = "You are a precise evaluator. Assess responses objectively based on the given criteria."
QUESTIONS = ("Did the response give a concrete plan?", "Did the response stay on topic?")


def row(prompt_id: int, answer: str, items: int) -> dict[str, Any]:
    return {"responses_create_params": {"input": [{"role": "user", "content": f"Task {prompt_id}: plan my day."}]},
            "context": f"[USER]: Task {prompt_id}: plan my day.",
            "rubric": [{"question": q, "pass_criteria": "YES"} for q in QUESTIONS[:items]],
            "response": response_from_text(answer)}


def group_workload(groups: int, group_size: int, duplicate_fraction: float, seed: int = 0) -> list[dict[str, Any]]:
    """Groups of ``group_size`` responses per prompt; ``duplicate_fraction`` of each group repeats
    an earlier response of the same group (GRPO samples often end in the same answer)."""
    rng = random.Random(seed)
    rows = []
    for g in range(groups):
        answers: list[str] = []
        duplicates = round(group_size * duplicate_fraction)
        for i in range(group_size):
            answers.append(rng.choice(answers) if i >= group_size - duplicates and answers
                           else f"Group {g} answer {i}: wake at 7, work, walk.")
        rng.shuffle(answers)
        rows += [row(g, a, 2) for a in answers]
    return rows


# multichallenge's configured judge model: the scripted judge serves it, so the server is ready.
JUDGE_MODEL = "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8"


async def start_judge(latency_ms: float) -> tuple[asyncio.subprocess.Process, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "servers.scripted_judge", "--port", "0", "--latency-ms", str(latency_ms),
        "--model", JUDGE_MODEL, "--reply", "The response meets the criterion.\n[[YES]]",
        stdout=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL)
    assert proc.stdout is not None
    line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
    match = re.search(r"(http://\S+/v1)", line)
    if not match:
        proc.kill()
        raise RuntimeError(f"scripted judge did not start: {line!r}")
    return proc, match.group(1)


async def judge_calls(url: str) -> int:
    async with aiohttp.ClientSession() as http, http.get(url + "/metrics") as r:
        text = await r.text()
    return sum(int(float(m)) for m in re.findall(r"^verigym_judge_calls_total\{[^}]*\} (\S+)$", text, re.M))


async def serve_multichallenge(judge_url: str, *extra: str):
    overrides = [f"judges.judge.base_url={judge_url}", f"judges.judge.model={JUDGE_MODEL}",
                 "judges.judge.max_concurrency=1024", "judges.judge.temperature=0.0", "judges.judge.top_p=null", *extra]
    children = await spawn_servers(["multichallenge"], overrides=overrides, echo_output=False)
    return children, children[0].url


async def direct_judge_p50(judge_url: str, requests: int) -> float:
    """The same judge request the server would send, straight to the judge (closed loop, one at a time)."""
    cfg = JudgeConfig(base_url=judge_url, model=JUDGE_MODEL, temperature=0.0,
                      max_output_tokens=8192)
    latencies = []
    async with aiohttp.ClientSession() as http:
        for i in range(requests):
            prompt = DEFAULT_TEMPLATE.format(context="[USER]: Task 0: plan my day.", response=f"direct answer {i}",
                                             question=QUESTIONS[0], pass_criteria="YES")
            body = orjson.dumps(request_body(cfg, [{"role": "system", "content": SYSTEM},
                                                   {"role": "user", "content": prompt}]))
            start = time.perf_counter()
            async with http.post(judge_url + request_path(cfg), data=body,
                                 headers={"Content-Type": "application/json"}) as r:
                await r.read()
            latencies.append((time.perf_counter() - start) * 1000)
    return statistics.median(latencies)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--judge-latency-ms", type=float, default=50.0)
    parser.add_argument("--concurrency", type=int, default=512)
    parser.add_argument("--requests", type=int, default=4000, help="2-item verifications in the throughput run")
    parser.add_argument("--latency-requests", type=int, default=200, help="requests of each concurrency-1 run")
    parser.add_argument("--groups", type=int, default=160, help="prompt groups of 16 in the cache workload")
    args = parser.parse_args()

    judge, judge_url = await start_judge(args.judge_latency_ms)
    out: dict[str, Any] = {"benchmark": "judge_throughput", "judge": "scripted, separate process",
                           "judge_latency_ms": args.judge_latency_ms}
    try:
        children, url = await serve_multichallenge(judge_url, "judges.judge.cache_size=0")
        try:
            # throughput: distinct responses, 2 rubric items each, no cache hits (cache off)
            bodies = encode_bodies([row(i % 97, f"throughput answer {i}", 2) for i in range(args.requests)])
            warm = encode_bodies([row(0, f"warm-up {i}", 2) for i in range(args.concurrency)])
            await run_load(url, warm, concurrency=args.concurrency, requests=len(warm))
            server = psutil.Process(children[0].process.pid)
            cpu_before = sum(server.cpu_times()[:2])
            load = await run_load(url, bodies, concurrency=args.concurrency, requests=len(bodies), timeout_s=120)
            cpu_ms = (sum(server.cpu_times()[:2]) - cpu_before) * 1000 / max(load.requests, 1)
            out["throughput"] = {"concurrency": args.concurrency, "verifications": load.requests,
                                 "rubric_items_per_verification": 2,
                                 "verifications_per_s": round(load.req_per_s, 1),
                                 "judged_items_per_s": round(2 * load.req_per_s, 1),
                                 "p50_ms": round(load.percentile(50), 1), "p99_ms": round(load.percentile(99), 1),
                                 # CPU the server process spent per verification: what bounds one server's
                                 # throughput (1000 / this = verifications/s per core), little moved by load
                                 "server_cpu_ms_per_verification": round(cpu_ms, 3),
                                 "errors": dict(load.errors)}
            # overhead: concurrency 1, 1 item, vs the same judge request sent directly (same run)
            one = encode_bodies([row(0, f"latency answer {i}", 1) for i in range(args.latency_requests)])
            judged = await run_load(url, one, concurrency=1, requests=len(one))
            direct = await direct_judge_p50(judge_url, args.latency_requests)
            out["overhead"] = {"judged_verification_p50_ms": round(judged.percentile(50), 3),
                               "direct_judge_call_p50_ms": round(direct, 3),
                               "server_overhead_p50_ms": round(judged.percentile(50) - direct, 3),
                               "errors": dict(judged.errors)}
        finally:
            await stop_servers(children)

        workload = encode_bodies(group_workload(args.groups, 16, 0.3))
        calls: dict[str, int] = {}
        for label, extra in (("cache_off", "judges.judge.cache_size=0"), ("cache_on", "judges.judge.cache_size=65536")):
            children, url = await serve_multichallenge(judge_url, extra)
            try:
                before = await judge_calls(url)
                result = await run_load(url, workload, concurrency=args.concurrency, requests=len(workload),
                                        timeout_s=120)
                calls[label] = await judge_calls(url) - before
                calls[f"{label}_errors"] = sum(result.errors.values())
            finally:
                await stop_servers(children)
        reduction = 1 - calls["cache_on"] / calls["cache_off"] if calls["cache_off"] else 0.0
        out["cache"] = {"group_size": 16, "duplicate_fraction": 0.3, "verifications": len(workload),
                        "judge_calls_cache_off": calls["cache_off"], "judge_calls_cache_on": calls["cache_on"],
                        "errors": calls["cache_off_errors"] + calls["cache_on_errors"],
                        "judge_call_reduction": round(reduction, 3)}
    finally:
        judge.terminate()
        await judge.wait()

    out["targets"] = {"judged_items_per_s": 1000, "server_overhead_p50_ms": 2.0, "judge_call_reduction": 0.25}
    out["met"] = {"judged_items_per_s": out["throughput"]["judged_items_per_s"] >= 1000,
                  "server_overhead_p50_ms": out["overhead"]["server_overhead_p50_ms"] <= 2.0,
                  "judge_call_reduction": out["cache"]["judge_call_reduction"] >= 0.25}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    from servers.app import run_event_loop

    run_event_loop(main())
