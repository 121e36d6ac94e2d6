"""The generation backend over HTTP (``server``): model turns from a server speaking vLLM's RL surface.

The server is ``envs model serve --weight-transfer-config '{"backend": "disk"}'`` (the driver starts
one on loopback for the run, trainer.rollout.generation_server) or any URL that speaks the same
surface, such as ``vllm serve`` in dev mode (docs/model-server.md). Every call goes through
:class:`servers.model.rl_client.GenerationClient`.

Decoding. A turn is a ``/v1/completions`` request with the prompt's token ids; the server returns
the sampled ids (the end token or the token that completed a stop string included), the logprob
each was sampled with and, per token, the weight version that sampled it. The ids are used as
returned, never re-tokenised, so the token contiguity of multi-turn episodes holds exactly as with
the local backend (trainer.rollout.episode). The text of a turn is decoded here with the policy's
tokenizer, as the local backend does. :meth:`ServerGenerator.episodes` batches like the local
backend (:class:`~trainer.rollout.local_generator.LockstepGenerator`: every live episode's turn,
in episode order); rows of one batch with the same prompt and sampling (a GRPO group's first turns)
go as one request with ``n`` choices, the rest one request each, all at once, so the server
decodes them as one batch. Each request carries a seed drawn from the batch's seed: the same
admissions give the same tokens on every run (the server's sampler is counter-based).

Weights. :meth:`~ServerGenerator.receive_weights` keeps the newest (version, loader); the push is
vLLM's protocol: ``POST /pause?mode=keep`` (the batch in flight holds between two decode steps,
its KV cache kept), ``/start_weight_update``, ``/update_weights`` with a folder of safetensors
(vLLM's ``disk`` backend; on one machine a tmpfs, /dev/shm), ``/finish_weight_update`` with the
version as its label, ``POST /resume``. With ``in_flight`` the push starts as soon as weights
arrive (tokens after it carry the new version: the server says so per token); otherwise at
:meth:`~ServerGenerator.load_received_weights`, between batches. ``version`` (the policy's, as the
local backend keeps it) moves once the server has committed the label.

Failures never hang and never pass as output: a request the server cannot answer (dead,
overloaded, silent past ``timeout_s``) fails that turn with :class:`GenerationFailed` and the
client's failure class (``connection_error``, ``overloaded``, ``dependency_error``): the episode is
masked and counted. A failed weight push is kept and raised by the next
:meth:`~ServerGenerator.load_received_weights` or batch, which stops the generator (the engine's
driver then ends the run saying why) rather than sampling on with weights the trainer left behind.
"""

from __future__ import annotations

import asyncio
import os
import random
import tempfile
import threading
import time
from typing import TYPE_CHECKING, Any, Coroutine, TypeVar

from servers.model.rl_client import Completion, GenerationClient, GenerationServerError
from trainer.policy import Policy
from trainer.rollout.generator import (Generation, GenerationFailed, Generator, SamplingParams, WeightInbox,
                                      WeightLoader)
from trainer.rollout.local_generator import LockstepGenerator

if TYPE_CHECKING:
    from trainer.config import MasterConfig

T = TypeVar("T")
DEPENDENCY_ERROR = "dependency_error"  # servers.wire.FailureClass: a 5xx, or an answer that is no generation


def default_weights_dir() -> str:
    """A tmpfs where there is one (the push is then a memory copy), else the system temp dir."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()


class ServerGenerator(Generator):
    def __init__(self, policy: Policy, *, in_flight: bool = False, url: str, timeout_s: float = 300.0,
                 weights_dir: str | None = None, max_batch: int = 64):
        if not url:
            raise ValueError("the server generation backend needs the server's url")
        self.policy, self.in_flight, self.url, self.max_batch = policy, in_flight, url, max_batch
        self.weights_dir = weights_dir or default_weights_dir()
        self.stats: dict[str, float] = {"batches": 0, "sequences": 0, "requests": 0, "failed_requests": 0,
                                        "generated_tokens": 0, "decode_s": 0.0, "weight_updates": 0,
                                        "in_flight_updates": 0, "weight_load_seconds": 0.0}
        self.client = GenerationClient(url, timeout_s=timeout_s)
        self._stop_ids = sorted(policy.stop_token_ids)
        # tied weights once, under their first name: what the server's parameters are called
        self._names = [name for name, _ in policy.model.named_parameters()]
        self._received = WeightInbox()
        self._push_error: BaseException | None = None
        self._requests_in_flight = 0
        self._transfer_ready = False
        # One event loop of our own (HTTP session, pushes): turns come from a lockstep batch's worker
        # thread or the caller's loop, weights from whichever thread the engine calls us on.
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="verigym-generation-client", daemon=True)
        self._thread.start()
        self._push_lock = asyncio.Lock()  # bound to self._loop on first use (Python >= 3.10)

    @classmethod
    def options_from_config(cls, cfg: "MasterConfig") -> dict[str, Any]:
        s = cfg.policy.generation.server
        if not s.url:
            raise ValueError("policy.generation.backend=server without policy.generation.server.url: the driver "
                             "fills it in when it starts the server (trainer.rollout.generation_server)")
        return {"url": s.url, "timeout_s": s.timeout_s, "weights_dir": s.weights_dir,
                "max_batch": cfg.policy.generation_batch_size * cfg.grpo.num_generations_per_prompt}

    @classmethod
    def policy_device(cls, cfg: "MasterConfig") -> str:
        return "cpu"  # the server decodes; here only the tokenizer, the chat template and parameter names

    # ---- plumbing ---------------------------------------------------------------------------
    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on our loop from another thread and wait (the client's timeouts bound it)."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def close(self) -> None:
        if self._loop.is_closed():
            return
        try:
            self._call(self._close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            self._loop.close()

    async def _close(self) -> None:
        async with self._push_lock:  # a push under way ends first: the server is not left paused
            await self.client.close()

    # ---- weights ----------------------------------------------------------------------------
    @property
    def version(self) -> int:
        return self.policy.version

    def receive_weights(self, version: int, load: WeightLoader) -> None:
        self._received.put(version, load)
        if self.in_flight:
            asyncio.run_coroutine_threadsafe(self._push_kept(), self._loop)

    def load_received_weights(self) -> None:
        self._raise_push_error()
        self._call(self._push())
        self._raise_push_error()

    def _raise_push_error(self) -> None:
        if self._push_error is not None:
            raise self._push_error

    async def _push_kept(self) -> None:
        """An in-flight push: its error is kept for the generator's thread to raise."""
        try:
            await self._push()
        except BaseException as exc:  # noqa: BLE001 - raised by the next load_received_weights / batch
            self._push_error = exc

    async def _push(self) -> None:
        """Push the newest weights received, if newer than the server's: pause (keep) -> the four
        weight-transfer calls -> resume."""
        async with self._push_lock:
            received = self._received.take()
            if received is None or received[0] <= self.policy.version or self._push_error is not None:
                return
            version, load = received
            t0 = time.perf_counter()
            state = await asyncio.to_thread(load)
            tensors = {name: state[name] for name in self._names}
            in_flight = self._requests_in_flight > 0
            try:
                if not self._transfer_ready:
                    await self.client.init_weight_transfer({})
                    self._transfer_ready = True
                await self.client.pause("keep")
                try:
                    await self.client.push_weights(tensors, str(version), directory=self.weights_dir)
                finally:
                    await self.client.resume()
            except GenerationServerError as exc:
                raise GenerationServerError(f"generation server {self.url}: pushing weight version {version} failed "
                                            f"({exc.failure_class.value if exc.failure_class else 'refused'}): {exc}",
                                            status=exc.status, failure_class=exc.failure_class) from None
            self.policy.version = version
            self.stats["weight_load_seconds"] += time.perf_counter() - t0
            self.stats["weight_updates"] += 1
            self.stats["in_flight_updates"] += int(in_flight)

    # ---- decoding ---------------------------------------------------------------------------
    def episodes(self, count: int, seed: int, max_batch: int | None = None) -> LockstepGenerator:
        self._raise_push_error()
        seeds = random.Random(seed)
        return LockstepGenerator(self.policy, lambda prompts, params: self._call(self._decode(prompts, params, seeds)),
                                 count, max_batch or count or 1)

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> Generation:
        [result] = await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(
            self._decode([list(prompt_ids)], [params], random.Random()), self._loop))
        if isinstance(result, BaseException):
            raise result
        return result

    async def _decode(self, prompts: list[list[int]], params: list[SamplingParams],
                      seeds: random.Random) -> list[Generation | BaseException]:
        """One batch: rows with the same prompt and sampling as one request with ``n`` choices, every
        request at once; a failed request fails its rows only."""
        t0 = time.perf_counter()
        groups: dict[tuple[tuple[int, ...], SamplingParams], list[int]] = {}
        for i, (prompt, p) in enumerate(zip(prompts, params)):
            groups.setdefault((tuple(prompt), p), []).append(i)
        requests = [(rows, seeds.getrandbits(62)) for rows in groups.values()]
        replies = await asyncio.gather(*(self._request(prompts[rows[0]], params[rows[0]], len(rows), seed)
                                         for rows, seed in requests), return_exceptions=True)
        out: list[Generation | BaseException] = [GenerationFailed("no reply", DEPENDENCY_ERROR)] * len(prompts)
        for (rows, _), reply in zip(requests, replies):
            for j, row in enumerate(rows):
                out[row] = reply if isinstance(reply, BaseException) else reply[j]
        self.stats["batches"] += 1
        self.stats["sequences"] += len(prompts)
        self.stats["requests"] += len(requests)
        self.stats["failed_requests"] += sum(isinstance(r, BaseException) for r in replies)
        self.stats["generated_tokens"] += sum(len(g.token_ids) for g in out if isinstance(g, Generation))
        self.stats["decode_s"] += time.perf_counter() - t0
        return out

    async def _request(self, prompt: list[int], params: SamplingParams, n: int, seed: int) -> list[Generation]:
        sent_version = self.policy.version
        self._requests_in_flight += 1
        try:
            choices = await self.client.complete(prompt, max_tokens=params.max_new_tokens, temperature=params.temperature,
                                                 top_p=params.top_p, n=n, seed=seed, stop=params.stop,
                                                 stop_token_ids=self._stop_ids)
        except GenerationServerError as exc:
            if exc.failure_class is None:  # the server refused the request: our bug, not an outage
                raise
            raise GenerationFailed(f"generation server {self.url}: {exc}", exc.failure_class.value) from None
        finally:
            self._requests_in_flight -= 1
        if len(choices) != n:
            raise GenerationFailed(f"generation server {self.url}: {len(choices)} choices for n={n}", DEPENDENCY_ERROR)
        return [self._generation(prompt, c, sent_version) for c in choices]

    def _generation(self, prompt: list[int], c: Completion, sent_version: int) -> Generation:
        if c.finish_reason not in ("stop", "length"):  # "abort": someone paused the server with mode=abort
            raise GenerationFailed(f"generation server {self.url}: the request ended with finish_reason "
                                   f"{c.finish_reason!r}", DEPENDENCY_ERROR)
        if len(c.logprobs) != len(c.token_ids):
            raise GenerationFailed(f"generation server {self.url}: {len(c.token_ids)} tokens but {len(c.logprobs)} "
                                   "logprobs", DEPENDENCY_ERROR)
        # Per-token versions when the server gives them (envs model serve does); vLLM's /v1/completions
        # does not: then every token carries the version current when the request was sent.
        versions = [_version_number(v) for v in c.versions] if c.versions else [sent_version] * len(c.token_ids)
        return Generation(prompt_ids=list(prompt), token_ids=list(c.token_ids), logprobs=list(c.logprobs),
                          versions=versions, text=self.policy.decode(c.token_ids, skip_special_tokens=True),
                          finish_reason=c.finish_reason)


def _version_number(label: str) -> int:
    """The server's version label back as the engine's integer (-1 for a label it did not set)."""
    try:
        return int(label)
    except ValueError:
        return -1
