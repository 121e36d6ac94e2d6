"""The figures the README and docs/benchmarks.md show, rendered from ``benchmarks/results/*.json``.

    python benchmarks/report.py            # print the table
    python benchmarks/report.py --write    # put it into README.md and docs/benchmarks.md

Each row is one recorded run (``benchmarks/record.py``): what was measured, the figure, the
target, and the record's date, machine and load. A benchmark with no record says so instead of
showing a number. ``tests/test_benchmark_figures.py`` checks both documents hold exactly this.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DOCUMENTS = (ROOT / "README.md", ROOT / "docs" / "benchmarks.md")
BEGIN, END = "<!-- figures: begin (python benchmarks/report.py --write) -->", "<!-- figures: end -->"


def n(value: float, digits: int = 0) -> str:
    return f"{value:,.{digits}f}"


def _throughput(r: dict[str, Any]) -> str:
    return f"{n(r['req_per_s'])} verifications/s, p99 {n(r['p99_ms'])} ms, {sum(r['errors'].values())} errors"


def _sandbox(r: dict[str, Any]) -> str:
    return (f"{n(r['zygote']['exec_per_s'])} executions/s end to end (bare `subprocess`: "
            f"{n(r['bare_subprocess_exec_per_s'])}/s)")


def _code(r: dict[str, Any]) -> str:
    return (f"{n(r['verifications_per_s'], 1)} verifications/s, {n(r['unit_tests_per_s'])} unit tests/s, "
            f"p99 {n(r['latency_s']['p99'], 1)} s, {len(r['reward_mismatches'])} reward mismatches")


def _swe(r: dict[str, Any]) -> str:
    return (f"{n(r['cold']['seconds_per_instance'], 2)} s cold, {n(r['warm_pool']['seconds_per_instance'], 2)} s with "
            f"a warm pool (container start {n(r['warm_start_overhead_s'], 2)} s)")


def _judge(r: dict[str, Any]) -> str:
    t, o, c = r["throughput"], r["overhead"], r["cache"]
    return (f"{n(t['judged_items_per_s'])} judged items/s at concurrency {t['concurrency']} (judge at "
            f"{n(r['judge_latency_ms'])} ms), server overhead {n(o['server_overhead_p50_ms'], 2)} ms p50; the cache cut "
            f"judge calls by {c['judge_call_reduction']:.0%} ({n(c['judge_calls_cache_off'])} → {n(c['judge_calls_cache_on'])})")


def _genrm(r: dict[str, Any]) -> str:
    c, o = r["calls"], r["overhead"]
    def calls(strategy: str) -> str:
        return "/".join(n(x) for x in c[strategy]["per_group"])
    return (f"GenRM calls per group: circular {calls('circular')}, all_pairs {calls('all_pairs')}; "
            f"overhead {n(o['overhead_p50_ms'], 1)} ms p50 over the same calls sent directly "
            f"({n(o['server_cpu_ms_per_group'], 1)} ms server CPU per group)")


def _fleet(r: dict[str, Any]) -> str:
    return (f"{len(r['envs'])} environments × {r['workers']} workers: every /health 200 in {n(r['all_ready_s'], 1)} s "
            f"({n(r['cpu_s_to_ready'], 1)} CPU-s)")


def _connections(r: dict[str, Any]) -> str:
    rss = r["server_rss_mb"]
    return (f"{n(r['ok'])} / {n(r['requests'])} ok over {n(r['connections_held'])} held connections, "
            f"{sum(r['errors'].values()) if r['errors'] else 0} errors, RSS {n(rss['before'])} → {n(rss['peak'])} MB peak, "
            f"healthy after: {'yes' if r['healthy_after'] else 'no'}")


def _verify_cost(r: dict[str, Any]) -> str:
    def cpu(env: str, traffic: str) -> str:
        got = r["results"].get(env, {}).get(f"{traffic}_w1")
        return n(got["cpu_us_per_req"]) if got else "—"
    return "; ".join(f"{env} {cpu(env, 'unique')} / {cpu(env, 'repeated')} µs" for env in r["results"])


def _async(r: dict[str, Any]) -> str:
    return (f"{r['throughput_ratio']:.2f}× throughput (ceiling {r['ceiling_ratio']:.2f}×), trainer idle "
            f"{r['async_trainer_idle_fraction']:.1%} async vs {r['sync_trainer_idle_fraction']:.1%} sync")


def _adversarial(r: dict[str, Any]) -> str:
    t, envs = r["suite"]["totals"], len(r["suite"]["per_env"])
    text = (f"{n(t['attacks_refused'])} / {n(t['attacks'])} attacks refused, {n(t['controls_passing'])} / "
            f"{n(t['controls'])} honest controls scoring ({envs} environments)")
    cost = r.get("cpu_per_verification", {}).get("results", {})
    ratios = [v["ratio"] for env in cost.values() for key, v in env.items() if key.startswith("unique") and v["ratio"]]
    if ratios:
        text += (f"; CPU per verification vs {r['cpu_per_verification']['base']} on unique traffic "
                 f"{min(ratios):.2f}-{max(ratios):.2f}× ({len(cost)} rule-based environments)")
    added = [v["added_us"] for v in r["judge_prompt"].values() if "added_us" in v]
    return text + f"; a guarded judge prompt (2 KB response) {min(added):.0f}-{max(added):.0f} µs more than verbatim"


def _gpu_decode(r: dict[str, Any]) -> str:
    server, engine = r["server"], r["engine"]
    text = (f"{n(server['tokens_s'])} tokens/s through `envs model serve` ({server['fraction_of_limit']:.1%} of the "
            f"{n(r['bandwidth_limit_tokens_s'])} bandwidth limit), {n(engine['tokens_s'])} in process "
            f"({engine['decode']})")
    if "compile_speedup" in r:  # --compile: the uncompiled engine ran in the same process
        text += f", {r['compile_speedup']:.2f}× the uncompiled engine ({n(r['engine_uncompiled']['tokens_s'])})"
    if "generate" in r:
        text += f"; `generate` {n(r['generate']['tokens_s'])}"
    train = r.get("train_step", {})
    if train.get("tokens_s"):
        text += f"; train step {n(train['tokens_s'])} tokens/s" + (f", MFU {train['mfu']:.0%}" if train.get("mfu") else "")
    return text


def _spread(s: dict[str, float]) -> str:
    return f"{s['mean']:.2f} ± {s['std']:.2f}"


def _tiny(r: dict[str, Any]) -> str:
    v = r["validation"]
    return (f"greedy validation {_spread(v['step0'])} → {_spread(v['final'])} over seeds {', '.join(map(str, r['seeds']))} "
            f"(gain {v['gain']['min']:+.2f} to {v['gain']['max']:+.2f}); in-flight weight updates "
            f"{n(r['in_flight_weight_updates']['min'])}-{n(r['in_flight_weight_updates']['max'])} per run; "
            f"{n(r['wall_seconds']['min'])}-{n(r['wall_seconds']['max'])} s per run")


def _tiny_tools(r: dict[str, Any]) -> str:
    v = r["validation"]
    return (f"greedy validation {_spread(v['step0'])} → {_spread(v['final'])} over seeds {', '.join(map(str, r['seeds']))}, "
            f"{r['failed_samples']} failed samples")


def _dpo(r: dict[str, Any]) -> str:
    pairs = ", ".join(f"{b:.3f} → {a:.3f}" for b, a in zip(r["hallucination_rate_before"], r["hallucination_rate_after"])
                      if a is not None)
    return f"hallucination rate per seed: {pairs}"


@dataclass(frozen=True)
class Figure:
    record: str  # benchmarks/results/<record>.json
    what: str
    measured: Callable[[dict[str, Any]], str]
    target: str


FIGURES = (
    Figure("mcqa", "`mcqa` server, concurrency 64", _throughput, "≥ 3,000/s, p99 < 50 ms"),
    Figure("math", "`math` server, concurrency 64", _throughput, "≥ 300/s"),
    Figure("instruction_following", "`instruction_following` server, concurrency 64", _throughput, "≥ 1,000/s"),
    Figure("structured_outputs", "`structured_outputs` server, concurrency 64", _throughput, "≥ 2,000/s"),
    Figure("calendar", "`calendar` server, concurrency 64", _throughput, "≥ 2,000/s"),
    Figure("next_action", "`next_action` server, concurrency 64", _throughput, "≥ 2,000/s"),
    Figure("workplace_sessions", "`workplace_assistant` full sessions (seed + 3 tools + verify)",
           lambda r: f"{n(r['sessions_per_s'])} sessions/s, p99 {n(r['p99_session_ms'])} ms, "
                     f"{n(r['open_sessions_after'])} left open", "≥ 300/s"),
    Figure("sandbox_exec", "process sandbox, trivial Python", _sandbox, "≥ 40/s"),
    Figure("code_env", "`code` environment, concurrency 32", _code, "report"),
    Figure("swe_grading", "SWE grading, tiny instance", _swe, "warm start < 1 s"),
    Figure("data_prep", "`driver data prep`, 100k hub-format rows",
           lambda r: f"{n(r['seconds'], 1)} s ({n(r['placeholders_resolved'])} placeholders resolved)", "≤ 60 s"),
    Figure("judge_throughput", "`multichallenge` against a scripted judge", _judge,
           "≥ 1,000 items/s, ≤ 2 ms p50, ≥ 25% fewer calls"),
    Figure("genrm_compare", "`genrm` `/compare`, groups of 16, GenRM at 20 ms", _genrm, "exactly N / N(N-1)/2; ≤ 5 ms"),
    Figure("fleet_startup", "fleet ready, every local environment", _fleet, "≤ 5 s"),
    Figure("verify_cost", "server CPU per verification, unique / repeated traffic, 1 worker", _verify_cost,
           "mcqa ≤ 120, IF ≤ 400, structured ≤ 300, math ≤ 2,000 µs"),
    Figure("connections", "20,000 connections × 5 requests, one mcqa server", _connections,
           "only 503 + Retry-After, bounded memory"),
    Figure("async_vs_sync", "async vs sync GRPO, 20 steps", _async, "≥ 1.5×, idle < 15%"),
    Figure("engine_overhead", "engine overhead, 8 steps",
           lambda r: f"{r['async_overhead_fraction']:.1%} of wall time outside generation, reward and training (async)",
           "< 10%"),
    Figure("adversarial", "reward-gaming attacks (`tests/adversarial/`) and the hardening's cost", _adversarial,
           "every attack refused, every control scoring; CPU ≤ 1.10× main"),
    Figure("gpu_decode_qwen2_5-0_5b", "decode engine on a GPU, Qwen2.5-0.5B geometry, 128 rows × 256 new tokens",
           _gpu_decode, "≥ 50,000 tokens/s through the server"),
    Figure("gpu_decode_qwen2_5-1_5b", "decode engine on a GPU, Qwen2.5-1.5B geometry, 256 rows × 256 new tokens",
           _gpu_decode, "≥ 10× the old loop (3,300–8,700, issue 28)"),
    Figure("tiny_learning", "`driver run --blend tiny`, several seeds", _tiny, "every seed +0.25, every env rising"),
    Figure("tiny_tools_learning", "`driver run --blend tiny_tools -c tiny_tools`", _tiny_tools, "rising on every seed"),
    Figure("dpo_hallucination", "DPO against tool hallucination", _dpo, "rate falls"),
)


def load(record: str) -> dict[str, Any] | None:
    path = RESULTS / f"{record}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _where(rec: dict[str, Any]) -> str:
    m = rec["machine"]
    gpu = f", {m['gpu']}" if m.get("gpu") else ", no GPU"
    load = m["load_average_before"][0]
    load_text = f"load {load:g}" if load is not None else "load not recorded (a lent machine, used alone)"
    return f"{rec['date']}; {m['cpus']} CPUs, {m['memory_gib']:g} GiB{gpu}; {load_text}"


def table() -> str:
    rows = ["| what | measured | target | record (date; machine; 1-min load at start) |", "|---|---|---|---|"]
    for fig in FIGURES:
        rec = load(fig.record)
        if rec is None:
            rows.append(f"| {fig.what} | not measured: no record (`bash benchmarks/record_all.sh {fig.record}`) "
                        f"| {fig.target} | — |")
        else:
            rows.append(f"| {fig.what} | {fig.measured(rec['result'])} | {fig.target} | "
                        f"[{fig.record}](benchmarks/results/{fig.record}.json): {_where(rec)} |")
    return "\n".join(rows)


def rendered(document: Path) -> str:
    """The table as ``document`` shows it (links relative to the document's folder)."""
    text = table()
    if document.parent != ROOT:
        text = text.replace("](benchmarks/results/", "](../benchmarks/results/")
    return text


def block(text: str) -> str | None:
    """What stands between the markers of a document, or None when it has none."""
    if BEGIN not in text or END not in text:
        return None
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n")


def write() -> None:
    for document in DOCUMENTS:
        text = document.read_text()
        if block(text) is None:
            raise SystemExit(f"{document}: no {BEGIN} ... {END} markers to write between")
        head, rest = text.split(BEGIN, 1)
        document.write_text(head + BEGIN + "\n" + rendered(document) + "\n" + END + rest.split(END, 1)[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="write the table into README.md and docs/benchmarks.md")
    args = parser.parse_args(argv)
    if args.write:
        write()
    else:
        print(table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
