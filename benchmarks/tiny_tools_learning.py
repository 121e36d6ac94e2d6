"""`driver run --blend tiny_tools -c tiny_tools` over seeds: does multi-turn GRPO raise the reward? (one JSON)

The multi-turn path as a user runs it (data prep, the real math_python server with its sandboxed
execute_python tool, the warm start on gold conversations, async GRPO), the shipped config
unchanged except ``grpo.seed=N`` and a fresh log dir, one seed at a time. Per seed: greedy
validation reward at step 0 (after the warm start) and at the end, the gain, the best; tool calls,
model turns and masked tool-output tokens per training sample at the first and last step (parsed
from what the model wrote); failed (masked) samples; warm-start steps and final loss; wall time.
Then mean ± std (min, max) over the seeds. The load average at start and end is reported: wall
times from a loaded machine are not the quiet machine's.

    python benchmarks/tiny_tools_learning.py                        # seeds 0, 1, 2
    python benchmarks/tiny_tools_learning.py --seeds 0 --out /tmp/tt grpo.max_num_steps=10
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from tiny_learning import spread  # noqa: E402

MULTI_TURN = ("tool_calls_per_sample", "turns_per_sample", "env_tokens_per_sample")


def run_seed(seed: int, out: Path, overrides: list[str]) -> dict:
    log_dir = out / f"seed{seed}"
    cmd = [sys.executable, "-m", "trainer.cli", "run", "--blend", "tiny_tools", "-c", "tiny_tools", "--no-resume",
           f"logger.log_dir={log_dir}", "logger.progress_bar=false", f"grpo.seed={seed}", *overrides]
    t0 = time.perf_counter()
    with open(out / f"seed{seed}.log", "w") as log:
        rc = subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT).returncode
    wall = time.perf_counter() - t0
    if rc != 0 or not (log_dir / "summary.json").exists():
        return {"seed": seed, "error": f"exit {rc}; see {out / f'seed{seed}.log'}"}
    summary = json.loads((log_dir / "summary.json").read_text())
    rows = [json.loads(x) for x in (log_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    vals = [r for r in rows if "validation/reward" in r]
    steps = [r for r in rows if "train/reward" in r]
    ws = next((r for r in rows if "warm_start/steps" in r), {})
    first, last = vals[0], vals[-1]
    return {
        "seed": seed, "wall_seconds": round(wall, 1),
        "warm_start": {"steps": ws.get("warm_start/steps"), "final_loss": round(ws.get("warm_start/final_loss", 0.0), 4)},
        "step0": round(first["validation/reward"], 4), "final": round(last["validation/reward"], 4),
        "final_step": last["step"], "best": round(max(r["validation/reward"] for r in vals), 4),
        "validation_curve": [[r["step"], round(r["validation/reward"], 4)] for r in vals],
        "validation_failed_frac": max(r["validation/failed_frac"] for r in vals),
        "train_reward_first_last": [round(steps[0]["train/reward"], 4), round(steps[-1]["train/reward"], 4)] if steps else None,
        "train_first_step": {k: round(steps[0].get(f"train/{k}", 0.0), 3) for k in MULTI_TURN} if steps else None,
        "train_last_step": {k: round(steps[-1].get(f"train/{k}", 0.0), 3) for k in MULTI_TURN} if steps else None,
        "failed_samples": summary.get("failed_samples"), "failures_by_class": summary.get("failures_by_class"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--out", help="folder for the runs (default: a temporary folder, kept)")
    ap.add_argument("overrides", nargs="*", help="extra key=value overrides for every run")
    args = ap.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="tiny_tools_learning_"))
    out.mkdir(parents=True, exist_ok=True)
    load_start = os.getloadavg()
    t0 = time.perf_counter()
    results = []
    for seed in args.seeds:  # one at a time: each run uses the machine's cores (decode, training, sandboxes)
        results.append(run_seed(seed, out, args.overrides))
        print(f"seed {seed}: {json.dumps(results[-1])}", file=sys.stderr, flush=True)
    ok = [r for r in results if "error" not in r]
    report = {
        "command": "driver run --blend tiny_tools -c tiny_tools grpo.seed=N " + " ".join(args.overrides),
        "seeds": args.seeds, "out": str(out), "cpus": os.cpu_count(),
        "load_average_start": [round(x, 2) for x in load_start], "load_average_end": [round(x, 2) for x in os.getloadavg()],
        "total_seconds": round(time.perf_counter() - t0, 1),
        "validation": {"step0": spread([r["step0"] for r in ok]), "final": spread([r["final"] for r in ok]),
                       "gain": spread([r["final"] - r["step0"] for r in ok]), "best": spread([r["best"] for r in ok])},
        "tool_calls_per_sample_last_step": spread([r["train_last_step"]["tool_calls_per_sample"] for r in ok if r["train_last_step"]]),
        "failed_samples": sum(r["failed_samples"] or 0 for r in ok),
        "rising_on_every_seed": len(ok) == len(args.seeds) and all(r["final"] > r["step0"] for r in ok),
        "runs": results,
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
