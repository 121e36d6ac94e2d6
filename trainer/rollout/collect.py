"""``driver rollout``'s collection: K scored rollouts per task, NeMo-Gym-style output files.

Output (nemo-gym.md §3.1):

* ``<out>.jsonl`` — one line per scored rollout: the verify reply (row fields, ``response``,
  ``reward``, extras) + ``_ng_task_index`` (line of the prompt in the split file) +
  ``_ng_rollout_index`` (0..K-1) + ``agent_ref``;
* ``<out>_failures.jsonl`` — rollouts that carry ``_ng_failure_class`` (server dead,
  overloaded, verifier error...). They are excluded from the reward metrics and retried on
  the next run, up to ``max_attempts`` attempts (``_ng_attempt_index``), like NeMo-Gym;
* ``<out>_summary.json`` — per-environment mean reward, pass@1, pass@k, failures per
  class, rollouts/s; for rows with tools, ``tool_use``: the hallucination rate (calls to a tool
  the row does not offer, or arguments outside its schema; trainer.tool_use) and counts per kind.

Resumable: a rerun reads ``<out>.jsonl`` and skips every (task, rollout) pair already in it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servers.wire import FAILURE_CLASS_KEY, ROLLOUT_INDEX_KEY, TASK_INDEX_KEY
from trainer.progress import progress as progress_bar
from trainer.rollout.episode import run_episode
from trainer.rollout.generator import Generator, SamplingParams
from trainer.rollout.scoring import EnvCalls
from trainer.rollout.task import Task
from trainer.tool_use import hallucination_summary

ENV_KEY = "_verigym_env"  # an output record's environment (summaries, pass rates); never sent to a server
ATTEMPT_KEY = "_ng_attempt_index"


@dataclass
class RolloutSettings:
    num_generations: int = 4
    sampling: SamplingParams = field(default_factory=SamplingParams)
    max_steps: int = 8
    concurrency: int = 128  # episodes in flight: > generator batch, so scoring overlaps decoding
    pass_threshold: float = 1.0  # a rollout "passes" when reward >= this (pass@k)
    max_attempts: int = 3  # NeMo-Gym's NEMO_GYM_MAX_ROLLOUT_ATTEMPTS default


def failures_path(out: Path) -> Path:
    return out.with_name(out.stem + "_failures.jsonl")


def summary_path(out: Path) -> Path:
    return out.with_name(out.stem + "_summary.json")


def read_rollouts(path: Path, *, repair_tail: bool = True) -> list[dict[str, Any]]:
    """Rows of an output file. A torn last line (the run was killed mid-write) is cut off
    and reported; a bad line anywhere else is an error naming its line number."""
    if not path.exists():
        return []
    raw = path.read_bytes()
    lines = raw.split(b"\n")
    rows, good_bytes = [], 0
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            good_bytes += len(line) + 1
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            if number >= len(lines) - 1 and repair_tail:
                print(f"{path}:{number}: torn last line from an interrupted run ({len(line)} bytes) - removed; "
                      "that rollout will be redone")
                with open(path, "r+b") as fh:
                    fh.truncate(good_bytes)
                break
            raise ValueError(f"{path}:{number}: not JSON ({exc})") from None
        good_bytes += len(line) + 1
    return rows


def summarize(rows: list[dict[str, Any]], failures: list[dict[str, Any]], *, k: int,
              pass_threshold: float) -> dict[str, Any]:
    """Per-environment mean reward, pass@1 (mean pass rate) and pass@k (any of the task's
    rollouts passes), over scored rollouts only; failures counted per class."""
    by_env: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        by_env[row.get(ENV_KEY, "?")][row[TASK_INDEX_KEY]].append(float(row.get("reward", 0.0)))
    per_env = {}
    for env, tasks in sorted(by_env.items()):
        rewards = [r for rs in tasks.values() for r in rs]
        per_env[env] = {
            "tasks": len(tasks), "rollouts": len(rewards),
            "mean_reward": sum(rewards) / len(rewards),
            "pass@1": sum(r >= pass_threshold for r in rewards) / len(rewards),
            f"pass@{k}": sum(any(r >= pass_threshold for r in rs) for rs in tasks.values()) / len(tasks),
        }
    out = {"scored": len(rows), "failed": len(failures),
           "failures_by_class": dict(Counter(f.get(FAILURE_CLASS_KEY, "?") for f in failures)),
           "failures_by_env": dict(Counter(f.get(ENV_KEY, "?") for f in failures)), "per_env": per_env}
    tool_use = hallucination_summary(rows, env_key=ENV_KEY)  # rows with tools: hallucinated calls (trainer.tool_use)
    if tool_use is not None:
        out["tool_use"] = tool_use
    return out


async def collect(tasks: list[Task], *, env: EnvCalls, generator: Generator, stateful: dict[str, bool],
                  settings: RolloutSettings, output: Path, progress: bool = True) -> dict[str, Any]:
    """Run every missing (task, rollout) pair of ``tasks`` and append results to ``output``."""
    output.parent.mkdir(parents=True, exist_ok=True)
    done = {(r[TASK_INDEX_KEY], r[ROLLOUT_INDEX_KEY]) for r in read_rollouts(output)}
    old_failures = read_rollouts(failures_path(output))
    attempts: Counter[tuple[int, int]] = Counter()
    for f in old_failures:
        attempts[(f[TASK_INDEX_KEY], f[ROLLOUT_INDEX_KEY])] = max(attempts[(f[TASK_INDEX_KEY], f[ROLLOUT_INDEX_KEY])],
                                                                   int(f.get(ATTEMPT_KEY, 0)) + 1)
    # Failures that used up their attempts stay recorded and are not retried.
    terminal = [f for f in old_failures if attempts[(f[TASK_INDEX_KEY], f[ROLLOUT_INDEX_KEY])] >= settings.max_attempts
                and (f[TASK_INDEX_KEY], f[ROLLOUT_INDEX_KEY]) not in done]
    terminal_pairs = {(f[TASK_INDEX_KEY], f[ROLLOUT_INDEX_KEY]) for f in terminal}
    todo = [(t, r) for t in range(len(tasks)) for r in range(settings.num_generations)
            if (t, r) not in done and (t, r) not in terminal_pairs]  # aabbcc layout, as NeMo-Gym
    with open(failures_path(output), "w") as fh:
        for f in terminal:
            fh.write(json.dumps(f) + "\n")

    out_fh = open(output, "a")
    fail_fh = open(failures_path(output), "a")
    gate = asyncio.Semaphore(settings.concurrency)
    bar = progress_bar(len(todo), desc="rollouts", unit="rollout", enabled=progress)
    start = time.perf_counter()
    tokens0 = generator.stats["generated_tokens"]
    new_failures: Counter[str] = Counter()
    reward_sum, scored = 0.0, 0

    async def one(task: int, rollout: int) -> None:
        nonlocal reward_sum, scored
        t = tasks[task]
        params = SamplingParams.for_row(t.create_params, settings.sampling)
        async with gate:
            episode = await run_episode(generator, env, t, params, stateful=stateful.get(t.env, False),
                                        max_steps=settings.max_steps)
        record = {**episode.reply, TASK_INDEX_KEY: task, ROLLOUT_INDEX_KEY: rollout,
                  "agent_ref": t.row.get("agent_ref"), ENV_KEY: t.env}
        if episode.failure_class:
            record[ATTEMPT_KEY] = attempts[(task, rollout)]
            fail_fh.write(json.dumps(record) + "\n")
            fail_fh.flush()
            new_failures[episode.failure_class] += 1
        else:
            out_fh.write(json.dumps(record) + "\n")
            out_fh.flush()  # one line per rollout on disk: a kill loses at most the line being written
            reward_sum += episode.reward
            scored += 1
        bar.update(1)
        elapsed = time.perf_counter() - start
        bar.set_postfix(rps=f"{bar.n / max(elapsed, 1e-9):.1f}", reward=f"{reward_sum / max(scored, 1):.3f}",
                        failed=sum(new_failures.values()), refresh=False)

    try:
        await asyncio.gather(*(one(t, r) for t, r in todo))
    finally:
        bar.close()
        out_fh.close()
        fail_fh.close()
    elapsed = time.perf_counter() - start
    summary = summarize(read_rollouts(output), read_rollouts(failures_path(output)), k=settings.num_generations,
                        pass_threshold=settings.pass_threshold)
    generated = generator.stats["generated_tokens"] - tokens0
    summary.update({
        "output": str(output), "num_generations": settings.num_generations, "tasks": len(tasks),
        "this_run": {"rollouts": len(todo), "skipped_already_done": len(done),
                     "not_retried_terminal_failures": len(terminal), "failed": sum(new_failures.values()),
                     "failures_by_class": dict(new_failures), "seconds": round(elapsed, 2),
                     "rollouts_per_s": round(len(todo) / elapsed, 2) if elapsed > 0 else None,
                     "generated_tokens_per_s": round(generated / elapsed, 1) if elapsed > 0 else None},
    })
    summary_path(output).write_text(json.dumps(summary, indent=2))
    return summary


def format_summary(summary: dict[str, Any]) -> str:
    k = summary["num_generations"]
    lines = [f"{'environment':<24}{'tasks':>7}{'rollouts':>10}{'mean reward':>13}{'pass@1':>9}{f'pass@{k}':>9}"]
    for env, m in summary["per_env"].items():
        lines.append(f"{env:<24}{m['tasks']:>7}{m['rollouts']:>10}{m['mean_reward']:>13.3f}{m['pass@1']:>9.3f}"
                     f"{m[f'pass@{k}']:>9.3f}")
    tool_use = summary.get("tool_use")
    if tool_use:
        c = tool_use["counts"]
        lines.append(f"tool use: hallucination rate {tool_use['hallucination_rate']:.3f} over {tool_use['responses']} "
                     f"responses (hallucinated tool {c['hallucinated_tool']}, invalid arguments {c['invalid_arguments']}, "
                     f"clean {c['clean']}, no call {c['no_call']})")
    run = summary["this_run"]
    lines.append(f"this run: {run['rollouts']} rollouts in {run['seconds']}s = {run['rollouts_per_s']} rollouts/s, "
                 f"{run['generated_tokens_per_s']} generated tokens/s; resumed past {run['skipped_already_done']} done")
    lines.append(f"failed (in {Path(summary['output']).stem}_failures.jsonl): {summary['failed']} "
                 f"{summary['failures_by_class'] or ''}")
    return "\n".join(lines)
