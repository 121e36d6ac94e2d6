"""`driver run --blend tiny` over several seeds: does the default run learn on every seed? (one JSON object)

Runs the README's command unchanged except ``grpo.seed=N`` and a fresh log dir per seed (each
run end to end, as a user runs it: data prep, servers, warm start, async GRPO), ``--parallel``
at a time, and reports per seed and as mean ± std (min, max) over the seeds: greedy validation
reward at step 0 (after the warm start) and at the end, overall and per environment, the gain,
in-flight weight updates, policy lag and wall time. ``targets`` checks the issue's bar on every
seed: final >= step 0 + 0.25 overall, final > step 0 on each environment, in-flight updates > 0,
wall < 360 s. The load average at start and end is reported: timings from a loaded machine are
not the quiet machine's.

    python benchmarks/tiny_learning.py                      # seeds 0-4, two at a time
    python benchmarks/tiny_learning.py --seeds 0 1 --parallel 1 --out /tmp/tl
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GAIN_TARGET, WALL_TARGET_S = 0.25, 360.0


def run_seed(seed: int, out: Path, extra: list[str]) -> subprocess.Popen:
    log_dir = out / f"seed{seed}"
    cmd = [sys.executable, "-m", "trainer.cli", "run", "--blend", "tiny", "--no-resume", f"logger.log_dir={log_dir}",
           "logger.progress_bar=false", f"grpo.seed={seed}", *extra]
    log = open(out / f"seed{seed}.log", "w")
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    proc.started = time.perf_counter()  # type: ignore[attr-defined]
    return proc


def seed_result(seed: int, out: Path, rc: int, wall: float) -> dict:
    log_dir = out / f"seed{seed}"
    if rc != 0 or not (log_dir / "summary.json").exists():
        return {"seed": seed, "error": f"exit {rc}; see {out / f'seed{seed}.log'}"}
    summary = json.loads((log_dir / "summary.json").read_text())
    rows = [json.loads(x) for x in (log_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    vals = [r for r in rows if "validation/reward" in r]
    first, last = vals[0], vals[-1]
    envs = sorted(k.split("/", 2)[2] for k in first if k.startswith("validation/reward/"))
    ws = next((r for r in rows if "warm_start/steps" in r), {})
    return {
        "seed": seed, "wall_seconds": round(wall, 1), "warm_start_steps": ws.get("warm_start/steps"),
        "step0": round(first["validation/reward"], 4), "final": round(last["validation/reward"], 4),
        "final_step": last["step"], "best": round(max(r["validation/reward"] for r in vals), 4),
        "per_env": {e: {"step0": round(first[f"validation/reward/{e}"], 4),
                        "final": round(last.get(f"validation/reward/{e}", 0.0), 4)} for e in envs},
        "in_flight_weight_updates": summary["in_flight_weight_updates"], "lag": summary.get("lag", {}),
        "trainer_idle_fraction": summary["trainer_idle_fraction"],
    }


def spread(xs: list[float]) -> dict:
    return {"mean": round(statistics.mean(xs), 3), "std": round(statistics.pstdev(xs), 3),
            "min": round(min(xs), 3), "max": round(max(xs), 3)} if xs else {}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--parallel", type=int, default=2, help="runs at a time (each uses about one core)")
    ap.add_argument("--out", help="folder for the runs (default: a temporary folder, kept)")
    ap.add_argument("overrides", nargs="*", help="extra key=value overrides for every run")
    args = ap.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="tiny_learning_"))
    out.mkdir(parents=True, exist_ok=True)
    # prepare data/tiny once, before the runs: parallel runs would each prepare it into the same folder
    subprocess.run([sys.executable, "-m", "trainer.cli", "data", "prep", "--blend", "tiny"], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)
    load_start = os.getloadavg()
    pending, running, results = list(args.seeds), {}, []
    t0 = time.perf_counter()
    while pending or running:
        while pending and len(running) < args.parallel:
            seed = pending.pop(0)
            running[seed] = run_seed(seed, out, args.overrides)
        for seed, proc in list(running.items()):
            if proc.poll() is not None:
                results.append(seed_result(seed, out, proc.returncode, time.perf_counter() - proc.started))
                print(f"seed {seed}: {results[-1]}", file=sys.stderr, flush=True)
                del running[seed]
        time.sleep(2)
    ok = sorted((r for r in results if "error" not in r), key=lambda r: r["seed"])
    envs = sorted({e for r in ok for e in r["per_env"]})
    report = {
        "command": "driver run --blend tiny grpo.seed=N " + " ".join(args.overrides),
        "seeds": args.seeds, "parallel": args.parallel, "out": str(out),
        "load_average_start": [round(x, 2) for x in load_start], "load_average_end": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(), "total_seconds": round(time.perf_counter() - t0, 1),
        "validation": {
            "step0": spread([r["step0"] for r in ok]), "final": spread([r["final"] for r in ok]),
            "gain": spread([r["final"] - r["step0"] for r in ok]),
            "per_env": {e: {"step0": spread([r["per_env"][e]["step0"] for r in ok if e in r["per_env"]]),
                            "final": spread([r["per_env"][e]["final"] for r in ok if e in r["per_env"]])} for e in envs},
        },
        "in_flight_weight_updates": spread([r["in_flight_weight_updates"] for r in ok]),
        "mixed_version_samples_frac": spread([r["lag"].get("mixed_version_samples_frac", 0.0) for r in ok]),
        "wall_seconds": spread([r["wall_seconds"] for r in ok]),
        "targets": {
            "every_seed_gain_ge_0.25": all(r["final"] - r["step0"] >= GAIN_TARGET for r in ok) and len(ok) == len(args.seeds),
            "every_env_rises_on_every_seed": all(v["final"] > v["step0"] for r in ok for v in r["per_env"].values()),
            "in_flight_updates_every_seed": all(r["in_flight_weight_updates"] > 0 for r in ok),
            "wall_under_360s_every_seed": all(r["wall_seconds"] < WALL_TARGET_S for r in ok),
        },
        "runs": sorted(results, key=lambda r: r["seed"]),
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
