"""The model side of the decode engine: a prefill, then one forward per decode step.

Two implementations behind one shape of call:

* :class:`StaticDecoder` — Llama-family checkpoints (Llama, Qwen2, Qwen3, Mistral: RMSNorm, RoPE,
  grouped-query attention, gated MLP; the tiny preset is one). It runs the checkpoint's own
  modules (projections, norms, MLP, rotary embedding) but owns the attention and a **static KV
  cache**: one preallocated buffer per layer, ``[rows, kv_heads, slots, head_dim]``, written at a
  slot index held in a device tensor, with a validity mask per slot. Every tensor a decode step
  touches has a fixed shape and address, so the step can be captured once as a CUDA graph and
  replayed (:mod:`servers.model.step_graph`). Weights are read from the module each call, so a
  weight update that copies into the parameters in place is seen by the next step (and by a
  captured graph: the addresses do not change).
* :class:`HFDecoder` — any other causal LM, through its own forward and a dynamic cache.

Layout: prompts are right-aligned at slots ``[P - len, P)`` (P: the longest prompt); decode step
``t`` writes slot ``P + t`` of every row. Keys are stored after RoPE, so where a row's prompt sits
in the buffer does not matter, only which slots are valid. A padding slot attends to itself only
(a row of all-masked scores would be NaN, and NaN values times a zero weight are still NaN).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "qwen3", "mistral")
PREFILL_SCORES = 1 << 24  # attention scores (rows x prompt x prompt) one prefill chunk holds per head


def static_decoder_problem(model: Any) -> str | None:
    """Why :class:`StaticDecoder` cannot run ``model`` (None: it can)."""
    cfg = model.config
    if getattr(cfg, "model_type", None) not in SUPPORTED_MODEL_TYPES:
        return f"model_type {getattr(cfg, 'model_type', None)!r} is not one of {', '.join(SUPPORTED_MODEL_TYPES)}"
    if any(t != "full_attention" for t in getattr(cfg, "layer_types", None) or []):
        return "sliding-window layers"
    if getattr(cfg, "use_sliding_window", False) or (cfg.model_type == "mistral" and getattr(cfg, "sliding_window", None)):
        return "sliding-window attention"
    inner = getattr(model, "model", None)
    if inner is None or not all(hasattr(inner, a) for a in ("embed_tokens", "layers", "norm", "rotary_emb")):
        return "not the Llama module layout"
    return None


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE as the Llama family applies it: ``x * cos + rotate_half(x) * sin`` (cos/sin: [B, T, d])."""
    return x * cos.unsqueeze(1) + _rotate_half(x) * sin.unsqueeze(1)


class StaticDecoder:
    def __init__(self, model: Any):
        problem = static_decoder_problem(model)
        if problem:
            raise ValueError(f"the static decoder cannot run this model: {problem}")
        self.model = model
        inner = model.model
        self.embed, self.layers, self.norm, self.rotary = inner.embed_tokens, inner.layers, inner.norm, inner.rotary_emb
        attn = self.layers[0].self_attn
        cfg = model.config
        self.head_dim = attn.head_dim
        self.heads = cfg.num_attention_heads
        self.kv_heads = cfg.num_key_value_heads
        self.scaling = attn.scaling
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.valid = torch.zeros(0, 0, dtype=torch.bool)
        self.rows = self.slots = 0

    @property
    def device(self) -> torch.device:
        return self.embed.weight.device

    def ensure_capacity(self, rows: int, slots: int) -> bool:
        """Grow the cache to hold ``rows`` x ``slots``; True when it was (re)allocated (captured
        graphs that point into the old buffers are then stale)."""
        if rows <= self.rows and slots <= self.slots:
            return False
        rows, slots = max(rows, self.rows), max(slots, self.slots)
        dtype, device = self.embed.weight.dtype, self.device
        shape = (rows, self.kv_heads, slots, self.head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in self.layers]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in self.layers]
        self.valid = torch.zeros(rows, slots, dtype=torch.bool, device=device)
        self.rows, self.slots = rows, slots
        return True

    def cache_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))

    # ---- the forward ----------------------------------------------------------------------
    def _layers(self, h: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, write: Any, rows: slice,
                slots: int) -> torch.Tensor:
        """Run every decoder layer on ``h`` [B, T, H]; ``write(layer, k, v)`` stores the new keys/values."""
        B, T, _ = h.shape
        cos, sin = self.rotary(h, positions)
        for i, layer in enumerate(self.layers):
            attn = layer.self_attn
            x = layer.input_layernorm(h)
            q = attn.q_proj(x).view(B, T, self.heads, self.head_dim)
            k = attn.k_proj(x).view(B, T, self.kv_heads, self.head_dim)
            v = attn.v_proj(x).view(B, T, self.kv_heads, self.head_dim).transpose(1, 2)
            if hasattr(attn, "q_norm"):  # Qwen3: per-head RMSNorm before RoPE
                q, k = attn.q_norm(q), attn.k_norm(k)
            q, k = _rope(q.transpose(1, 2), cos, sin), _rope(k.transpose(1, 2), cos, sin)
            write(i, k, v)
            out = F.scaled_dot_product_attention(q, self.keys[i][rows, :, :slots], self.values[i][rows, :, :slots],
                                                 attn_mask=mask, scale=self.scaling, enable_gqa=True)
            h = h + attn.o_proj(out.transpose(1, 2).reshape(B, T, self.heads * self.head_dim))
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        return self.norm(h)

    def prefill(self, ids: torch.Tensor, positions: torch.Tensor, valid: torch.Tensor, slots: int,
                all_logits: bool = False) -> torch.Tensor:
        """Prompts [U, P] (right-aligned, ``valid`` marks real tokens) into cache rows ``[0, U)``, slots
        ``[0, P)``; the rest of each row's slots up to ``slots`` are cleared. Returns last-position
        logits [U, V], or every position's [U, P, V] when ``all_logits``. Runs in chunks of rows so a
        chunk's attention scores stay within :data:`PREFILL_SCORES` per head."""
        U, P = ids.shape
        chunk = max(1, PREFILL_SCORES // (P * P))
        return torch.cat([self._prefill_rows(ids[r:r + chunk], positions[r:r + chunk], valid[r:r + chunk], r, slots,
                                             all_logits) for r in range(0, U, chunk)])

    def _prefill_rows(self, ids: torch.Tensor, positions: torch.Tensor, valid: torch.Tensor, first: int, slots: int,
                      all_logits: bool) -> torch.Tensor:
        n, P = ids.shape
        rows = slice(first, first + n)
        self.valid[rows, :slots] = False
        self.valid[rows, :P] = valid
        causal = torch.ones(P, P, dtype=torch.bool, device=ids.device).tril()
        mask = (causal.unsqueeze(0) & valid.unsqueeze(1)) | torch.eye(P, dtype=torch.bool, device=ids.device)

        def write(i: int, k: torch.Tensor, v: torch.Tensor) -> None:
            self.keys[i][rows, :, :P] = k
            self.values[i][rows, :, :P] = v

        h = self._layers(self.embed(ids), positions, mask.unsqueeze(1), write, rows, P)
        return self.model.lm_head(h if all_logits else h[:, -1])

    def expand_rows(self, owner: torch.Tensor) -> None:
        """Row ``r`` of the batch becomes a copy of prefilled row ``owner[r]`` (shared prompts)."""
        B = owner.shape[0]
        for cache in (*self.keys, *self.values):
            cache[:B] = cache.index_select(0, owner)
        self.valid[:B] = self.valid.index_select(0, owner)

    def step(self, tokens: torch.Tensor, positions: torch.Tensor, slot: torch.Tensor, rows: int, slots: int
             ) -> torch.Tensor:
        """One decode step for rows ``[0, rows)``: token [B] at position [B] written at ``slot`` [1].
        Returns logits [B, V]. Shape-static and free of host synchronisation."""
        self.valid[:rows].index_fill_(1, slot, True)
        mask = self.valid[:rows, :slots].view(rows, 1, 1, slots)

        def write(i: int, k: torch.Tensor, v: torch.Tensor) -> None:
            self.keys[i][:rows].index_copy_(2, slot, k)
            self.values[i][:rows].index_copy_(2, slot, v)

        h = self._layers(self.embed(tokens.view(rows, 1)), positions.view(rows, 1), mask, write, slice(0, rows), slots)
        return self.model.lm_head(h[:, -1])


class HFDecoder:
    """Any causal LM through its own forward (left padding, a dynamic KV cache); no graphs."""

    def __init__(self, model: Any):
        self.model = model
        self.cache: Any = None
        self.mask: torch.Tensor | None = None

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def prefill(self, ids: torch.Tensor, positions: torch.Tensor, valid: torch.Tensor, slots: int,
                all_logits: bool = False) -> torch.Tensor:
        from servers.model.kv_cache import cache_of

        self.mask = valid.long()
        out = self.model(input_ids=ids, attention_mask=self.mask, position_ids=positions, use_cache=True)
        self.cache = cache_of(out)
        return out.logits if all_logits else out.logits[:, -1]

    def expand_rows(self, owner: torch.Tensor) -> None:
        self.cache.reorder_cache(owner)
        assert self.mask is not None
        self.mask = self.mask.index_select(0, owner)

    def step(self, tokens: torch.Tensor, positions: torch.Tensor, slot: torch.Tensor, rows: int, slots: int
             ) -> torch.Tensor:
        from servers.model.kv_cache import cache_of, with_cache

        assert self.mask is not None
        self.mask = torch.cat([self.mask, self.mask.new_ones(rows, 1)], dim=1)
        out = self.model(input_ids=tokens.view(rows, 1), attention_mask=self.mask, position_ids=positions.view(rows, 1),
                         use_cache=True, **with_cache(self.model, self.cache))
        self.cache = cache_of(out)
        return out.logits[:, -1]
