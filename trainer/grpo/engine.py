"""The async GRPO driver loop (NeMo-RL `async_grpo_train`, reference §2.5).

Per step: wait for the full batch of step s (admission control already bounded its lag) ->
train -> publish weights version s+1 -> hand them to the generators *without draining them*
(in-flight update) -> metrics -> validation / checkpoint when due. ``grpo.async_grpo.enabled=false``
is the same loop with max age 0: batch s+1 can only be admitted by weights of version s+1.

A run (:class:`_Run`) in its parts: start the actors (:meth:`_Run.launch`), resume from the latest
checkpoint or warm start (:meth:`_Run.resume_or_warm_start`), the step loop (:meth:`_Run.train`,
one :meth:`_Run.step` each), the summary (:meth:`_Run.finish`), and on Ctrl-C / SIGTERM a final
checkpoint when the state allows one (:meth:`_Run.interrupted`); the same when the run cannot go on
(:class:`RunFailed`: a server the driver started exited — the servers ``watch`` checks and the
generation server the run starts —, a component failed or stopped answering). The driver only steers: the batch
goes from the buffer to the trainer by reference, validation samples from the trainer to the
reward actor.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from trainer.config import MasterConfig, to_yaml
from trainer.grpo import actors, checkpoint
from trainer.child_servers import ServerExited
from trainer.grpo.interrupt import NO_STOP, RunFailed, RunInterrupted, StopRequest, as_run_interrupted, first_line
from trainer.grpo.metrics import LAG_KEYS, MetricsLogger, lag_summary, read_jsonl
from trainer.grpo.versions import check_versions
from trainer.grpo.warm_start import target_missed
from trainer.grpo.weight_sync import WeightTransport, make_transport
from trainer.rollout.generation_server import GenerationServer
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


def run_grpo(cfg: MasterConfig, train: list[Task], val: list[Task], urls: dict[str, Any], *,
             resume: bool = True, stop: StopRequest | None = None,
             watch: Sequence[Callable[[], None]] = ()) -> RunResult:
    """Train; with ``stop`` (installed signal handlers) a SIGINT/SIGTERM ends the run with
    :class:`RunInterrupted` after a final checkpoint (when the state allows one) and full cleanup.
    ``watch``: checks of the servers behind ``urls`` that the caller started (``Fleet.check``); one
    that raises :class:`ServerExited` ends the run with :class:`RunFailed` the same way. Servers
    given by URL only are not watched: their samples fail as ``connection_error`` and are masked."""
    import ray
    from ray.exceptions import RayError

    run = _Run(cfg, stop or NO_STOP, watch)
    ray_was_up = ray.is_initialized()
    transport = run.transport()
    try:
        run.launch(train, val[: cfg.grpo.max_val_samples] if cfg.grpo.max_val_samples else val, urls, transport)
        start = run.resume_or_warm_start(resume)
        return run.finish(run.train(start))
    except KeyboardInterrupt as raised:
        exc = run.interrupted(raised)
        if exc is raised:
            raise
        raise exc from None
    except ServerExited as exited:
        tail = "\n".join([f"the last lines of {exited.log_path}:", *exited.log_tail]) if exited.log_tail else ""
        raise run.failed(RunFailed(f"{exited} during the run; {exited.where_to_look()}", tail)) from exited
    except RunFailed as failed:
        raise run.failed(failed)
    except (TimeoutError, RayError) as err:  # a component stopped answering, or its process died
        raise run.failed(RunFailed.of(err)) from err
    finally:
        with run.stop.deferred():  # a signal during cleanup must not cut it short (a second one forces exit)
            actors.kill_all(run.comps)
            if run.generation is not None:
                run.generation.stop()
            transport.close()
            if not ray_was_up and ray.is_initialized():  # we started (or were starting) it
                ray.shutdown()


@dataclass
class _Progress:
    """Where the run stands, for a clean stop: ``clean`` is False while a batch has been taken from
    the buffer but not trained (the buffer already counts it consumed), when no checkpoint can be cut."""
    steps_done: int = 0
    clean: bool = True
    last_checkpoint: int | None = None


class _Run:
    """One run on the driver: its actors, metrics logger, timers and where it stands."""

    def __init__(self, cfg: MasterConfig, stop: StopRequest, watch: Sequence[Callable[[], None]] = ()):
        self.cfg, self.stop, self.to = cfg, stop, cfg.cluster.control_timeout_s
        self.watch = list(watch)
        self.t_start = time.perf_counter()
        self.log_dir = Path(cfg.logger.log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        (self.log_dir / "config.yaml").write_text(to_yaml(cfg))
        self.ckpt_root = Path(cfg.checkpointing.checkpoint_dir or self.log_dir / "checkpoints")
        self.comps: actors.Components | None = None
        self.generation: GenerationServer | None = None  # the generation server this run started, if any
        self.logger: MetricsLogger | None = None
        self.bar: Any = None
        self.progress = _Progress()
        self.too_long: dict[str, list[str]] = {}
        self.waited = self.trained = self.synced = 0.0  # seconds over the loop
        self.lags: list[dict[str, float]] = []  # per-step async/* lag metrics, summarised at the end
        self.t_loop = 0.0

    # ---- start ---------------------------------------------------------------------------------
    def transport(self) -> WeightTransport:
        transport = make_transport(self.cfg.cluster.weight_transport, uuid.uuid4().hex[:8], bool(self.cfg.cluster.ray_address))
        self.stop.on_force(transport.close)
        if getattr(transport, "removed_stale", None):
            print(f"removed {len(transport.removed_stale)} weight folder(s) of dead runs from "
                  f"{transport.removed_stale[0].parent}", flush=True)
        return transport

    def launch(self, train: list[Task], val: list[Task], urls: dict[str, Any], transport: WeightTransport) -> None:
        self.generation = GenerationServer.for_run(self.cfg, self.log_dir)  # backend server without a URL
        if self.generation is not None:
            self.stop.on_force(self.generation.kill)
            self.cfg = self.generation.config  # the generators talk to it
        cfg = self.cfg
        actors.init_ray(cfg)
        self.stop.reinstall()
        self.comps = actors.launch(cfg, train, val, urls, transport)
        self.too_long = actors.get(self.comps.trainer.prompts_too_long.remote(), self.to, "trainer.prompts_too_long")
        if any(self.too_long.values()):
            print(f"prompts longer than policy.max_total_sequence_length={cfg.policy.max_total_sequence_length} allows "
                  f"(no room for one new token): "
                  + ", ".join(f"{len(ids)} {split} (ids {', '.join(ids[:5])}{', ...' if len(ids) > 5 else ''})"
                              for split, ids in self.too_long.items() if ids)
                  + "; they are not generated: their samples fail with class prompt_too_long and are masked", flush=True)
        self.logger = MetricsLogger(self.log_dir, wandb_enabled=cfg.logger.wandb_enabled,
                                    wandb_project=cfg.logger.wandb.project, wandb_name=cfg.logger.wandb.name,
                                    wandb_mode=cfg.logger.wandb.mode, tensorboard_enabled=cfg.logger.tensorboard_enabled,
                                    config=cfg.model_dump(mode="json"))

    def resume_or_warm_start(self, resume: bool) -> int:
        """The step training starts at: the latest checkpoint's, else 0 after the warm start."""
        cfg, comps, logger, to = self.cfg, self.comps, self.logger, self.to
        assert comps is not None and logger is not None
        found = checkpoint.latest(self.ckpt_root) if (resume and cfg.checkpointing.enabled) else None
        if found:  # a resumed run appends to its metrics file
            path, state = found
            start = state["step"]
            self.progress.steps_done = self.progress.last_checkpoint = start
            actors.get(comps.trainer.load.remote(str(path), start), to, "trainer.load")
            actors.get(comps.buffer.load_state_dict.remote(state["buffer"]), to, "buffer.load_state_dict")
            print(f"resumed from {path} at step {start} ({len(state['buffer']['consumed'])} prompts consumed, "
                  f"{len(state['buffer']['in_flight_prompts'])} in flight re-queued)", flush=True)
            return start
        logger.truncate()  # a fresh run starts a fresh metrics file
        if cfg.policy.warm_start.enabled:
            ws = _warm_start(cfg, comps, to)
            logger.log(ws, 0)
            print(f"warm start: {ws.get('warm_start/steps')} steps, loss {ws.get('warm_start/first_loss', 0):.3f} -> "
                  f"{ws.get('warm_start/final_loss', 0):.3f}, exact-match accuracy "
                  f"{ws.get('warm_start/final_accuracy', 0):.2f}", flush=True)
            missed = target_missed(cfg.policy.warm_start, ws)
            if missed:
                print(f"warning: {missed}", flush=True)
        return 0

    # ---- the step loop -------------------------------------------------------------------------
    def train(self, start: int) -> RunResult:
        cfg, comps = self.cfg, self.comps
        assert comps is not None and self.logger is not None
        _push_weights(comps, start, self.to)
        for gen in comps.generators:
            actors.get(gen.start.remote(), self.to, "generator.start")
        result = RunResult(steps_done=start, start_step=start)
        if cfg.grpo.val_at_start and start == 0:
            v = self.validate()
            self.logger.log(v, 0)
            result.val_history.append((0, v.get("validation/reward", 0.0)))
        self.t_loop = time.perf_counter()
        self.bar = _progress(cfg.grpo.max_num_steps, start, cfg.logger.progress_bar)
        for step in range(start, cfg.grpo.max_num_steps):
            self.step(step, result)
        self.bar.close()
        return result

    def step(self, step: int, result: RunResult) -> None:
        cfg, comps, logger, to = self.cfg, self.comps, self.logger, self.to
        assert comps is not None and logger is not None
        t0 = time.perf_counter()
        batch = self.wait_for_batch(step)
        t1 = time.perf_counter()
        m = actors.get(comps.trainer.train_step.remote(batch, step), to, "trainer.train_step")
        self.progress.steps_done, self.progress.clean = step + 1, True  # trainer and buffer agree on step + 1 again
        t2 = time.perf_counter()
        _push_weights(comps, step + 1, to)
        t3 = time.perf_counter()
        self.waited, self.trained, self.synced = self.waited + t1 - t0, self.trained + t2 - t1, self.synced + t3 - t2
        m.update(self.step_metrics(step, m))
        m.update({"timing/train/total_step_time": t3 - t0, "timing/train/idle/buffer_starvation": t1 - t0,
                  "timing/train/policy_training_wall": t2 - t1, "timing/train/weight_sync": t3 - t2})
        result.steps_done = step + 1
        self.lags.append({k: m[k] for k in LAG_KEYS})
        done = step + 1 == cfg.grpo.max_num_steps
        if (cfg.grpo.val_period > 0 and (step + 1) % cfg.grpo.val_period == 0) or (done and cfg.grpo.val_at_end):
            v = self.validate()
            m.update(v)
            result.val_history.append((step + 1, v.get("validation/reward", 0.0)))
        logger.log(m, step + 1)
        self.bar.set_postfix(reward=f"{m['train/reward']:.2f}",
                             val=f"{result.val_history[-1][1]:.2f}" if result.val_history else "-",
                             lag=f"{m['async/lag_mean']:.1f}", idle=f"{m['performance/trainer_idle_fraction']:.0%}")
        self.bar.update(1)
        if cfg.checkpointing.enabled and ((step + 1) % cfg.checkpointing.save_period == 0 or done):
            with self.stop.deferred():
                _save(cfg, comps, self.ckpt_root, step + 1, to)
                self.progress.last_checkpoint = step + 1
            self.stop.check()

    def wait_for_batch(self, step: int) -> Any:
        """A reference to the full batch of ``step``, once the buffer has it (NeMo-RL timing
        idle/buffer_starvation while it has not). The batch goes from the buffer to the trainer."""
        comps, to, stop = self.comps, self.to, self.stop
        assert comps is not None
        t0 = t_health = time.perf_counter()
        while True:
            stop.check()
            self.check_servers()  # a few waitpid calls: the server is named before its samples' failures pile up
            if actors.get(comps.buffer.ready.remote(step), to, "buffer.ready"):
                with stop.deferred():  # a taken batch is consumed: note it before a signal can cut in
                    batch = comps.buffer.take.remote(step)
                    self.progress.clean = False
                stop.check()
                return batch
            if time.perf_counter() - t_health > 1.0:
                _check_health(comps, to)
                t_health = time.perf_counter()
            time.sleep(0.01)
            if time.perf_counter() - t0 > to:
                raise TimeoutError(f"no complete batch for step {step} after {to:g}s; generators: "
                                   f"{[actors.get(g.get_stats.remote(), to, 'generator.get_stats') for g in comps.generators]}")

    def check_servers(self) -> None:
        """Raise :class:`ServerExited` for a server of this run that is no longer running."""
        for check in self.watch:
            check()
        if self.generation is not None:
            self.generation.check()

    def step_metrics(self, step: int, m: dict[str, Any]) -> dict[str, Any]:
        """The versions check and the run-level metrics of a trained step (``m``: the trainer's)."""
        comps, to = self.comps, self.to
        assert comps is not None
        # asked all at once: one round trip of latency per step, not one per actor
        grefs, rref, bref = [g.get_stats.remote() for g in comps.generators], comps.reward.get_stats.remote(), \
            comps.buffer.stats.remote()
        gstats = [actors.get(ref, to, "generator.get_stats") for ref in grefs]
        rstats, bstats = actors.get(rref, to, "reward.get_stats"), actors.get(bref, to, "buffer.stats")
        out = check_versions(step + 1, trainer=int(m.pop("weights/trainer_version")),
                             buffer_trained=bstats["trained_version"], generators=[g["version"] for g in gstats])
        elapsed = time.perf_counter() - self.t_loop
        return {**out,
                "timing/generation_total": sum(g["gen_seconds"] for g in gstats),
                "timing/reward_total": rstats["reward_seconds"],
                "performance/tokens_per_sec": sum(g["tokens"] for g in gstats) / max(elapsed, 1e-9),
                "performance/trainer_idle_fraction": self.waited / max(elapsed, 1e-9),
                "async/dropped_stale_groups": bstats["dropped_stale_groups"], "async/buffer_size": bstats["buffer_size"],
                "async/in_flight_weight_updates": sum(g["in_flight_updates"] for g in gstats),
                "env/failed_samples_total": rstats["failed"], "env/retried_total": rstats["retried"]}

    def validate(self) -> dict[str, float]:
        """Validation on the trainer (rollouts) and the reward actor (scores, metrics)."""
        assert self.comps is not None
        t0 = time.perf_counter()
        out = actors.get(self.comps.trainer.validate.remote(), self.to, "trainer.validate")
        return {**out, "timing/validation/total": time.perf_counter() - t0} if out else {}

    # ---- the end -------------------------------------------------------------------------------
    def finish(self, result: RunResult) -> RunResult:
        comps, to = self.comps, self.to
        assert comps is not None and self.logger is not None
        gstats = [actors.get(g.stop.remote(), to, "generator.stop") for g in comps.generators]
        rstats = actors.get(comps.reward.get_stats.remote(), to, "reward.get_stats")
        bstate = actors.get(comps.buffer.state_dict.remote(), to, "buffer.state_dict")
        result.consumed = bstate["consumed"]
        result.weights_digest = actors.get(comps.trainer.state_digest.remote(), to, "trainer.state_digest")
        loop_s = time.perf_counter() - self.t_loop
        result.wall_seconds = time.perf_counter() - self.t_start
        result.summary = {
            "steps": result.steps_done, "resumed_from": result.start_step, "wall_seconds": round(result.wall_seconds, 1),
            "loop_seconds": round(loop_s, 2), "generation_seconds": round(sum(g["gen_seconds"] for g in gstats), 2),
            "training_seconds": round(self.trained, 2), "trainer_wait_seconds": round(self.waited, 2),
            "weight_sync_seconds": round(self.synced, 2), "reward_seconds": round(rstats["reward_seconds"], 2),
            "trainer_idle_fraction": round(self.waited / max(loop_s, 1e-9), 3),
            "generated_tokens": sum(g["tokens"] for g in gstats),
            "in_flight_weight_updates": sum(g["in_flight_updates"] for g in gstats),
            "lag": lag_summary(self.lags),
            "dropped_stale_groups": actors.get(comps.buffer.stats.remote(), to, "buffer.stats")["dropped_stale_groups"],
            "failed_samples": rstats["failed"], "failures_by_class": rstats["failures_by_class"],
            "retried_scores": rstats["retried"],
            "prompts_too_long": {k: len(v) for k, v in self.too_long.items()},
            "validation": result.val_history,
        }
        self.logger.close()
        try:
            from trainer.grpo.plot import plot_reward_curve

            result.summary["reward_curve"] = str(plot_reward_curve(read_jsonl(self.log_dir / "metrics.jsonl"),
                                                                   self.log_dir / "reward_curve.png"))
        except Exception as exc:  # the plot is a convenience; never fail a finished run on it
            result.summary["reward_curve_error"] = str(exc)
        (self.log_dir / "summary.json").write_text(json.dumps(result.summary, indent=1) + "\n")
        return result

    def interrupted(self, raised: KeyboardInterrupt) -> RunInterrupted:
        """Stop on a signal: a final checkpoint when the trainer answers quickly and the state is
        consistent (otherwise the last one stands); returns the :class:`RunInterrupted` to raise."""
        exc = as_run_interrupted(raised, self.stop)
        why_not = self.final_checkpoint(exc)
        if why_not:
            print(f"driver: no final checkpoint ({why_not})", flush=True)
        return exc

    def failed(self, exc: RunFailed) -> RunFailed:
        """Stop because the run cannot go on: the final checkpoint as on a signal, and the full
        error (and why no checkpoint was written) in ``<log_dir>/error.log``."""
        why_not = self.final_checkpoint(exc)
        text = "\n\n".join(filter(None, [str(exc), exc.detail, why_not and f"no final checkpoint: {why_not}"]))
        path = self.log_dir / "error.log"
        path.write_text(text + "\n")
        exc.error_log = str(path)
        return exc

    def final_checkpoint(self, exc: RunInterrupted | RunFailed) -> str:
        """Fill in where the run stopped; write a checkpoint of that step when the trainer answers
        within 30 s and no batch is half-consumed. Returns why none was written when one was due."""
        if self.bar is not None:
            self.bar.close()
        p = self.progress
        exc.steps_done, exc.checkpoint_step = p.steps_done, p.last_checkpoint
        if self.comps is not None and self.cfg.checkpointing.enabled and p.clean and p.steps_done > (p.last_checkpoint or 0):
            try:
                with self.stop.deferred():
                    _save(self.cfg, self.comps, self.ckpt_root, p.steps_done, min(self.to, 30.0))
                exc.checkpoint_step, exc.checkpoint_written = p.steps_done, True
            except Exception as err:
                return f"{type(err).__name__}: {first_line(err)}"
        return ""


def _warm_start(cfg: MasterConfig, comps: actors.Components, to: float) -> dict[str, Any]:
    """The warm start on the trainer actor, a few seconds per call: a progress bar with its loss and
    exact-match accuracy, Ctrl-C within seconds, and every call bounded by the control timeout
    however many steps the warm start takes."""
    from trainer.progress import progress

    state = actors.get(comps.trainer.warm_start_begin.remote(), to, "trainer.warm_start_begin")
    with progress(state["num_steps"], desc="warm start", unit="step", enabled=cfg.logger.progress_bar) as bar:
        while "summary" not in state:
            state = actors.get(comps.trainer.warm_start_run.remote(min(5.0, to / 2)), to, "trainer.warm_start_run")
            bar.update(state["steps"] - bar.n)
            if state["loss"] is not None:
                bar.set_postfix(loss=f"{state['loss']:.3f}", acc=f"{state['accuracy']:.2f}", refresh=False)
    return state["summary"]


def _progress(total: int, initial: int, enabled: bool) -> Any:
    from trainer.progress import progress

    return progress(total, initial=initial, desc="GRPO", unit="step", enabled=enabled)


def _push_weights(comps: actors.Components, version: int, to: float) -> None:
    handle = actors.get(comps.trainer.publish_weights.remote(version), to, "trainer.publish_weights")
    for g in comps.generators:
        actors.get(g.receive_weights.remote(version, handle), to, "generator.receive_weights")


def _check_health(comps: actors.Components, to: float) -> None:
    for g in comps.generators:
        err = actors.get(g.get_stats.remote(), to, "generator.get_stats")["error"]
        if err:
            raise RunFailed(f"a generator stopped: {first_line(err)}", err)
    err = actors.get(comps.reward.get_stats.remote(), to, "reward.get_stats")["error"]
    if err:  # our own scoring code raised (environment failures are failure classes, not this)
        raise RunFailed(f"reward scoring raised an exception (a bug, not an environment failure): {first_line(err)}", err)


def _save(cfg: MasterConfig, comps: actors.Components, root: Path, step: int, to: float) -> None:
    stage = checkpoint.staging_dir(root, step)
    actors.get(comps.trainer.save.remote(str(stage)), to, "trainer.save")
    state = {"step": step, "buffer": actors.get(comps.buffer.state_dict.remote(), to, "buffer.state_dict")}
    checkpoint.finalize(root, stage, step, state, cfg.checkpointing.keep_top_k)
