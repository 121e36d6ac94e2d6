"""genrm /compare: the server's own overhead per group beyond the GenRM calls, and calls per group.

    python benchmarks/genrm_compare.py [--genrm-latency-ms 20] [--group-size 16] [--groups 40]

A scripted GenRM (servers/scripted_judge.py, OpenAI-compatible over HTTP, in this process) answers
every call after ``--genrm-latency-ms`` with a verdict JSON and counts the calls; one ``genrm``
server (envs serve, its own process) points at it. Groups of distinct responses (no judge-cache
hits) are sent one at a time. Prints one JSON object:

* ``calls``: GenRM calls per group, counted at the GenRM, for ``circular`` (target: exactly N)
  and ``all_pairs`` (target: N(N-1)/2);
* ``overhead``: p50 wall time of one ``/compare`` (circular, N calls in parallel) minus p50 wall
  time of the same N GenRM requests sent straight to the GenRM in parallel from here (the calls'
  own time, same run); target <= 5 ms per group of 16. Also the genrm process's CPU time per
  group (the figure to trust on a machine whose cores are shared).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from servers.cli_serve import spawn_servers, stop_servers  # noqa: E402
from servers.scripted_judge import ScriptedJudge  # noqa: E402
from servers.wire import response_from_text  # noqa: E402

VERDICT = '{"score_1": 3, "score_2": 4, "ranking": 4}'
HISTORY = [{"role": "user", "content": "Write a short note about the weather."}]


def group_body(group: int, size: int) -> dict[str, Any]:
    answers = [f"Group {group} answer {k}: it is sunny with a light breeze, about {10 + k} degrees." for k in range(size)]
    return {"conversation_history": HISTORY, "response_objs": [response_from_text(a) for a in answers]}


def direct_requests(body: dict[str, Any], model: str) -> list[dict[str, Any]]:
    """The chat requests the server sends for a circular group (same messages, same sampling)."""
    answers = [r["output"][0]["content"][0]["text"] for r in body["response_objs"]]
    n = len(answers)
    return [{"model": model, "messages": HISTORY + [{"role": "response_1", "content": answers[i]},
                                                    {"role": "response_2", "content": answers[(i + 1) % n]}],
             "max_tokens": 64, "temperature": 0.6, "top_p": 0.95} for i in range(n)]


async def post(http: aiohttp.ClientSession, url: str, body: Any) -> Any:
    async with http.post(url, data=orjson.dumps(body), headers={"Content-Type": "application/json"}) as r:
        payload = await r.json()
        if r.status != 200:
            raise RuntimeError(f"{url}: {r.status} {payload}")
        return payload


async def main(args: argparse.Namespace) -> dict[str, Any]:
    judge = ScriptedJudge(default_reply=VERDICT, latency_s=args.genrm_latency_ms / 1000)
    await judge.start()
    base = [f"judges.genrm.base_url={judge.url}", "judges.genrm.model=scripted-judge", "judges.genrm.max_output_tokens=64",
            "profile=rlhf"]
    out: dict[str, Any] = {"group_size": args.group_size, "genrm_latency_ms": args.genrm_latency_ms,
                           "groups": args.groups, "calls": {}}
    n = args.group_size
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        for strategy, target in (("circular", n), ("all_pairs", n * (n - 1) // 2)):
            children = await spawn_servers(["genrm"], overrides=[*base, f"comparison_strategy={strategy}"], echo_output=False)
            try:
                url = children[0].url
                server = psutil.Process(children[0].process.pid)
                await post(http, url + "/compare", group_body(-1, n))  # warm-up (connections, imports)
                counted, walls, start_id = [], [], 10_000 if strategy == "all_pairs" else 0
                cpu_before = sum(server.cpu_times()[:2])
                for g in range(args.groups):
                    before = judge.answered
                    t0 = time.perf_counter()
                    reply = await post(http, url + "/compare", group_body(start_id + g, n))
                    walls.append(time.perf_counter() - t0)
                    counted.append(judge.answered - before)
                    assert len(reply["rewards"]) == n and not any(reply["failures"])
                cpu_ms = (sum(server.cpu_times()[:2]) - cpu_before) * 1000 / args.groups
            finally:
                await stop_servers(children)
            out["calls"][strategy] = {"per_group": sorted(set(counted)), "target": target,
                                      "ok": set(counted) == {target}}
            if strategy == "circular":
                direct = []
                for g in range(args.groups):  # the same N requests, straight to the GenRM, in parallel
                    requests = direct_requests(group_body(20_000 + g, n), "scripted-judge")
                    t0 = time.perf_counter()
                    await asyncio.gather(*(post(http, judge.url + "/chat/completions", b) for b in requests))
                    direct.append(time.perf_counter() - t0)
                compare_p50, direct_p50 = statistics.median(walls) * 1000, statistics.median(direct) * 1000
                out["overhead"] = {"compare_p50_ms": round(compare_p50, 2), "genrm_calls_p50_ms": round(direct_p50, 2),
                                   "overhead_p50_ms": round(compare_p50 - direct_p50, 2), "target_ms": 5.0,
                                   "ok": compare_p50 - direct_p50 <= 5.0,
                                   "server_cpu_ms_per_group": round(cpu_ms, 2)}
    await judge.stop()
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--genrm-latency-ms", type=float, default=20.0, help="the scripted GenRM's fixed latency")
    parser.add_argument("--group-size", type=int, default=16)
    parser.add_argument("--groups", type=int, default=40, help="groups timed per strategy")
    print(json.dumps(asyncio.run(main(parser.parse_args()))))
