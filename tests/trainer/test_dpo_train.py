"""The DPO loop on CPU: reference logprobs computed once per pair, resume, validation metrics."""

from __future__ import annotations

import json

import pytest
import torch

from trainer.dpo.config import load_dpo_config
from trainer.dpo.synthetic_tools import tool_rows
from trainer.dpo.train import DPOError, run_dpo
from trainer.grpo.reference import ReferencePolicy

pytestmark = pytest.mark.train
torch.set_num_threads(1)
SMALL = "policy.hf_config_overrides={num_hidden_layers: 1, hidden_size: 32, intermediate_size: 64}"


def write_pairs(path, n=8):
    # completions of different lengths in one microbatch: sums must stop at each completion's end
    path.write_text("".join(json.dumps({"prompt": f"{i}+1=", "chosen": str(i + 1), "rejected": f"{i + 2}" + " no" * i})
                            + "\n" for i in range(n)))


@pytest.fixture
def counted_reference(monkeypatch):
    calls = []
    original = ReferencePolicy.logprobs

    def counting(self, samples, *a, **kw):
        calls.append(len(samples))
        return original(self, samples, *a, **kw)

    monkeypatch.setattr(ReferencePolicy, "logprobs", counting)
    return calls


def config(tmp_path, *extra):
    return load_dpo_config("tiny", [SMALL, f"data.train.data_path={tmp_path / 'pairs.jsonl'}",
                                    f"logger.log_dir={tmp_path / 'run'}", "policy.train_global_batch_size=4",
                                    "policy.train_micro_batch_size=2", "logger.progress_bar=false",
                                    "checkpointing.save_period=2", *extra])


def test_reference_once_per_pair_across_epochs_and_resume(tmp_path, counted_reference):
    write_pairs(tmp_path / "pairs.jsonl")
    s = run_dpo(config(tmp_path, "dpo.max_num_steps=6", "dpo.max_num_epochs=3"))
    assert s["steps"] == 6 and s["data/train_pairs"] == 8
    assert counted_reference == [16]  # 8 pairs x (chosen, rejected), one pass before 3 epochs of training
    counted_reference.clear()
    s = run_dpo(config(tmp_path, "dpo.max_num_steps=8", "dpo.max_num_epochs=4"))  # resumes at step 6
    assert s["resumed_from"] == 6 and counted_reference == []
    metrics = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [0, 1, 2, 3, 4, 5, 6, 7, 8]
    # step 1 is measured before its update: the policy is its reference, every implicit reward is 0
    assert metrics[1]["train/rewards_chosen_mean"] == pytest.approx(0, abs=1e-4)
    assert metrics[1]["train/rewards_rejected_mean"] == pytest.approx(0, abs=1e-4)
    assert metrics[1]["train/preference_loss"] == pytest.approx(0.6931, abs=1e-4)
    cache = json.loads((tmp_path / "run" / "checkpoints" / "step_000008" / "reference_logprobs.json").read_text())
    assert len(cache) == 8 and all(len(v) == 2 and v[0] < 0 and v[1] < 0 for v in cache.values())


def test_epochs_cap_the_steps_and_a_batch_larger_than_the_data_is_an_error(tmp_path):
    write_pairs(tmp_path / "pairs.jsonl", n=6)
    s = run_dpo(config(tmp_path, "dpo.max_num_steps=100", "dpo.max_num_epochs=2", "checkpointing.enabled=false"))
    assert s["steps"] == 2  # 6 pairs // 4 per step = 1 step per epoch (drop_last, as NeMo-RL)
    with pytest.raises(DPOError, match="more than the 6 training pairs"):
        run_dpo(config(tmp_path, "policy.train_global_batch_size=8", "policy.train_micro_batch_size=2"), resume=False)


def test_over_length_pairs_are_left_out_and_counted(tmp_path):
    write_pairs(tmp_path / "pairs.jsonl", n=8)
    with open(tmp_path / "pairs.jsonl", "a") as f:
        f.write(json.dumps({"prompt": "x" * 200, "chosen": "a", "rejected": "b"}) + "\n")
    s = run_dpo(config(tmp_path, "dpo.max_num_steps=1", "policy.max_total_sequence_length=100",
                       "checkpointing.enabled=false"))
    assert s["data/train_pairs"] == 8 and s["data/pairs_over_max_length"] == 1


def test_validation_reports_pair_metrics_and_hallucination_rate(tmp_path):
    write_pairs(tmp_path / "pairs.jsonl")
    (tmp_path / "tools.jsonl").write_text("".join(json.dumps(r) + "\n" for r in tool_rows(2, seed=0)))
    s = run_dpo(config(tmp_path, "dpo.max_num_steps=2", f"data.validation.data_path={tmp_path / 'pairs.jsonl'}",
                       f"data.hallucination_eval.data_path={tmp_path / 'tools.jsonl'}",
                       "data.hallucination_eval.num_generations=2", "policy.generation.max_new_tokens=4",
                       "dpo.val_at_start=true", "dpo.val_at_end=true", "dpo.val_batches=1",
                       "dpo.val_global_batch_size=4", "dpo.val_micro_batch_size=4", "policy.max_total_sequence_length=512",
                       "checkpointing.enabled=false"))
    first, last = s["validation"][0], s["validation"][-1]
    assert (first["step"], last["step"]) == (0, 2)
    # policy == reference: margins are 0 up to float noise between batch shapes (so accuracy, a strict
    # comparison of equal numbers, is not asserted here), the loss is log 2
    assert first["validation/reward_margin"] == pytest.approx(0, abs=1e-4)
    assert first["validation/preference_loss"] == pytest.approx(0.6931, abs=1e-4)
    assert first["validation/num_valid_samples"] == 4
    # 2 rows x 2 samples of 4 tokens: no call can be complete, so all are no_call and the rate is 0
    assert first["validation/responses"] == 4 and first["validation/no_call_rate"] == 1.0
    assert first["validation/hallucination_rate"] == 0.0
