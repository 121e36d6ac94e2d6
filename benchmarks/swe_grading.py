"""Grading the tiny SWE instance end to end: container start, patch, tests, teardown.

Two modes, graded one after the other (sequential: the per-instance cost, not throughput):
* ``cold``: a new container per grade (``warm_pool_size: 0``, the default);
* ``warm``: a warm pool of one container per image; the start is taken off the grade's path
  and the used container is replaced in the background.
Reports seconds per instance, the seconds and share spent starting the container (and
removing it), per-phase means, and whether the warm start overhead is under 1 s. Needs
Podman's Docker API (``scripts/ci_podman.sh``) and builds the tiny image if missing.
Timings depend on machine load. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from environments.swe.data.build_examples import patches  # noqa: E402
from environments.swe.models import SweConfig, SweRow  # noqa: E402
from environments.swe.verifier import SweEnvironment  # noqa: E402
from servers.wire import ResponseObject, response_from_text  # noqa: E402


async def _run(mode: str, n: int, row: SweRow, patch: str) -> dict:
    env = SweEnvironment(SweConfig(test_timeout_s=120, warm_pool_size=1 if mode == "warm" else 0))
    response = ResponseObject.model_validate(response_from_text(f"```diff\n{patch}```"))
    try:
        await env.ensure_image(row)  # image build/lookup is not part of the per-grade cost
        if mode == "warm":
            image = env.image_for(row)
            env.pool_for(image, env.sandbox_spec(image, row.repo_dir or env.cfg.repo_dir))  # start filling before the clock
            await asyncio.sleep(3)
        walls, timings = [], []
        for _ in range(n):
            t0 = time.monotonic()
            verdict = await env.verify(row, response, None)
            walls.append(time.monotonic() - t0)
            if verdict.failure_class or verdict.reward != 1.0:
                raise SystemExit(f"grade failed: {verdict.failure_class} {verdict.failure_detail} {verdict.extras.get('reason')}")
            timings.append(verdict.extras["timings"])
            if mode == "warm":
                await asyncio.sleep(1.5)  # let the background replacement finish, as between GRPO steps
    finally:
        await env.close()
    mean = lambda key: statistics.fmean(t.get(key, 0.0) for t in timings)  # noqa: E731
    start, teardown = mean("start_s"), mean("teardown_s")
    per = statistics.fmean(walls)
    return {"grades": n, "seconds_per_instance": round(per, 3), "p50_s": round(statistics.median(walls), 3),
            "max_s": round(max(walls), 3), "container_start_s": round(start, 3),
            "container_teardown_s": round(teardown, 3),
            "start_share": round(start / per, 3), "start_and_teardown_share": round((start + teardown) / per, 3),
            "apply_s": round(mean("apply_s"), 3), "test_s": round(mean("test_s"), 3)}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--grades", type=int, default=8, help="grades per mode")
    args = parser.parse_args()
    row = SweRow.model_validate(json.loads((ROOT / "environments/swe/data/tiny_rows.jsonl").read_text().splitlines()[0]))
    gold = patches()["gold"]
    cold = await _run("cold", args.grades, row, gold)
    warm = await _run("warm", args.grades, row, gold)
    print(json.dumps({"benchmark": "swe_grading", "instance": row.instance_id, "backend": "container (podman)",
                      "cpus": os.cpu_count(), "cold": cold, "warm_pool": warm,
                      "warm_start_overhead_s": warm["container_start_s"],
                      "warm_start_under_1s": warm["container_start_s"] < 1.0}))


if __name__ == "__main__":
    asyncio.run(main())
