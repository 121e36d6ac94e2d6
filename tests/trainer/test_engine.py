"""The engine end to end on a real local Ray and a real math environment server (tiny steps)."""
import pytest

pytest.importorskip("ray")

from trainer.config import load_config  # noqa: E402
from trainer.fleet import Fleet  # noqa: E402
from trainer.grpo.engine import run_grpo  # noqa: E402

from trainer.grpo.synthetic import AGENT, arithmetic_rows, arithmetic_tasks  # noqa: E402
from trainer.rollout.task import Routes, make_tasks  # noqa: E402


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
    tasks = arithmetic_tasks(40, 0)
    sync = run_grpo(small_cfg(tmp_path / "sync", "grpo.async_grpo.enabled=false"), tasks, [], math_server, resume=False)
    asyn = run_grpo(small_cfg(tmp_path / "async", "grpo.async_grpo.enabled=true", "grpo.async_grpo.max_trajectory_age_steps=0",
                              "grpo.async_grpo.in_flight_weight_updates=true"), tasks, [], math_server, resume=False)
    assert sync.steps_done == asyn.steps_done == 3
    assert sync.consumed == asyn.consumed and len(set(sync.consumed)) == 6
    assert sync.weights_digest == asyn.weights_digest
    assert sync.summary["dropped_stale_groups"] == 0


def test_dead_environment_is_masked_counted_and_training_continues(tmp_path, math_server):
    rows = arithmetic_rows(40, 1)
    for r in rows[::2]:
        r["agent_ref"] = {"type": "responses_api_agents", "name": "dead_agent"}
    urls = {**math_server, "dead": "http://127.0.0.1:9"}  # nothing listens on the discard port
    tasks = make_tasks(rows, Routes({AGENT: "math", "dead_agent": "dead"}))
    res = run_grpo(small_cfg(tmp_path, "env.failed_rollout_retries=1", "grpo.async_grpo.max_trajectory_age_steps=1"),
                   tasks, [], urls, resume=False)
    s = res.summary
    assert res.steps_done == 3
    assert s["failed_samples"] > 0 and set(s["failures_by_class"]) == {"connection_error"}
    assert s["retried_scores"] >= s["failed_samples"]
    import json
    rows_logged = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    masked = [r["train/masked_frac"] for r in rows_logged if "train/masked_frac" in r]
    assert len(masked) == 3 and sum(masked) > 0 and min(masked) < 1  # failed samples masked, the rest trained
    # one weight version: trainer, buffer and generators agreed with the driver's step at every step
    assert [r["weights/version"] for r in rows_logged if "weights/version" in r] == [1.0, 2.0, 3.0]
    assert all(0 <= r["weights/generator_lag_max"] <= 1 for r in rows_logged if "weights/version" in r)


def test_env_server_killed_mid_run_masks_counts_and_training_finishes(tmp_path, math_server):
    """A second math server dies after step 2: its later rollouts fail with a class, are masked and
    counted; the rows of the live server keep training; the run reaches its last step and says so."""
    import json
    import threading
    import time

    import psutil

    from trainer.run_command import format_summary

    rows = arithmetic_rows(40, 3)
    for r in rows[1::2]:  # data order kept: every step holds one prompt of each server
        r["agent_ref"] = {"type": "responses_api_agents", "name": "doomed_agent"}
    steps = 10
    metrics = tmp_path / "metrics.jsonl"
    (tmp_path / "fleet_b").mkdir()
    with Fleet(["math"], log_dir=tmp_path / "fleet_b") as doomed:
        server_pid = doomed.servers["math"].process.pid
        pool = psutil.Process(server_pid).children(recursive=True)
        killed_after: list[int] = []

        def kill_after_step_2() -> None:
            while not killed_after:
                done = [json.loads(x)["step"] for x in metrics.read_text().splitlines()] if metrics.exists() else []
                if max(done, default=0) >= 2:
                    doomed.kill("math")
                    killed_after.append(max(done))
                time.sleep(0.02)

        watcher = threading.Thread(target=kill_after_step_2, daemon=True)
        watcher.start()
        try:
            res = run_grpo(small_cfg(tmp_path, f"grpo.max_num_steps={steps}", "data.shuffle=false",
                                     "env.failed_rollout_retries=1"),
                           make_tasks(rows, Routes({AGENT: "math", "doomed_agent": "doomed"})), [],
                           {**math_server, "doomed": doomed.urls["math"]}, resume=False)
        finally:
            killed_after.append(-1)
            watcher.join()
            for p in pool:  # the dead server's scoring pool, by pid
                try:
                    p.kill()
                except psutil.NoSuchProcess:
                    pass
    assert 2 <= killed_after[0] <= steps - 4
    s = res.summary
    assert res.steps_done == steps
    assert s["failed_samples"] > 0 and set(s["failures_by_class"]) == {"connection_error"}
    assert s["retried_scores"] >= s["failed_samples"]
    logged = {r["step"]: r for r in map(json.loads, metrics.read_text().splitlines()) if "train/failed_frac" in r}
    assert [logged[k]["train/failed_frac"] for k in (1, 2)] == [0.0, 0.0]  # before the kill
    # after it: the doomed server's half of every batch fails and is masked; the live half trains
    for k in range(killed_after[0] + 4, steps + 1):  # admitted only after the kill (max age 1)
        assert logged[k]["train/failed_frac"] == 0.5 and logged[k]["train/masked_frac"] == 0.5
        assert logged[k]["train/global_valid_seqs"] == 4 and logged[k]["train/reward/math"] >= 0
    text = format_summary(s)
    assert f"steps {steps}" in text and "failed samples (masked)" in text and "connection_error" in text

