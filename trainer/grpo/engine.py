"""The async GRPO driver loop (NeMo-RL `async_grpo_train`, reference §2.5).

Per step: wait for the full batch of step s (admission control already bounded its lag) ->
train -> publish weights version s+1 -> hand them to the generators *without draining them*
(in-flight update) -> metrics -> validation / checkpoint when due. ``grpo.async_grpo.enabled=false``
is the same loop with max age 0: batch s+1 can only be admitted by weights of version s+1.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer.config import MasterConfig, WarmStartConfig, to_yaml
from trainer.grpo import actors, checkpoint
from trainer.grpo.interrupt import NO_STOP, StopRequest, as_run_interrupted
from trainer.grpo.metrics import MetricsLogger, read_jsonl
from trainer.grpo.versions import check_versions
from trainer.grpo.weight_sync import make_transport
from trainer.rollout.task import Task


@dataclass
class RunResult:
    steps_done: int
    start_step: int
    val_history: list[tuple[int, float]] = field(default_factory=list)
    wall_seconds: float = 0.0
    summary: dict[str, Any] = field(default_factory=dict)
    consumed: list[str] = field(default_factory=list)
    weights_digest: float = 0.0


def _warm_start(cfg: MasterConfig, comps: actors.Components, train_rows: list[Task], to: float) -> dict[str, Any]:
    """The warm start on the trainer actor, a few seconds per call: a progress bar with its loss and
    exact-match accuracy, Ctrl-C within seconds, and every call bounded by the control timeout
    however many steps the warm start takes."""
    from tqdm import tqdm

    state = actors.get(comps.trainer.warm_start_begin.remote(train_rows), to, "trainer.warm_start_begin")
    with tqdm(total=state["num_steps"], desc="warm start", unit="step", disable=not cfg.logger.progress_bar,
              dynamic_ncols=True) as bar:
        while "summary" not in state:
            state = actors.get(comps.trainer.warm_start_run.remote(min(5.0, to / 2)), to, "trainer.warm_start_run")
            bar.update(state["steps"] - bar.n)
            if state["loss"] is not None:
                bar.set_postfix(loss=f"{state['loss']:.3f}", acc=f"{state['accuracy']:.2f}", refresh=False)
    return state["summary"]


def _warm_start_target_missed(ws_cfg: WarmStartConfig, ws: dict[str, Any]) -> str | None:
    """What to tell the user when the warm start used all its steps short of its target: RL then
    starts from a weaker policy than the recipe assumes (often with no reward signal at all)."""
    if not ws.get("warm_start/steps") or ws["warm_start/steps"] < ws_cfg.num_steps:
        return None  # stopped early: a target was reached
    short = []
    if ws_cfg.target_accuracy is not None and ws["warm_start/final_accuracy"] < ws_cfg.target_accuracy:
        short.append(f"exact-match accuracy {ws['warm_start/final_accuracy']:.2f} < target {ws_cfg.target_accuracy}")
    if ws_cfg.target_loss is not None and ws["warm_start/final_loss"] > ws_cfg.target_loss:
        short.append(f"loss {ws['warm_start/final_loss']:.3f} > target {ws_cfg.target_loss}")
    if not short:
        return None
    return (f"the warm start used all {ws_cfg.num_steps} steps short of its target ({'; '.join(short)}); "
            "RL starts from a weaker policy than the recipe assumes: raise policy.warm_start.num_steps, or "
            "lower policy.warm_start.lr if the loss fell and then spiked back up (blends/README.md: tiny_tools)")


def _progress(total: int, initial: int, enabled: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc="GRPO", unit="step", disable=not enabled, dynamic_ncols=True)


def validate(cfg: MasterConfig, comps: actors.Components, val_rows: list[Task]) -> dict[str, float]:
    if not val_rows:
        return {}
    t0 = time.perf_counter()
    k = cfg.grpo.val_num_generations_per_prompt
    to = cfg.cluster.control_timeout_s
    samples = actors.get(comps.trainer.generate_validation.remote(val_rows, k), to, "trainer.generate_validation")
    tasks = [t for t in val_rows for _ in range(k)]
    samples = actors.get(comps.reward.score_samples.remote(samples, tasks), to, "reward.score_samples")
    ok = [s for s in samples if s.failure is None]
    out = {"validation/reward": sum(s.reward for s in ok) / max(len(ok), 1),
           "validation/failed_frac": 1 - len(ok) / max(len(samples), 1),
           "timing/validation/total": time.perf_counter() - t0}
    for env in sorted({s.env for s in ok}):
        es = [s.reward for s in ok if s.env == env]
        out[f"validation/reward/{env}"] = sum(es) / len(es)
    return out


@dataclass
class _Progress:
    """Where the run stands, for a clean stop: ``clean`` is False while a batch has been taken from
    the buffer but not trained (the buffer already counts it consumed), when no checkpoint can be cut."""
    steps_done: int = 0
    clean: bool = True
    last_checkpoint: int | None = None


def run_grpo(cfg: MasterConfig, train_rows: list[Task], val_rows: list[Task], urls: dict[str, Any], *,
             resume: bool = True, stop: StopRequest | None = None) -> RunResult:
    """Train; with ``stop`` (installed signal handlers) a SIGINT/SIGTERM ends the run with
    :class:`RunInterrupted` after a final checkpoint (when the state allows one) and full cleanup."""
    stop = stop or NO_STOP
    t_start = time.perf_counter()
    log_dir = Path(cfg.logger.log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    (log_dir / "config.yaml").write_text(to_yaml(cfg))
    ckpt_root = Path(cfg.checkpointing.checkpoint_dir or log_dir / "checkpoints")
    val_rows = val_rows[: cfg.grpo.max_val_samples] if cfg.grpo.max_val_samples else val_rows
    import ray

    ray_was_up = ray.is_initialized()
    transport = make_transport(cfg.cluster.weight_transport, uuid.uuid4().hex[:8], bool(cfg.cluster.ray_address))
    stop.on_force(transport.close)
    if getattr(transport, "removed_stale", None):
        print(f"removed {len(transport.removed_stale)} weight folder(s) of dead runs from {transport.removed_stale[0].parent}",
              flush=True)
    to = cfg.cluster.control_timeout_s
    comps = None
    progress = _Progress()
    bar = None
    try:
        actors.init_ray(cfg)
        stop.reinstall()
        comps = actors.launch(cfg, train_rows, urls, transport)
        too_long = {split: actors.get(comps.trainer.prompts_too_long.remote(rows), to, "trainer.prompts_too_long")
                    for split, rows in (("train", train_rows), ("validation", val_rows))}
        if any(too_long.values()):
            print(f"prompts longer than policy.max_total_sequence_length={cfg.policy.max_total_sequence_length} allows "
                  f"(no room for one new token): "
                  + ", ".join(f"{len(ids)} {split} (ids {', '.join(ids[:5])}{', ...' if len(ids) > 5 else ''})"
                              for split, ids in too_long.items() if ids)
                  + "; they are not generated: their samples fail with class prompt_too_long and are masked", flush=True)
        logger = MetricsLogger(log_dir, wandb_enabled=cfg.logger.wandb_enabled, wandb_project=cfg.logger.wandb.project,
                               wandb_name=cfg.logger.wandb.name, wandb_mode=cfg.logger.wandb.mode,
                               tensorboard_enabled=cfg.logger.tensorboard_enabled, config=cfg.model_dump(mode="json"))
        start = 0
        found = checkpoint.latest(ckpt_root) if (resume and cfg.checkpointing.enabled) else None
        if not found:
            logger.truncate()  # a fresh run starts a fresh metrics file; a resumed one appends
        if found:
            path, state = found
            start = state["step"]
            progress.steps_done = progress.last_checkpoint = start
            actors.get(comps.trainer.load.remote(str(path), start), to, "trainer.load")
            actors.get(comps.buffer.load_state_dict.remote(state["buffer"]), to, "buffer.load_state_dict")
            print(f"resumed from {path} at step {start} ({len(state['buffer']['consumed'])} prompts consumed, "
                  f"{len(state['buffer']['in_flight_prompts'])} in flight re-queued)", flush=True)
        elif cfg.policy.warm_start.enabled:
            ws = _warm_start(cfg, comps, train_rows, to)
            logger.log(ws, 0)
            print(f"warm start: {ws.get('warm_start/steps')} steps, loss {ws.get('warm_start/first_loss', 0):.3f} -> "
                  f"{ws.get('warm_start/final_loss', 0):.3f}, exact-match accuracy "
                  f"{ws.get('warm_start/final_accuracy', 0):.2f}", flush=True)
            missed = _warm_start_target_missed(cfg.policy.warm_start, ws)
            if missed:
                print(f"warning: {missed}", flush=True)
        _push_weights(comps, start, to)
        for gen in comps.generators:
            actors.get(gen.start.remote(), to, "generator.start")

        result = RunResult(steps_done=start, start_step=start)
        if cfg.grpo.val_at_start and start == 0:
            v = validate(cfg, comps, val_rows)
            logger.log(v, 0)
            result.val_history.append((0, v.get("validation/reward", 0.0)))
        total_wait = total_train = total_sync = 0.0
        lags: list[dict[str, float]] = []  # per-step async/* lag metrics, summarised at the end
        t_loop = time.perf_counter()
        bar = _progress(cfg.grpo.max_num_steps, start, cfg.logger.progress_bar)
        for step in range(start, cfg.grpo.max_num_steps):
            t0 = t_health = time.perf_counter()
            while True:  # buffer starvation (NeMo-RL timing idle/buffer_starvation)
                stop.check()
                with stop.deferred():  # a taken batch is consumed: note it before a signal can cut in
                    batch = actors.get(comps.buffer.take.remote(step), to, "buffer.take")
                    progress.clean = batch is None
                stop.check()
                if batch is not None:
                    break
                if time.perf_counter() - t_health > 1.0:
                    _check_health(comps, to)
                    t_health = time.perf_counter()
                time.sleep(0.01)
                if time.perf_counter() - t0 > to:
                    raise TimeoutError(f"no complete batch for step {step} after {to:g}s; generators: "
                                       f"{[actors.get(g.get_stats.remote(), to, 'generator.get_stats') for g in comps.generators]}")
            t1 = time.perf_counter()
            m = actors.get(comps.trainer.train_step.remote(batch, step), to, "trainer.train_step")
            progress.steps_done, progress.clean = step + 1, True  # trainer and buffer agree on step + 1 again
            t2 = time.perf_counter()
            _push_weights(comps, step + 1, to)
            t3 = time.perf_counter()
            total_wait, total_train, total_sync = total_wait + t1 - t0, total_train + t2 - t1, total_sync + t3 - t2
            gstats = [actors.get(g.get_stats.remote(), to, "generator.get_stats") for g in comps.generators]
            rstats = actors.get(comps.reward.get_stats.remote(), to, "reward.get_stats")
            bstats = actors.get(comps.buffer.stats.remote(), to, "buffer.stats")
            m.update(check_versions(step + 1, trainer=int(m.pop("weights/trainer_version")),
                                    buffer_trained=bstats["trained_version"], generators=[g["version"] for g in gstats]))
            elapsed = time.perf_counter() - t_loop
            gen_tokens = sum(g["tokens"] for g in gstats)
            m.update({
                "timing/train/total_step_time": t3 - t0, "timing/train/idle/buffer_starvation": t1 - t0,
                "timing/train/policy_training_wall": t2 - t1, "timing/train/weight_sync": t3 - t2,
                "timing/generation_total": sum(g["gen_seconds"] for g in gstats),
                "timing/reward_total": rstats["reward_seconds"],
                "performance/tokens_per_sec": gen_tokens / max(elapsed, 1e-9),
                "performance/trainer_idle_fraction": total_wait / max(elapsed, 1e-9),
                "async/dropped_stale_groups": bstats["dropped_stale_groups"], "async/buffer_size": bstats["buffer_size"],
                "async/in_flight_weight_updates": sum(g["in_flight_updates"] for g in gstats),
                "env/failed_samples_total": rstats["failed"], "env/retried_total": rstats["retried"],
            })
            result.steps_done = step + 1
            lags.append({k: m[k] for k in _LAG_KEYS})
            done = step + 1 == cfg.grpo.max_num_steps
            if (cfg.grpo.val_period > 0 and (step + 1) % cfg.grpo.val_period == 0) or (done and cfg.grpo.val_at_end):
                v = validate(cfg, comps, val_rows)
                m.update(v)
                result.val_history.append((step + 1, v.get("validation/reward", 0.0)))
            logger.log(m, step + 1)
            bar.set_postfix(reward=f"{m['train/reward']:.2f}", val=f"{result.val_history[-1][1]:.2f}" if result.val_history else "-",
                            lag=f"{m['async/lag_mean']:.1f}", idle=f"{m['performance/trainer_idle_fraction']:.0%}")
            bar.update(1)
            if cfg.checkpointing.enabled and ((step + 1) % cfg.checkpointing.save_period == 0 or done):
                with stop.deferred():
                    _save(cfg, comps, ckpt_root, step + 1, to)
                    progress.last_checkpoint = step + 1
                stop.check()
        bar.close()
        gstats = [actors.get(g.stop.remote(), to, "generator.stop") for g in comps.generators]
        rstats = actors.get(comps.reward.get_stats.remote(), to, "reward.get_stats")
        bstate = actors.get(comps.buffer.state_dict.remote(), to, "buffer.state_dict")
        result.consumed = bstate["consumed"]
        result.weights_digest = actors.get(comps.trainer.state_digest.remote(), to, "trainer.state_digest")
        loop_s = time.perf_counter() - t_loop
        gen_s = sum(g["gen_seconds"] for g in gstats)
        result.wall_seconds = time.perf_counter() - t_start
        result.summary = {
            "steps": result.steps_done, "resumed_from": start, "wall_seconds": round(result.wall_seconds, 1),
            "loop_seconds": round(loop_s, 2), "generation_seconds": round(gen_s, 2),
            "training_seconds": round(total_train, 2), "trainer_wait_seconds": round(total_wait, 2),
            "weight_sync_seconds": round(total_sync, 2), "reward_seconds": round(rstats["reward_seconds"], 2),
            "trainer_idle_fraction": round(total_wait / max(loop_s, 1e-9), 3),
            "generated_tokens": sum(g["tokens"] for g in gstats),
            "in_flight_weight_updates": sum(g["in_flight_updates"] for g in gstats),
            "lag": lag_summary(lags),
            "dropped_stale_groups": actors.get(comps.buffer.stats.remote(), to, "buffer.stats")["dropped_stale_groups"],
            "failed_samples": rstats["failed"], "failures_by_class": rstats["failures_by_class"],
            "retried_scores": rstats["retried"],
            "prompts_too_long": {k: len(v) for k, v in too_long.items()},
            "validation": result.val_history,
        }
        logger.close()
        try:
            from trainer.grpo.plot import plot_reward_curve

            result.summary["reward_curve"] = str(plot_reward_curve(read_jsonl(log_dir / "metrics.jsonl"), log_dir / "reward_curve.png"))
        except Exception as exc:  # the plot is a convenience; never fail a finished run on it
            result.summary["reward_curve_error"] = str(exc)
        (log_dir / "summary.json").write_text(json.dumps(result.summary, indent=1) + "\n")
        return result
    except KeyboardInterrupt as raised:
        exc = as_run_interrupted(raised, stop)
        if bar is not None:
            bar.close()
        exc.steps_done, exc.checkpoint_step = progress.steps_done, progress.last_checkpoint
        if (comps is not None and cfg.checkpointing.enabled and progress.clean
                and progress.steps_done > (progress.last_checkpoint or 0)):
            try:  # a final checkpoint, when the trainer answers quickly; otherwise the last one stands
                with stop.deferred():
                    _save(cfg, comps, ckpt_root, progress.steps_done, min(to, 30.0))
                exc.checkpoint_step, exc.checkpoint_written = progress.steps_done, True
            except Exception as err:
                print(f"driver: no final checkpoint ({type(err).__name__}: {err})", flush=True)
        if exc is raised:
            raise
        raise exc from None
    finally:
        with stop.deferred():  # a signal during cleanup must not cut it short (a second one forces exit)
            actors.kill_all(comps)
            transport.close()
            if not ray_was_up and ray.is_initialized():  # we started (or were starting) it
                ray.shutdown()


_LAG_KEYS = ("async/lag_mean", "async/lag_max", "async/token_lag_mean", "async/token_lag_max",
             "async/mixed_version_samples_frac")


def lag_summary(lags: list[dict[str, float]]) -> dict[str, float]:
    """The run's policy lag: mean/max over steps of the group lag (trained step - version that started
    the group) and token lag (trained step - version that sampled the token), and the share of samples
    whose tokens came from more than one weight version (what in-flight updates produce)."""
    if not lags:
        return {}
    mean = lambda k: round(sum(x[k] for x in lags) / len(lags), 3)  # noqa: E731
    return {"group_lag_mean": mean("async/lag_mean"), "group_lag_max": max(x["async/lag_max"] for x in lags),
            "token_lag_mean": mean("async/token_lag_mean"), "token_lag_max": max(x["async/token_lag_max"] for x in lags),
            "mixed_version_samples_frac": mean("async/mixed_version_samples_frac"),
            "steps_with_mixed_versions": sum(x["async/mixed_version_samples_frac"] > 0 for x in lags)}


def _push_weights(comps: actors.Components, version: int, to: float) -> None:
    handle = actors.get(comps.trainer.publish_weights.remote(version), to, "trainer.publish_weights")
    for g in comps.generators:
        actors.get(g.receive_weights.remote(version, handle), to, "generator.receive_weights")


def _check_health(comps: actors.Components, to: float) -> None:
    for g in comps.generators:
        err = actors.get(g.get_stats.remote(), to, "generator.get_stats")["error"]
        if err:
            raise RuntimeError(f"a generator died: {err}")
    err = actors.get(comps.reward.get_stats.remote(), to, "reward.get_stats")["error"]
    if err:  # our own scoring code raised (environment failures are failure classes, not this)
        raise RuntimeError(f"reward scoring raised an exception (a bug, not an environment failure):\n{err}")


def _save(cfg: MasterConfig, comps: actors.Components, root: Path, step: int, to: float) -> None:
    stage = checkpoint.staging_dir(root, step)
    actors.get(comps.trainer.save.remote(str(stage)), to, "trainer.save")
    state = {"step": step, "buffer": actors.get(comps.buffer.state_dict.remote(), to, "buffer.state_dict")}
    checkpoint.finalize(root, stage, step, state, cfg.checkpointing.keep_top_k)
