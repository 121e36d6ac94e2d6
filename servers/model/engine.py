"""The repo's one decode engine: a batch of sequences from prompt ids to sampled ids, logprobs and
the weight version of every token. ``envs model serve`` (judges, GenRM, the tiny demo, the built-in
trainer's generation server) decodes with it, and so does the trainer's in-process generator.

One batch, step by step:

1. **prefill** — distinct prompts run once (a GRPO group's K rows share one prompt), right-aligned
   in the decoder's KV cache, then copied to every row that has them; the first token of every
   row is sampled from the prefill's logits;
2. **decode steps** — one token per row per step. Everything a step needs lives on the device in
   a per-shape :class:`_StepState` (next tokens, positions, the write slot, per-row sampling
   parameters and seeds, stop-token table, done flags, output buffers), and the step updates it
   there: no host round trip per token. On a GPU with the static decoder the whole step is one
   captured CUDA graph (:mod:`servers.model.step_graph`); elsewhere the same function runs
   eagerly. The host reads the device back only every ``sync_every`` steps — to stop once every
   row is done and to look for stop strings (text needs the tokenizer) — and trims each row to
   its end afterwards (a row that ended keeps decoding a few wasted steps; never wrong tokens).
3. **between two steps** — the caller's ``on_step`` hook (the trainer's in-flight weight swap)
   and the server's :class:`StepGate` (``/pause?mode=keep`` parks the batch here, ``mode=abort``
   ends it). Each step is launched holding :attr:`DecodeEngine.lock`, so a weight update (which
   takes the same lock) lands between two steps, and every token is stamped with the version
   read when its step was launched. Device work is stream-ordered, so a weight copy issued after
   a launch cannot change the weights that launch reads.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

from servers.model.decoder import HFDecoder, StaticDecoder, static_decoder_problem
from servers.model.loading import model_stop_ids
from servers.model.sampling import SamplerFlags, SamplingParams, SequenceOutput, prompt_logprobs, sample
from servers.model.step_graph import GraphCache

OnStep = Callable[[int], None]


@dataclass
class EngineRequest:
    prompt_ids: list[int]
    params: SamplingParams


class StepGate:
    """What the server tells a running batch between two decode steps: go on, wait (paused with
    ``keep``), or stop (``abort``)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._paused = False
        self._abort = False
        self._parked = False
        self._busy = False

    def passes(self) -> bool:
        """Called by the engine between steps: blocks while paused; False when the batch must end."""
        with self._cond:
            if self._paused and not self._abort:
                self._parked = True
                self._cond.notify_all()
                while self._paused and not self._abort:
                    self._cond.wait()
                self._parked = False
            return not self._abort

    def busy(self, value: bool) -> None:
        with self._cond:
            self._busy = value
            if not value:
                self._abort = False  # an abort ends the batch it was meant for, not the next one
            self._cond.notify_all()

    def pause(self, abort: bool = False) -> None:
        with self._cond:
            self._paused = True
            self._abort = self._abort or abort
            self._cond.notify_all()

    def resume(self) -> None:
        with self._cond:
            self._paused = False
            self._abort = False
            self._cond.notify_all()

    def wait_quiet(self, timeout: float | None = None) -> bool:
        """Block until no step is running: the batch is parked at the gate, or there is none."""
        with self._cond:
            return self._cond.wait_for(lambda: self._parked or not self._busy, timeout)

    @property
    def paused(self) -> bool:
        return self._paused


class _StepState:
    """Device tensors of one batch shape; a captured step reads and writes exactly these."""

    def __init__(self, rows: int, steps: int, stop_width: int, top_k: int, device: torch.device):
        long = dict(dtype=torch.long, device=device)
        self.next_tokens = torch.zeros(rows, **long)
        self.positions = torch.zeros(rows, **long)
        self.slot = torch.zeros(1, **long)
        self.step = torch.zeros(1, **long)
        self.temperature = torch.ones(rows, device=device)
        self.top_p = torch.ones(rows, device=device)
        self.seeds = torch.zeros(rows, **long)
        self.counts = torch.zeros(rows, **long)
        self.max_new = torch.zeros(rows, **long)
        self.stop_ids = torch.full((rows, stop_width), -1, **long)
        self.done = torch.zeros(rows, dtype=torch.bool, device=device)
        self.tokens = torch.zeros(rows, steps, **long)
        self.logprobs = torch.zeros(rows, steps, device=device)
        self.top_ids = torch.zeros(rows, steps, top_k, **long) if top_k else None
        self.top_lps = torch.zeros(rows, steps, top_k, device=device) if top_k else None


def _bucket(n: int, lo: int = 8) -> int:
    size = lo
    while size < n:
        size *= 2
    return size


class DecodeEngine:
    """Decodes batches of :class:`EngineRequest` on ``model``; one batch at a time (see the module doc).

    ``lock`` / ``version``: whoever swaps weights shares the lock and says what the version is (the
    trainer passes its policy's); by default the engine has its own and a string label
    :attr:`weight_version` that the weight-transfer routes set. ``graphs``: capture decode steps as
    CUDA graphs (default: on CUDA with the static decoder; ``--enforce-eager`` turns it off).
    ``compile``: the decode step goes through ``torch.compile`` (inductor) before it is captured or
    run — the step's elementwise work (RMSNorm, RoPE, SiLU, residual adds, the sampler's passes over
    the vocabulary) fused into a few kernels. The first batch of each new shape pays the compile
    (seconds on CPU, tens of seconds for a 24-layer model on a GPU); after a second shape the batch
    dimension is compiled dynamic, so later shapes reuse it. Static decoder only.
    """

    def __init__(self, model: Any, tokenizer: Any, *, lock: Any = None, version: Callable[[], Any] | None = None,
                 graphs: bool | None = None, compile: bool = False, sync_every: int = 8,
                 stop_token_ids: list[int] | None = None):
        self.model, self.tokenizer = model, tokenizer
        self.lock = lock if lock is not None else threading.RLock()
        self.weight_version: Any = "default"  # vLLM's label until one is set
        self._version = version or (lambda: self.weight_version)
        self.sync_every = max(1, sync_every)
        self.stop_token_ids = sorted(set(stop_token_ids if stop_token_ids is not None else model_stop_ids(model, tokenizer)))
        self.max_context = int(getattr(model.config, "max_position_embeddings", 0) or 4096)
        self.static_problem = static_decoder_problem(model)
        self.decoder: StaticDecoder | HFDecoder = StaticDecoder(model) if self.static_problem is None else HFDecoder(model)
        if compile and self.static_problem is not None:
            raise ValueError(f"compiled decode steps need the static decoder, which cannot run this model: "
                             f"{self.static_problem}")
        self.compile = compile
        on_cuda = self.decoder.device.type == "cuda"
        self.use_graphs = bool(on_cuda and isinstance(self.decoder, StaticDecoder) and (graphs is None or graphs))
        self.graphs = GraphCache(size=4)  # each captured step pins its own memory pool
        self._states: dict[tuple, _StepState] = {}
        # A fast tokenizer is one Rust object whose state calls mutate; two threads in it at once fail
        # ("Already borrowed"). Everyone using this tokenizer (request threads, this engine) takes this.
        self.tokenizer_lock = threading.Lock()
        self.stats = {"batches": 0, "sequences": 0, "generated_tokens": 0, "decode_steps": 0, "prefill_s": 0.0,
                      "decode_s": 0.0, "host_syncs": 0}

    @property
    def device(self) -> torch.device:
        return self.decoder.device

    @property
    def kind(self) -> str:
        """What decodes here, in words (``/health``, the benchmark)."""
        if isinstance(self.decoder, HFDecoder):
            return f"transformers forward (dynamic cache; {self.static_problem})"
        kind = "static KV cache" + (", CUDA graphs" if self.use_graphs and not self.graphs.failed else ", eager steps")
        return kind + (", torch.compile" if self.compile else "")

    def version(self) -> Any:
        return self._version()

    # ---- one batch ----------------------------------------------------------------------
    @torch.no_grad()
    def run(self, requests: list[EngineRequest], *, on_step: OnStep | None = None,
            gate: StepGate | None = None) -> list[SequenceOutput]:
        if not requests:
            return []
        if any(not r.prompt_ids for r in requests):
            raise ValueError("every prompt needs at least one token")
        if gate is not None:
            gate.busy(True)
        try:
            return self._run(requests, on_step, gate)
        finally:
            if gate is not None:
                gate.busy(False)

    def _run(self, requests: list[EngineRequest], on_step: OnStep | None, gate: StepGate | None
             ) -> list[SequenceOutput]:
        params = [r.params for r in requests]
        prompts = [list(r.prompt_ids) for r in requests]
        B, P = len(prompts), max(len(p) for p in prompts)
        max_new = [max(0, min(p.max_new_tokens, self.max_context - len(ids))) for p, ids in zip(params, prompts)]
        outputs = [SequenceOutput(prompt_ids=p) for p in prompts]
        T = max(max_new)
        if T == 0 and all(p.prompt_logprobs is None for p in params):
            return outputs
        flags = SamplerFlags.of(params)
        stops = [[] if p.ignore_eos else list(self.stop_token_ids) for p in params]
        for row, p in zip(stops, params):
            row += [t for t in p.stop_token_ids if t not in row]
        L = min(_bucket(P + max(T, 1)), max(self.max_context, P + max(T, 1)))
        key = (B, L, _bucket(max(len(s) for s in stops) or 1, 1), flags.key())
        if isinstance(self.decoder, StaticDecoder) and self.decoder.ensure_capacity(B, L):
            self.graphs.clear()
            self._states.clear()
        st = self._states.get(key)
        if st is None:
            st = self._states[key] = _StepState(B, L, key[2], flags.top_k, self.device)
        step_fn = self._step_fn(st, B, L, flags)
        launch = None
        if self.use_graphs:  # before the prefill: a capture's warm-up steps write the cache. Under the lock:
            with self.lock:  # another thread's CUDA work (a weight copy) is not allowed during a capture
                launch = self.graphs.get(key, lambda: step_fn)
        launch = launch or step_fn

        if on_step is not None:
            on_step(0)
        if gate is not None and not gate.passes():
            for o in outputs:
                o.finish_reason = "abort"
            return outputs
        t0 = time.perf_counter()
        with self.lock:
            version = self.version()
            logits, prompt_lps = self._prefill(prompts, params, P, L)
            self._fill_state(st, prompts, params, max_new, stops, P)
            self._record(st, logits, flags)
        self.stats["prefill_s"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        versions = [version]
        checked = {i: 0 for i, p in enumerate(params) if p.stop}  # per stop-string row: tokens looked at
        stopped: dict[int, tuple[int, str]] = {}
        aborted = False
        step = 1
        while step < T:
            if step % self.sync_every == 0 and self._sync(st, step, params, checked, stopped):
                break
            if on_step is not None:
                on_step(step)
            if gate is not None and not gate.passes():
                aborted = True
                break
            with self.lock:
                versions.append(self.version())
                launch()
            step += 1
            self.stats["decode_steps"] += 1
        self._sync(st, step, params, checked, stopped)
        self.stats["decode_s"] += time.perf_counter() - t0
        return self._collect(st, outputs, params, versions, stopped, prompt_lps, aborted, step)

    def _step_fn(self, st: _StepState, rows: int, slots: int, flags: SamplerFlags) -> Callable[[], None]:
        decoder = self.decoder

        def step() -> None:
            logits = decoder.step(st.next_tokens, st.positions, st.slot, rows, slots)
            st.positions += 1
            st.slot += 1
            self._record(st, logits, flags)

        return torch.compile(step) if self.compile else step

    @staticmethod
    def _record(st: _StepState, logits: torch.Tensor, flags: SamplerFlags) -> None:
        """Sample this step's token of every row and book it, on the device."""
        tokens, lps, top_ids, top_lps = sample(logits, st.temperature, st.top_p, st.seeds, st.counts, flags)
        st.tokens.index_copy_(1, st.step, tokens.unsqueeze(1))
        st.logprobs.index_copy_(1, st.step, lps.unsqueeze(1))
        if st.top_ids is not None and top_ids is not None and st.top_lps is not None and top_lps is not None:
            st.top_ids.index_copy_(1, st.step, top_ids.unsqueeze(1))
            st.top_lps.index_copy_(1, st.step, top_lps.unsqueeze(1))
        live = ~st.done
        st.counts += live
        ended = (tokens.unsqueeze(1) == st.stop_ids).any(dim=1) | (st.counts >= st.max_new)
        st.done |= live & ended
        st.next_tokens.copy_(tokens)
        st.step += 1

    def _prefill(self, prompts: list[list[int]], params: list[SamplingParams], P: int, L: int
                 ) -> tuple[torch.Tensor, list[list[dict[int, tuple[float, int]] | None] | None]]:
        index: dict[tuple[int, ...], int] = {}
        owner = [index.setdefault(tuple(p), len(index)) for p in prompts]
        unique = list(index)
        U, device = len(unique), self.device
        ids = torch.full((U, P), int(self.tokenizer.pad_token_id or 0), dtype=torch.long)
        valid = torch.zeros((U, P), dtype=torch.bool)
        for u, p in enumerate(unique):
            ids[u, P - len(p):] = torch.tensor(p, dtype=torch.long)
            valid[u, P - len(p):] = True
        ids, valid = ids.to(device), valid.to(device)
        positions = (valid.long().cumsum(-1) - 1).clamp(min=0)
        want_prompt = [p.prompt_logprobs for p in params]
        need_all = any(k is not None for k in want_prompt)
        logits = self.decoder.prefill(ids, positions, valid, L, all_logits=need_all)
        prompt_lps: list[Any] = [None] * len(prompts)
        if need_all:
            for row, k in enumerate(want_prompt):
                if k is not None:
                    u = owner[row]
                    prompt_lps[row] = prompt_logprobs(logits[u, P - len(unique[u]):], unique[u], k)
            logits = logits[:, -1]
        rows = torch.tensor(owner, device=device)
        if U != len(prompts):
            self.decoder.expand_rows(rows)
            logits = logits.index_select(0, rows)
        return logits, prompt_lps

    def _fill_state(self, st: _StepState, prompts: list[list[int]], params: list[SamplingParams],
                    max_new: list[int], stops: list[list[int]], P: int) -> None:
        device = self.device
        seeds = [p.seed if p.seed is not None else secrets.randbits(62) for p in params]
        st.positions.copy_(torch.tensor([len(p) for p in prompts], device=device))
        st.slot.fill_(P)
        st.step.zero_()
        st.temperature.copy_(torch.tensor([p.temperature for p in params], device=device))
        st.top_p.copy_(torch.tensor([p.top_p for p in params], device=device))
        st.seeds.copy_(torch.tensor(seeds, dtype=torch.long, device=device))
        st.counts.zero_()
        st.max_new.copy_(torch.tensor(max_new, device=device))
        table = torch.full(st.stop_ids.shape, -1, dtype=torch.long)
        for i, row in enumerate(stops):
            table[i, :len(row)] = torch.tensor(row, dtype=torch.long)
        st.stop_ids.copy_(table.to(device))
        st.done.copy_(torch.tensor([m == 0 for m in max_new], device=device))

    def _sync(self, st: _StepState, step: int, params: list[SamplingParams], checked: dict[int, int],
              stopped: dict[int, tuple[int, str]]) -> bool:
        """Read the device back: look for stop strings in the new tokens; True when every row is done."""
        self.stats["host_syncs"] += 1
        rows = [r for r in checked if r not in stopped]
        if rows:
            counts = st.counts.tolist()
            window = {r: max(len(s) for s in params[r].stop) + 8 for r in rows}
            lo = max(0, min(checked[r] - window[r] for r in rows))
            tail = st.tokens[rows, lo:step].tolist()
            ended = []
            with self.tokenizer_lock:
                for r, ids in zip(rows, tail):
                    upto = min(step, counts[r])
                    found = self._find_stop(ids, lo, checked[r], upto, window[r], params[r].stop)
                    checked[r] = max(checked[r], upto)
                    if found is not None:
                        stopped[r] = found
                        ended.append(r)
            if ended:
                st.done.index_fill_(0, torch.tensor(ended, device=self.device), True)
        return bool(st.done.all())

    def _find_stop(self, ids: list[int], offset: int, start: int, upto: int, window: int,
                   stops: tuple[str, ...]) -> tuple[int, str] | None:
        """The first token index in ``[start, upto)`` whose text, with the tokens just before it,
        contains a stop string (``ids[i - offset]`` is token ``i``). The text checked is the last
        ``window`` tokens' (longest stop string + 8), as the trainer's own loop always did."""
        for i in range(start, upto):
            j = i - offset
            text = self.tokenizer.decode(ids[max(0, j + 1 - window):j + 1])
            hit = next((s for s in stops if s and s in text), None)
            if hit is not None:
                return i, hit
        return None

    def _collect(self, st: _StepState, outputs: list[SequenceOutput], params: list[SamplingParams], versions: list[Any],
                 stopped: dict[int, tuple[int, str]], prompt_lps: list[Any], aborted: bool, steps: int
                 ) -> list[SequenceOutput]:
        counts = st.counts.tolist()
        tokens = st.tokens[:, :steps].tolist()
        lps = st.logprobs[:, :steps].tolist()
        tops = None
        if st.top_ids is not None and st.top_lps is not None:
            tops = (st.top_ids[:, :steps].tolist(), st.top_lps[:, :steps].tolist())
        for r, (out, p) in enumerate(zip(outputs, params)):
            n = counts[r]
            if r in stopped:
                n = min(n, stopped[r][0] + 1)
            out.token_ids, out.logprobs, out.versions = tokens[r][:n], lps[r][:n], versions[:n]
            if tops is not None and p.top_logprobs:
                out.top_logprobs = [list(zip(ids[:p.top_logprobs], vals[:p.top_logprobs]))
                                    for ids, vals in zip(tops[0][r][:n], tops[1][r][:n])]
            out.prompt_logprobs = prompt_lps[r]
            last = out.token_ids[-1] if out.token_ids else None
            if r in stopped:
                out.finish_reason, out.stop_reason = "stop", stopped[r][1]
            elif last is not None and last in p.stop_token_ids:
                out.finish_reason, out.stop_reason = "stop", last
            elif last is not None and not p.ignore_eos and last in self.stop_token_ids:
                out.finish_reason, out.stop_reason = "stop", None
            elif aborted and n < p.max_new_tokens:
                out.finish_reason = "abort"
            else:
                out.finish_reason = "length"
        self.stats["batches"] += 1
        self.stats["sequences"] += len(outputs)
        self.stats["generated_tokens"] += sum(len(o.token_ids) for o in outputs)
        return outputs

    # ---- weights ---------------------------------------------------------------------------
    def parameter_shapes(self) -> dict[str, tuple[torch.Size, torch.dtype]]:
        """Every parameter name the model loads (tied weights once, under their first name)."""
        return {n: (p.shape, p.dtype) for n, p in self.model.named_parameters()}

    def load_weights(self, tensors: dict[str, torch.Tensor], *, version: Any = None) -> None:
        """Copy ``tensors`` (checked by the caller) into the parameters in place, between two decode
        steps; set the version label when one is given."""
        params = dict(self.model.named_parameters())
        with self.lock, torch.no_grad():
            for name, value in tensors.items():
                target = params[name]
                target.copy_(value.to(device=target.device, dtype=target.dtype), non_blocking=True)
            if version is not None:
                self.weight_version = version
