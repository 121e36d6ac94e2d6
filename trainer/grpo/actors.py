"""Ray placement of the engine's components. The same code runs on a local Ray the driver starts
(default) or on a cluster it joins (``cluster.ray_address``); on a cluster the trainer and the
generators are spread over workers (SPREAD scheduling)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import ray

from trainer.config import MasterConfig
from trainer.grpo import interrupt
from trainer.grpo.replay_buffer import ReplayBuffer
from trainer.grpo.weight_sync import WeightTransport
from trainer.grpo.reward_worker import RewardWorker
from trainer.grpo.workers import GeneratorWorker, TrainerWorker
from trainer.rollout.task import Task


def init_ray(cfg: MasterConfig) -> bool:
    """Start or join Ray. Returns True when this call started it (the caller shuts it down)."""
    if ray.is_initialized():
        return False
    env = {"env_vars": {"OMP_NUM_THREADS": str(cfg.cluster.torch_threads_per_actor), "TOKENIZERS_PARALLELISM": "false",
                        "PYTHONPATH": os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))}}
    if cfg.cluster.ray_address:
        ray.init(address=cfg.cluster.ray_address, runtime_env=env, log_to_driver=False)
    else:
        # address="local": a new Ray of our own, even when RAY_ADDRESS is set or another Ray runs on
        # this machine (plain ray.init() would join that one and refuse num_cpus)
        ray.init(address="local", num_cpus=cfg.cluster.num_cpus or max(os.cpu_count() or 2, 4), include_dashboard=False,
                 runtime_env=env, log_to_driver=False, configure_logging=False)
    return True


def gpu_share(cfg: MasterConfig) -> dict[str, float]:
    """``num_gpus`` for the trainer and each generator that decodes on it: they share one GPU when
    ``policy.device`` resolves to CUDA (Ray sets CUDA_VISIBLE_DEVICES='' in an actor that asks for no
    GPU, so the share is what lets them see it); nothing on a CPU run."""
    from trainer.policy import resolve_device

    if resolve_device(cfg.policy.device).type != "cuda":
        return {}
    return {"num_gpus": 1.0 / (1 + cfg.cluster.num_generation_workers)}


def generator_gpu_share(cfg: MasterConfig) -> dict[str, float]:
    """A generator's share: none when its backend decodes elsewhere (a generation server) and loads
    its policy (the tokenizer and chat template) on the CPU."""
    from trainer.policy import resolve_device
    from trainer.rollout.generator import backend_class

    device = backend_class(cfg.policy.generation.backend).policy_device(cfg)
    return gpu_share(cfg) if resolve_device(device).type == "cuda" else {}


@dataclass
class Components:
    buffer: Any
    reward: Any
    trainer: Any
    generators: list[Any]


def launch(cfg: MasterConfig, train: list[Task], val: list[Task], urls: dict[str, Any],
           transport: WeightTransport) -> Components:
    """The actors of a run. The config and the tasks are handed over once: the config as the typed
    object the driver validated, the tasks through Ray's object store (every actor holds them; a
    group names its task by index)."""
    spread = {"scheduling_strategy": "SPREAD"} if cfg.cluster.ray_address else {}
    # Fractional CPUs: on a small machine all actors share the cores; the torch threads decide real use.
    buffer = ray.remote(num_cpus=0.01, max_concurrency=16)(ReplayBuffer).remote(
        [t.id for t in train], cfg.grpo.num_prompts_per_step,
        cfg.max_age, cfg.grpo.max_num_steps, seed=cfg.grpo.seed, shuffle=cfg.data.shuffle,
        max_num_epochs=cfg.grpo.max_num_epochs)
    train_ref, val_ref = ray.put(train), ray.put(val)
    reward = ray.remote(num_cpus=0.01, max_concurrency=64)(RewardWorker).remote(cfg, urls, buffer, train_ref, val_ref)
    placed = lambda res, gpu: {"resources": dict(res), **gpu} if res else {**spread, **gpu}  # noqa: E731 (custom resources pin the node)
    trainer = ray.remote(num_cpus=1, **placed(cfg.cluster.trainer_resources, gpu_share(cfg)))(TrainerWorker).remote(
        cfg, transport, urls, train_ref, val_ref, reward)
    generator_gpu = generator_gpu_share(cfg)
    generators = [ray.remote(num_cpus=1, max_concurrency=4, **placed(cfg.cluster.generator_resources, generator_gpu))(GeneratorWorker).remote(
        cfg, i, train_ref, buffer, reward, transport, urls) for i in range(cfg.cluster.num_generation_workers)]
    return Components(buffer, reward, trainer, generators)


def get(ref: Any, timeout_s: float, what: str) -> Any:
    """Every control call is bounded: a hung component raises instead of hanging the run.

    The wait polls in short slices so that the driver's signal handlers (Ctrl-C, SIGTERM) run
    within half a second even while a long call (warm start, a training step) is in progress."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        ready, _ = ray.wait([ref], timeout=max(0.0, min(0.5, left)))
        if ready:
            return ray.get(ref)
        interrupt.poll()
        if left <= 0:
            raise TimeoutError(f"{what} did not answer within {timeout_s:g}s (cluster.control_timeout_s)")


def kill_all(comps: Components | None) -> None:
    """Kill the engine's actors now (no graceful stop): used on the way out of a run."""
    if comps is None:
        return
    for handle in [*comps.generators, comps.trainer, comps.reward, comps.buffer]:
        try:
            ray.kill(handle)
        except Exception:
            pass
