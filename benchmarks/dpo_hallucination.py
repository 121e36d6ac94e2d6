"""DPO against tool hallucination on CPU: the tiny policy's hallucination rate before and after.

Per seed:
  1. a tiny policy is warm-started (supervised) on synthetic one-tool rows
     (trainer/dpo/synthetic_tools.py) whose targets are flawed on purpose: --hallucinated-share of
     them call a tool that does not exist, --bad-arguments-share pass an argument the schema forbids;
  2. its hallucination rate is measured on held-out rows (K sampled responses per row, classified
     against each row's own tool schema, trainer/tool_use.py);
  3. it rolls out K responses per training prompt; pairs = a clean call (chosen) vs a hallucinated
     one (rejected) from the same prompt (trainer/dpo/preference_data.py, what `driver rollout
     --pairs` writes);
  4. `driver dpo`'s loop (trainer/dpo/train.py) trains on those pairs against the frozen warm-start
     weights; the rate is measured again on the same held-out rows with the same sampling seed.

The rollouts here are generated in process and not scored by the tool_call server: pairs need only
the classification, which reads the row's schemas (tests/trainer/test_dpo_e2e.py runs the same
path through `driver rollout` and the real server).

    python benchmarks/dpo_hallucination.py                 # 3 seeds, one JSON object on stdout
    python benchmarks/dpo_hallucination.py --seeds 0 --warm-start-steps 120   # quicker look
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from servers.wire import ROLLOUT_INDEX_KEY, TASK_INDEX_KEY  # noqa: E402
from trainer.dpo.config import load_dpo_config  # noqa: E402
from trainer.dpo.hallucination_eval import generate_tool_responses, hallucination_rate  # noqa: E402
from trainer.dpo.preference_data import pairs_from_rollouts, write_pairs  # noqa: E402
from trainer.dpo.synthetic_tools import tool_rows, warm_start_examples  # noqa: E402
from trainer.dpo.train import run_dpo  # noqa: E402
from trainer.rollout.generator import SamplingParams  # noqa: E402
from trainer.grpo.warm_start import train_supervised  # noqa: E402
from trainer.policy import Policy, PolicyConfig, TinyModelConfig  # noqa: E402


def one_seed(seed: int, a: argparse.Namespace, work: Path) -> dict[str, Any]:
    t0 = time.perf_counter()
    geometry = TinyModelConfig(num_hidden_layers=a.layers, hidden_size=a.hidden, intermediate_size=3 * a.hidden)
    policy = Policy.load(PolicyConfig(seed=seed, tiny=geometry))
    rows = tool_rows(a.train_rows + a.eval_rows, seed=100 + seed)
    train_rows, eval_rows = rows[:a.train_rows], rows[a.train_rows:]
    examples = warm_start_examples(policy, train_rows, copies=a.copies, hallucinated_share=a.hallucinated_share,
                                   bad_arguments_share=a.bad_arguments_share, seed=seed)
    ws = train_supervised(policy, examples, num_steps=a.warm_start_steps, batch_size=a.batch_size, lr=a.warm_start_lr,
                          seed=seed)
    sampling = SamplingParams(temperature=a.temperature, top_p=1.0, max_new_tokens=a.max_new_tokens)
    timing = {"warm_start": round(time.perf_counter() - t0, 1)}
    t = time.perf_counter()
    before = hallucination_rate(policy, eval_rows, num_generations=a.eval_generations, params=sampling, seed=seed)

    timing["measure_before"] = round(time.perf_counter() - t, 1)
    t = time.perf_counter()
    # rollouts on the training prompts -> pairs (the records carry what `driver rollout` writes for pairing)
    responses = generate_tool_responses(policy, train_rows, num_generations=a.rollout_generations, params=sampling,
                                        seed=seed + 1)
    counter: dict[int, int] = {}
    records = []
    for task, response in responses:
        counter[task] = counter.get(task, -1) + 1
        records.append({**train_rows[task], "response": response, TASK_INDEX_KEY: task, ROLLOUT_INDEX_KEY: counter[task]})
    pairs = pairs_from_rollouts(records, max_pairs_per_prompt=a.max_pairs_per_prompt)
    seed_dir = work / f"seed_{seed}"
    write_pairs(seed_dir / "pairs.jsonl", pairs)
    policy.save(seed_dir / "warm_start")
    timing["rollouts_and_pairs"] = round(time.perf_counter() - t, 1)
    out: dict[str, Any] = {"seed": seed, "seconds": timing, "warm_start_steps": ws["warm_start/steps"],
                           "warm_start_final_loss": round(ws.get("warm_start/final_loss", float("nan")), 4),
                           "before": before, "pairs": len(pairs)}
    if len(pairs) < a.min_pairs:
        out.update(after=None, note=f"only {len(pairs)} pairs (< --min-pairs {a.min_pairs}): DPO not run")
        return out
    batch = min(a.dpo_batch, len(pairs))  # a policy that rarely hallucinates yields few pairs: smaller steps
    cfg = load_dpo_config("tiny", [
        f"policy.model_name={seed_dir / 'warm_start'}", f"data.train.data_path={seed_dir / 'pairs.jsonl'}",
        f"logger.log_dir={seed_dir / 'dpo'}", f"dpo.seed={seed}", f"dpo.max_num_steps={a.dpo_steps}",
        f"dpo.max_num_epochs={a.dpo_epochs}", f"dpo.reference_policy_kl_penalty={a.beta}",
        f"policy.train_global_batch_size={batch}", f"policy.train_micro_batch_size={batch}",
        f"policy.optimizer.kwargs.lr={a.dpo_lr}", f"dpo.sft_loss_weight={a.sft_loss_weight}", "logger.progress_bar=false", "checkpointing.save_period=1000"])
    t = time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr):  # stdout carries the one JSON object only
        summary = run_dpo(cfg, resume=False)
    timing["dpo"] = round(time.perf_counter() - t, 1)
    t = time.perf_counter()
    trained = Policy.load(PolicyConfig(model_name=str(sorted((seed_dir / "dpo" / "checkpoints").glob("step_*"))[-1])))
    after = hallucination_rate(trained, eval_rows, num_generations=a.eval_generations, params=sampling, seed=seed)
    timing["measure_after"] = round(time.perf_counter() - t, 1)
    timing["total"] = round(time.perf_counter() - t0, 1)
    first = json.loads((seed_dir / "dpo" / "metrics.jsonl").read_text().splitlines()[1])
    out.update(after=after, dpo_steps=summary["steps"],
               dpo_first_step={k: round(first[k], 4) for k in ("train/loss", "train/accuracy")},
               dpo_last_step={k: round(summary["final_train"][k], 4) for k in ("train/loss", "train/accuracy",
                                                                                "train/reward_margin")})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--train-rows", type=int, default=64)
    p.add_argument("--eval-rows", type=int, default=32)
    p.add_argument("--hallucinated-share", type=float, default=0.3)
    p.add_argument("--bad-arguments-share", type=float, default=0.1)
    p.add_argument("--copies", type=int, default=4, help="warm-start targets drawn per training row")
    p.add_argument("--warm-start-steps", type=int, default=200)
    p.add_argument("--warm-start-lr", type=float, default=3e-3)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--temperature", type=float, default=1.0, help="sampling for rollouts and the measured rate")
    p.add_argument("--max-new-tokens", type=int, default=112)
    p.add_argument("--eval-generations", type=int, default=4)
    p.add_argument("--rollout-generations", type=int, default=6)
    p.add_argument("--max-pairs-per-prompt", type=int, default=4)
    p.add_argument("--dpo-steps", type=int, default=24)
    p.add_argument("--dpo-epochs", type=int, default=8)
    p.add_argument("--dpo-batch", type=int, default=16, help="pairs per step (fewer when there are fewer pairs)")
    p.add_argument("--min-pairs", type=int, default=4, help="below this many pairs DPO is not run for the seed")
    p.add_argument("--dpo-lr", type=float, default=2e-4)
    # without an SFT term DPO can lower both likelihoods until the policy stops making any valid call
    # (hallucination rate 0, clean rate 0 too); a small one keeps the chosen calls likely
    p.add_argument("--sft-loss-weight", type=float, default=0.05, help="dpo.sft_loss_weight (summed chosen NLL)")
    p.add_argument("--beta", type=float, default=0.1, help="dpo.reference_policy_kl_penalty")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--workdir", help="keep pairs, checkpoints and metrics here (default: a temp folder)")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(a.workdir or tmp)
        per_seed = []
        for s in a.seeds:
            per_seed.append(one_seed(s, a, work))
            r = per_seed[-1]
            print(f"seed {s}: hallucination rate {r['before']['hallucination_rate']:.3f} -> "
                  f"{r['after']['hallucination_rate'] if r.get('after') else float('nan'):.3f} "
                  f"({r['pairs']} pairs, {r['seconds'].get('total', '?')}s)", file=sys.stderr, flush=True)
    done = [r for r in per_seed if r.get("after")]
    mean = lambda xs: round(sum(xs) / len(xs), 4) if xs else None  # noqa: E731
    print(json.dumps({
        "benchmark": "dpo_hallucination",
        "hallucination_rate_before": [r["before"]["hallucination_rate"] for r in per_seed],
        "hallucination_rate_after": [r["after"]["hallucination_rate"] if r.get("after") else None for r in per_seed],
        "clean_rate_before": [r["before"]["clean_rate"] for r in per_seed],
        "clean_rate_after": [r["after"]["clean_rate"] if r.get("after") else None for r in per_seed],
        "mean_before": mean([r["before"]["hallucination_rate"] for r in done]),
        "mean_after": mean([r["after"]["hallucination_rate"] for r in done]),
        "lowered_on_every_seed": bool(done) and len(done) == len(per_seed)
        and all(r["after"]["hallucination_rate"] < r["before"]["hallucination_rate"] for r in done),
        # a lower rate bought by no longer calling tools at all is not a win: clean calls must not fall
        "clean_rate_kept_on_every_seed": bool(done) and len(done) == len(per_seed)
        and all(r["after"]["clean_rate"] >= r["before"]["clean_rate"] for r in done),
        "per_seed": per_seed, "settings": vars(a), "seconds": round(time.perf_counter() - t0, 1),
        "machine": {"python": platform.python_version(), "torch": torch.__version__, "cpu": platform.processor() or platform.machine(),
                    "threads": a.threads},
    }, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
