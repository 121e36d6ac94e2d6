"""Attacks refused and honest answers kept, per environment, and what the hardening costs.

    python benchmarks/adversarial.py                        # suite + CPU vs main (about 15 min)
    python benchmarks/adversarial.py --skip-cost            # the suite only (about 4 min)
    python benchmarks/adversarial.py --skip-suite           # the CPU comparison only
    python benchmarks/adversarial.py --base main --requests 6000 --envs math,mcqa

1. **Suite**: runs ``pytest tests/adversarial`` (every file: i26a's and i26b's) and counts, per
   environment (``test_<env>.py``), ``test_attack_*`` cases passed (= refused) of those run and
   ``test_control_*`` cases passed (= the honest answer still scored) of those run; skipped cases
   are listed apart, never counted as refused.
2. **CPU per verification**: ``benchmarks/verify_cost.py`` for the rule-based environments, on this
   tree and on ``--base`` (a ``git worktree`` of it at a temporary path, removed afterwards) in
   the same run, interleaved base/ours/ours/base (``--repeats`` blocks) so drifting machine load
   falls on both; the server CPU-microseconds per request of the runs are averaged per side.
   ``ratio`` = ours / base.
3. **Judge prompt**: microseconds to build one judge prompt, guarded (fenced, defused) vs
   verbatim, for each judged environment's template and a 2 KB response (in-process, the fastest
   of 5 repeats; the judge call itself is unchanged).

Prints ONE JSON object. ``within_10pct`` is true when every rule-based environment's ratio on
unique traffic is at most 1.10.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# The rule-based environments issue 26 hardened (swe_pivot shares the call matching it changed).
COST_ENVS = ("math", "mcqa", "instruction_following", "structured_outputs", "next_action", "tool_call", "swe_pivot",
             "reasoning_gym", "long_context")


def run_suite(pytest_args: list[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "junit.xml"
        started = time.time()
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/adversarial",
                               f"--junitxml={report}", *pytest_args], cwd=ROOT, capture_output=True, text=True)
        seconds = time.time() - started
        if not report.exists():
            raise SystemExit(f"pytest wrote no report (exit {proc.returncode}): {proc.stdout[-2000:]}{proc.stderr[-2000:]}")
        tree = ET.parse(report)
    per_env: dict[str, dict[str, Any]] = defaultdict(lambda: {"attacks_refused": 0, "attacks": 0,
                                                              "controls_passing": 0, "controls": 0,
                                                              "other_passing": 0, "other": 0, "skipped": 0})
    failed: list[str] = []
    for case in tree.iter("testcase"):
        module = (case.get("classname") or "").rsplit(".", 1)[-1]
        env = module.removeprefix("test_")
        name = case.get("name") or ""
        outcome = "skipped" if case.find("skipped") is not None else \
            "failed" if case.find("failure") is not None or case.find("error") is not None else "passed"
        counts = per_env[env]
        if outcome == "skipped":
            counts["skipped"] += 1
            continue
        kind = "attacks" if name.startswith("test_attack_") else "controls" if name.startswith("test_control_") \
            else "other"
        counts[kind] += 1
        if outcome == "passed":
            counts[{"attacks": "attacks_refused", "controls": "controls_passing", "other": "other_passing"}[kind]] += 1
        else:
            failed.append(f"{module}::{name}")
    totals = {key: sum(c[key] for c in per_env.values()) for key in
              ("attacks_refused", "attacks", "controls_passing", "controls")}
    return {"per_env": dict(sorted(per_env.items())), "totals": totals, "failed": failed,
            "pytest_exit": proc.returncode, "seconds": round(seconds, 1)}


def verify_cost(tree: Path, envs: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """benchmarks/verify_cost.py run from ``tree`` (its own code: cwd and sys.path are that tree)."""
    cmd = [sys.executable, str(tree / "benchmarks" / "verify_cost.py"), "--envs", ",".join(envs),
           "--traffic", args.traffic, "--requests", str(args.requests), "--windows", str(args.windows)]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=3600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"verify_cost.py failed in {tree} (exit {proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(lines[-1])["results"]


def compare_cost(args: argparse.Namespace) -> dict[str, Any]:
    envs = args.envs.split(",")
    base_dir = Path(tempfile.mkdtemp(prefix="verigym-base-"))
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(base_dir), args.base],
                   check=True, capture_output=True)
    try:
        commit = subprocess.run(["git", "-C", str(base_dir), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, check=True).stdout.strip()
        runs: dict[str, dict[str, list[dict[str, Any]]]] = {"base": defaultdict(list), "ours": defaultdict(list)}
        for env_name in envs:  # base, ours, ours, base per environment: drift lands on both sides
            for side in ("base", "ours", "ours", "base") * args.repeats:
                runs[side][env_name].append(verify_cost(base_dir if side == "base" else ROOT, [env_name], args)[env_name])
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base_dir)], capture_output=True)
    out: dict[str, Any] = {}
    for env_name in envs:
        out[env_name] = {}
        for key in runs["ours"][env_name][0]:
            sides = {side: [r[key]["cpu_us_per_req"] for r in runs[side][env_name]] for side in ("base", "ours")}
            base_us, ours_us = (sum(v) / len(v) for v in (sides["base"], sides["ours"]))
            out[env_name][key] = {"base_us": round(base_us, 1), "ours_us": round(ours_us, 1),
                                  "ratio": round(ours_us / base_us, 3) if base_us else None,
                                  "base_runs": sides["base"], "ours_runs": sides["ours"]}
    return {"base": args.base, "base_commit": commit, "requests": args.requests, "windows": args.windows,
            "results": out}


def judge_prompt_cost(rounds: int = 400) -> dict[str, Any]:
    from environments.equivalence_llm_judge.equivalence import DEFAULT_PROMPT
    from environments.genrm.aggregation import GENRM_SCORES
    from environments.inverse_if.verifier import DEFAULT_SYSTEM, DEFAULT_TEMPLATE as INVERSE_TEMPLATE, PASS_FAIL
    from environments.multichallenge.verifier import DEFAULT_TEMPLATE as RUBRIC_TEMPLATE, yes_no_verdict
    from servers.judge.untrusted import guard_message, judge_prompt, label_verdict

    response = ("The answer follows from the second paragraph of the document. " * 32)[:2048]
    cases = {
        "equivalence_llm_judge": (DEFAULT_PROMPT, label_verdict({"[[A=B]]": True, "[[A!=B]]": False}), None,
                                  {"question": "Q?", "expected_answer": "gold"}, "generated_answer"),
        "multichallenge": (RUBRIC_TEMPLATE, yes_no_verdict("[[YES]]", "[[NO]]"), "You are a precise evaluator.",
                           {"context": "[USER]: hi", "question": "Q?", "pass_criteria": "YES"}, "response"),
        "inverse_if": (INVERSE_TEMPLATE, PASS_FAIL, DEFAULT_SYSTEM,
                       {"prompt": "P", "standard_response": "S", "criteria": "C"}, "model_response"),
    }
    out: dict[str, Any] = {}
    for name, (template, verdict, system, trusted, slot) in cases.items():
        per_mode: dict[str, float] = {}
        for mode in ("verbatim", "guarded"):
            timings = []
            for repeat in range(5):  # the fastest of 5: the machine's other load only ever adds
                started = time.perf_counter()
                for i in range(rounds):
                    judge_prompt(template, verdict, untrusted={slot: f"{response}{repeat}.{i}"}, trusted=trusted,
                                 system=system, guard=mode)  # type: ignore[arg-type]
                timings.append((time.perf_counter() - started) / rounds * 1e6)
            per_mode[mode] = min(timings)
        out[name] = {"verbatim_us": round(per_mode["verbatim"], 1), "guarded_us": round(per_mode["guarded"], 1),
                     "added_us": round(per_mode["guarded"] - per_mode["verbatim"], 1)}
    timings = []
    for repeat in range(5):
        started = time.perf_counter()
        for i in range(rounds):
            guard_message(f"{response}{repeat}.{i}", GENRM_SCORES)
        timings.append((time.perf_counter() - started) / rounds * 1e6)
    out["genrm"] = {"guarded_us_per_answer": round(min(timings), 1)}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", default="main", help="git ref the CPU cost is compared against")
    parser.add_argument("--envs", default=",".join(COST_ENVS), help="rule-based environments for the CPU comparison")
    parser.add_argument("--traffic", default="unique,repeated", help="verify_cost.py traffic kinds")
    parser.add_argument("--requests", type=int, default=6000, help="verify_cost.py requests per run")
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=1, help="base/ours/ours/base blocks per environment")
    parser.add_argument("--skip-cost", action="store_true", help="only run the suite (and the judge prompt timing)")
    parser.add_argument("--skip-suite", action="store_true", help="only measure (the CPU comparison, judge prompts)")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments for the suite, e.g. -k math")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped run still removes its base worktree
    started = time.time()
    loadavg = Path("/proc/loadavg").read_text().split()[:3]
    result: dict[str, Any] = {"benchmark": "adversarial", "cpus": len(os.sched_getaffinity(0)),
                              "loadavg_before": loadavg, "judge_prompt": judge_prompt_cost()}
    if not args.skip_suite:
        result["suite"] = run_suite(args.pytest_args)
    if not args.skip_cost:
        cost = compare_cost(args)
        result["cpu_per_verification"] = cost
        ratios = [r["ratio"] for env in cost["results"].values() for key, r in env.items()
                  if key.startswith("unique") and r["ratio"] is not None]
        result["within_10pct"] = bool(ratios) and max(ratios) <= 1.10
    result["loadavg_after"] = Path("/proc/loadavg").read_text().split()[:3]
    result["seconds"] = round(time.time() - started, 1)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
