"""End to end on CPU: a flawed warm start -> `driver rollout --pairs` (the real tool_call server)
-> `driver dpo` on the pairs. Short on purpose; the full demonstration is benchmarks/dpo_hallucination.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from trainer.cli import main
from trainer.dpo.preference_data import PAIR_INFO_KEY, read_pairs
from trainer.dpo.synthetic_tools import AGENT, warm_start_examples
from trainer.grpo.warm_start import train_supervised
from trainer.policy import Policy, PolicyConfig, TinyModelConfig

# trains a model from scratch on CPU: ~1 minute on an idle 2-core machine, several when it is shared
pytestmark = [pytest.mark.train, pytest.mark.timeout(1200)]
# a compact schema (no description): the byte-level prompt stays short, the warm start quick
TOOL = {"type": "function", "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
torch.set_num_threads(1)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_rollout_pairs_then_dpo(tmp_path, capsys):
    # 1. a tiny policy that calls the right tool about half the time and a made-up one otherwise
    rows = [{"responses_create_params": {"input": [{"role": "user", "content": f"Weather in {city}?"}], "tools": [TOOL]},
             "expected_answers": [{"name": "get_weather", "arguments": {"city": city}}],
             "agent_ref": {"type": "responses_api_agents", "name": AGENT}} for city in ("Oslo", "Lima")]
    policy = Policy.load(PolicyConfig(seed=0, tiny=TinyModelConfig(num_hidden_layers=1, hidden_size=48,
                                                                   intermediate_size=96)))
    examples = warm_start_examples(policy, rows, copies=16, hallucinated_share=0.5, bad_arguments_share=0.0, seed=0)
    ws = train_supervised(policy, examples, num_steps=300, batch_size=8, lr=3e-3, target_loss=0.03, seed=0)
    assert ws["warm_start/final_loss"] < 0.06, ws
    policy.save(tmp_path / "warm")
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    # 2. rollouts scored by the real tool_call server; pairs from the same prompt
    out = tmp_path / "rollouts.jsonl"
    assert main(["rollout", "--blend", "tool_hallucination", "--input", str(tmp_path / "rows.jsonl"),
                 "--model", str(tmp_path / "warm"), "--num-generations", "8", "--max-new-tokens", "100", "--max-steps", "1",
                 "--temperature", "0.6",  # a sharper sampler: fewer typos from a 1-layer model, same 50/50 name branch
                 "--output", str(out), "--pairs", str(tmp_path / "pairs.jsonl"), "--seed", "1"]) == 0
    summary = json.loads((tmp_path / "rollouts_summary.json").read_text())
    tool_use = summary["tool_use"]
    assert tool_use["responses"] == 16
    assert 0 < tool_use["hallucination_rate"] < 1 and tool_use["counts"]["clean"] > 0
    assert "hallucination rate" in capsys.readouterr().out
    written = read_jsonl(tmp_path / "pairs.jsonl")
    assert len(written) >= 2
    assert {p[PAIR_INFO_KEY]["rejected_kind"] for p in written} <= {"hallucinated_tool", "invalid_arguments"}
    for p in read_pairs(tmp_path / "pairs.jsonl"):  # chosen: a call to the offered tool; rejected: anything else
        assert p.chosen["tool_calls"][0]["function"]["name"] == "get_weather"
    # rewards agree: chosen responses scored 1 by the server only if the call matched; rejected never
    scored = {(r["_ng_task_index"], r["_ng_rollout_index"]): r["reward"] for r in read_jsonl(out)}
    assert all(scored[(p[PAIR_INFO_KEY]["task_index"], p[PAIR_INFO_KEY]["rejected_rollout"])] == 0 for p in written)

    # 3. DPO on those pairs, validated on the same pairs: the preference loss falls, accuracy rises
    n = len(written)
    log_dir = tmp_path / "dpo"
    assert main(["dpo", f"policy.model_name={tmp_path / 'warm'}", f"data.train.data_path={tmp_path / 'pairs.jsonl'}",
                 f"data.validation.data_path={tmp_path / 'pairs.jsonl'}", "dpo.val_at_start=true", "dpo.val_at_end=true",
                 "dpo.val_batches=0", f"dpo.val_global_batch_size={n}", "dpo.val_micro_batch_size=4",
                 "dpo.max_num_steps=6", "dpo.max_num_epochs=10", f"policy.train_global_batch_size={min(n, 4)}",
                 "policy.train_micro_batch_size=2" if min(n, 4) % 2 == 0 else "policy.train_micro_batch_size=1",
                 "policy.optimizer.kwargs.lr=1e-3", f"logger.log_dir={log_dir}", "checkpointing.save_period=3",
                 "logger.progress_bar=false"]) == 0
    metrics = read_jsonl(log_dir / "metrics.jsonl")
    vals = [m for m in metrics if "validation/loss" in m]
    first, last = vals[0], vals[-1]
    assert first["step"] == 0 and last["step"] == 6
    assert first["validation/reward_margin"] == pytest.approx(0.0, abs=1e-3)  # the policy is its reference
    assert first["validation/preference_loss"] == pytest.approx(0.6931, abs=1e-3)
    assert last["validation/preference_loss"] < first["validation/preference_loss"] - 0.01
    assert last["validation/accuracy"] > 0.5 and last["validation/reward_margin"] > 0
    train = [m for m in metrics if "train/loss" in m]
    assert [m["step"] for m in train] == [1, 2, 3, 4, 5, 6]
    for key in ("train/rewards_chosen_mean", "train/rewards_rejected_mean", "train/sft_loss", "train/grad_norm"):
        assert key in train[-1]
    ckpts = sorted(p.name for p in (log_dir / "checkpoints").glob("step_*"))
    assert ckpts == ["step_000003", "step_000006"]
    assert (log_dir / "checkpoints" / "step_000006" / "reference_logprobs.json").exists()
    assert json.loads((log_dir / "summary.json").read_text())["data/train_pairs"] == n
