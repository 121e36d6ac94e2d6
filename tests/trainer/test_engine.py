"""The engine end to end on a real local Ray and a real math environment server (tiny steps)."""
import pytest

pytest.importorskip("ray")

from trainer.config import load_config  # noqa: E402
from trainer.fleet import Fleet  # noqa: E402
from trainer.grpo.engine import run_grpo  # noqa: E402

from trainer.grpo.synthetic import AGENT, arithmetic_rows  # noqa: E402


def small_cfg(tmp, *extra):
    return load_config("tiny", [f"logger.log_dir={tmp}", "logger.progress_bar=false", "checkpointing.enabled=false",
                                "grpo.max_num_steps=3", "grpo.num_prompts_per_step=2", "grpo.num_generations_per_prompt=4",
                                "grpo.val_period=0", "grpo.val_at_start=false", "grpo.val_at_end=false",
                                "policy.warm_start.num_steps=5", "policy.generation_batch_size=1", *extra])


@pytest.fixture(scope="module")
def math_server(tmp_path_factory):
    with Fleet(["math"], log_dir=tmp_path_factory.mktemp("fleet")) as fleet:
        yield fleet.urls


def test_async_age_zero_reproduces_sync_run(tmp_path, math_server):
    rows = arithmetic_rows(40, 0)
    sync = run_grpo(small_cfg(tmp_path / "sync", "grpo.async_grpo.enabled=false"), [dict(r) for r in rows], [],
                    math_server, {AGENT: "math"}, resume=False)
    asyn = run_grpo(small_cfg(tmp_path / "async", "grpo.async_grpo.enabled=true", "grpo.async_grpo.max_trajectory_age_steps=0",
                              "grpo.async_grpo.in_flight_weight_updates=true"), [dict(r) for r in rows], [],
                    math_server, {AGENT: "math"}, resume=False)
    assert sync.steps_done == asyn.steps_done == 3
    assert sync.consumed == asyn.consumed and len(set(sync.consumed)) == 6
    assert sync.weights_digest == asyn.weights_digest
    assert sync.summary["dropped_stale_groups"] == 0


def test_dead_environment_is_masked_counted_and_training_continues(tmp_path, math_server):
    rows = arithmetic_rows(40, 1)
    for r in rows[::2]:
        r["agent_ref"] = {"type": "responses_api_agents", "name": "dead_agent"}
    urls = {**math_server, "dead": "http://127.0.0.1:9"}  # nothing listens on the discard port
    res = run_grpo(small_cfg(tmp_path, "env.failed_rollout_retries=1", "grpo.async_grpo.max_trajectory_age_steps=1"),
                   rows, [], urls, {AGENT: "math", "dead_agent": "dead"}, resume=False)
    s = res.summary
    assert res.steps_done == 3
    assert s["failed_samples"] > 0 and set(s["failures_by_class"]) == {"connection_error"}
    assert s["retried_scores"] >= s["failed_samples"]
    import json
    rows_logged = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    masked = [r["train/masked_frac"] for r in rows_logged if "train/masked_frac" in r]
    assert len(masked) == 3 and sum(masked) > 0 and min(masked) < 1  # failed samples masked, the rest trained
