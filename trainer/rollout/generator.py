"""The generator seam: what rollouts take their model turns from, decoding and weights in one object.

A :class:`Generator` owns both halves of generation:

* **decoding**: ``episodes(count, seed)`` gives the model turns of ``count`` episodes that run
  together, reproducibly for one seed (the engine's batches and its validation);
  ``generate(prompt_ids, params)`` takes one model turn on its own, batched with whatever else is in
  flight (``driver rollout``). Either way a turn comes back as a :class:`Generation`: the sampled
  token ids, the logprob each was sampled with and the weight version of each.
* **weights**: ``version`` is the weight version new tokens are sampled with;
  ``receive_weights(version, load)`` hands it new weights and returns at once (any thread): the
  backend loads them at its next safe point, between two decode steps when it runs in-flight
  updates, else when ``load_received_weights()`` is called between batches.

Backends are registered by name in :data:`BACKENDS` (``"module:Class"``) and built with
:func:`make_generator`; a backend is one module with one class implementing :class:`Generator`,
constructed as ``Class(policy, in_flight=..., **its own options)``.
``local`` (trainer.rollout.local_generator) decodes in this process with the one decode engine
(servers.model.engine, through trainer.rollout.decode); ``server`` (trainer.rollout.server_generator)
sends the turns to a generation server speaking vLLM's RL HTTP surface. A run picks one with
``policy.generation.backend`` (:func:`generator_for_run`).

A turn that cannot be generated for a reason outside the response (a generation server that is
down, overloaded or silent) raises :class:`GenerationFailed`: the episode ends with its failure
class and the sample is masked, as an environment failure is.
"""

from __future__ import annotations

import importlib
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Protocol

if TYPE_CHECKING:
    import torch

    from trainer.config import GenerationConfig, MasterConfig
    from trainer.policy import Policy

WeightLoader = Callable[[], "dict[str, torch.Tensor]"]  # fetches a state dict (e.g. from the weight transport)

BACKENDS: dict[str, str] = {
    "local": "trainer.rollout.local_generator:LocalGenerator",
    "server": "trainer.rollout.server_generator:ServerGenerator",
}
DEFAULT_BACKEND = "local"


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 64
    stop: tuple[str, ...] = ()

    @classmethod
    def for_row(cls, create_params: dict[str, Any], default: "SamplingParams") -> "SamplingParams":
        """NeMo-RL's rule: the run's temperature/top_p win; max tokens = min(row, run)."""
        row_max = create_params.get("max_output_tokens")
        max_new = min(default.max_new_tokens, row_max) if row_max else default.max_new_tokens
        return cls(default.temperature, default.top_p, max_new, default.stop)

    @classmethod
    def from_config(cls, gc: "GenerationConfig", greedy: bool = False) -> "SamplingParams":
        """``policy.generation``'s sampling; ``greedy`` (validation) uses ``val_temperature``, else 0."""
        temp = 0.0 if greedy and gc.val_temperature is None else (gc.val_temperature if greedy else gc.temperature)
        return cls(temperature=temp, top_p=gc.top_p, max_new_tokens=gc.max_new_tokens, stop=tuple(gc.stop_strings or ()))


@dataclass
class Generation:
    prompt_ids: list[int]
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    text: str = ""
    finish_reason: str = "length"  # "stop" (end token or stop string) | "length"

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"


class WeightInbox:
    """The newest (version, loader) a generator was handed and has not loaded yet; any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._item: tuple[int, WeightLoader] | None = None

    def put(self, version: int, load: WeightLoader) -> None:
        with self._lock:
            if self._item is None or version > self._item[0]:
                self._item = (version, load)

    def take(self) -> tuple[int, WeightLoader] | None:
        with self._lock:
            item, self._item = self._item, None
        return item


class GenerationFailed(RuntimeError):
    """A model turn the backend could not generate for a reason outside the response; the episode
    fails with ``failure_class`` (a :class:`servers.wire.FailureClass` value) and is masked."""

    def __init__(self, message: str, failure_class: str):
        super().__init__(message)
        self.failure_class = failure_class


class Turns(Protocol):
    """What one episode takes its model turns with (trainer.rollout.episode.run_episode)."""

    policy: Policy

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> Generation: ...


class EpisodeTurns(Protocol):
    """The model turns of a set of episodes that run together (:meth:`Generator.episodes`)."""

    def for_episode(self, index: int) -> Turns: ...

    def finished(self) -> None:
        """One episode will ask for no more turns (the others no longer wait for it)."""


class Generator(ABC):
    """Decoding and the weights it decodes with (see the module docstring)."""

    policy: Policy  # the chat template and tokenizer episodes render and tokenise with
    stats: dict[str, float]  # at least: generated_tokens, weight_updates, in_flight_updates, weight_load_seconds

    @property
    @abstractmethod
    def version(self) -> int:
        """The weight version new tokens are sampled with."""

    @abstractmethod
    def receive_weights(self, version: int, load: WeightLoader) -> None:
        """New weights: returns at once; loaded at the backend's next safe point (module docstring)."""

    @abstractmethod
    def load_received_weights(self) -> None:
        """Load the newest weights received and not loaded yet, now (between batches)."""

    @abstractmethod
    def episodes(self, count: int, seed: int, max_batch: int | None = None) -> EpisodeTurns:
        """The model turns of ``count`` episodes that run together, sampled from ``seed``: the same
        prompts give the same tokens on every run. ``max_batch`` bounds the sequences decoded at once."""

    @abstractmethod
    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> Generation:
        """One model turn, batched with whatever else is in flight."""

    def close(self) -> None:
        """Release what the backend holds (threads, connections)."""

    @classmethod
    def options_from_config(cls, cfg: "MasterConfig") -> dict[str, Any]:
        """The backend's own constructor options from a run config (:func:`generator_for_run`)."""
        return {}

    @classmethod
    def policy_device(cls, cfg: "MasterConfig") -> str:
        """Where a run's generator loads its policy: ``policy.device`` for a backend that decodes with
        it; a backend that needs only its tokenizer and chat template says ``cpu``."""
        return cfg.policy.device

    async def __aenter__(self) -> "Generator":
        return self

    async def __aexit__(self, *_: Any) -> None:
        import asyncio

        await asyncio.to_thread(self.close)


def backend_class(backend: str) -> type[Generator]:
    """The class registered as ``backend`` in :data:`BACKENDS`."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown generation backend {backend!r}; registered: {', '.join(sorted(BACKENDS))}")
    module, name = BACKENDS[backend].split(":")
    return getattr(importlib.import_module(module), name)


def make_generator(policy: Policy, backend: str = DEFAULT_BACKEND, *, in_flight: bool = False,
                   **options: Any) -> Generator:
    """The generator of ``backend`` (a :data:`BACKENDS` name) for ``policy``; ``in_flight``: load
    received weights between two decode steps; ``options`` are the backend's own (the local one:
    ``max_batch``, ``seed``, ``gather_s``, ``on_step``; the server one: ``url``, ``timeout_s``, ...)."""
    return backend_class(backend)(policy, in_flight=in_flight, **options)


def generator_for_run(policy: Policy, cfg: "MasterConfig", *, in_flight: bool = False) -> Generator:
    """The generator a run config asks for: ``policy.generation.backend`` with its own options."""
    cls = backend_class(cfg.policy.generation.backend)
    return cls(policy, in_flight=in_flight, **cls.options_from_config(cfg))
