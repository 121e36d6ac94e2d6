"""`driver run -c tiny_tools` end to end on tiny_tools rows: the multi-turn path under the driver.

The real math_python server (its execute_python tool in the bubblewrap sandbox) is started by the
driver; every rollout is seed_session -> model turn -> tool call -> the sandbox's reply -> model
turn -> /verify on the session. To know every token of the run, the blend is the tiny_tools blend
cut to its row "What is 7*8?" (a blend file in tmp_path over that row of
blends/data/tiny_tools.jsonl), and the warm start (``policy.warm_start.conversations``) overfits
the gold conversation of that row: the policy then writes ``print(7*8)`` and, after the tool's
reply, ``\\boxed{56}``. So:

* one tool call and two model turns per sample (train metrics, parsed from what the model wrote);
* the environment tokens per sample are exactly those of the sandbox's successful reply to
  ``print(7*8)`` (``{"stdout": "56\\n", "stderr": "", "truncated": false, "success": true}``)
  plus the turn markers around it — a failed cell, a tool error or no session would give other
  tokens — and they are out of the loss (``train/mean_gen_tokens_per_sample`` counts the model's
  two turns only);
* rewards come from /verify on the session: reward 1 (56 is right, and the call computed 7*8), no failed sample.

Not a learning test (benchmarks/tiny_tools_learning.py measures that); no timings.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray")
pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="math_python's sandbox needs bubblewrap")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from blends.tiny_tools_data import conversation  # noqa: E402


def _expected_tokens() -> tuple[int, int]:
    """(model tokens, environment tokens) of the taught conversation, rendered as a rollout builds it."""
    from trainer.grpo.warm_start import conversation_tokens
    from trainer.policy import Policy, PolicyConfig
    from trainer.responses import chat_tools

    policy = Policy.load(PolicyConfig(model_name="tiny"))
    convo = conversation(7, 8)
    prompt_len = len(policy.encode(policy.render(convo["messages"][:1], chat_tools(convo["tools"]))))
    ids, mask = conversation_tokens(policy, convo)
    return sum(mask), len(ids) - prompt_len - sum(mask)


def test_driver_run_tiny_tools_runs_sessions_tool_calls_and_masks_tool_output(tmp_path):
    taught = tmp_path / "one_conversation.jsonl"
    taught.write_text(json.dumps(conversation(7, 8)) + "\n")
    shipped = [json.loads(x) for x in (ROOT / "blends" / "data" / "tiny_tools.jsonl").read_text().splitlines()]
    row = next(r for r in shipped if r["responses_create_params"]["input"][0]["content"] == "What is 7*8?")
    (tmp_path / "rows.jsonl").write_text((json.dumps(row) + "\n") * 6)
    blend = tmp_path / "tiny_tools_7x8.yaml"
    blend.write_text("description: the tiny_tools row 7*8\nsources:\n  - path: rows.jsonl\nsplit:\n  val_holdout: 2\n")
    cmd = [sys.executable, "-m", "trainer.cli", "run", "--blend", str(blend), "-c", "tiny_tools",
           "--data-dir", str(tmp_path / "data"), f"logger.log_dir={tmp_path / 'run'}", "--no-resume",
           "grpo.max_num_steps=2", "grpo.num_prompts_per_step=2", "grpo.num_generations_per_prompt=2",
           "grpo.max_val_samples=2", "grpo.val_period=0", "policy.generation.temperature=0.3",
           f"policy.warm_start.conversations={taught}", "policy.warm_start.batch_size=1",
           "policy.warm_start.num_steps=400", "policy.warm_start.lr=0.003", "policy.warm_start.target_loss=0.002",
           "policy.warm_start.target_accuracy=null",
           "checkpointing.enabled=false"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "environments to start: math_python" in out.stdout
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines() if x.strip()]
    assert rows[0]["warm_start/examples"] == 1 and rows[0]["warm_start/final_loss"] <= 0.01
    model_tokens, env_tokens = _expected_tokens()
    steps = [r for r in rows if "train/reward" in r]
    assert [r["step"] for r in steps] == [1, 2]
    for r in steps:
        assert r["train/failed_frac"] == 0  # sessions seeded, tools answered, /verify scored on the session
        assert r["train/tool_calls_per_sample"] == 1.0 and r["train/turns_per_sample"] == 2.0
        # the tool output went back to the model (the sandbox's successful reply, exactly) ...
        assert r["train/env_tokens_per_sample"] == env_tokens
        # ... and is not trained on: the loss tokens are the model's two turns only
        assert r["train/mean_gen_tokens_per_sample"] == model_tokens
        assert r["train/reward/math_python"] == 1.0  # /verify on the session: \\boxed{56} is right
    val = [r for r in rows if "validation/reward" in r]
    assert [r["step"] for r in val] == [0, 2]
    assert all(r["validation/failed_frac"] == 0 and r["validation/reward"] == 1.0 for r in val)
