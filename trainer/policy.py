"""The local policy: a causal LM through Hugging Face transformers, plus its tokenizer.

Two ways to get one (``policy.model_name``):

* a local path (or hub id, when the machine has access): ``AutoModelForCausalLM`` and
  ``AutoTokenizer`` load it, and its own chat template is used;
* ``tiny``: a small Llama-style model initialised from a config with a byte-level
  tokenizer built with the ``tokenizers`` library, a ChatML chat template with
  Hermes-style ``<tool_call>`` syntax, and a fixed seed — no downloads, runs on a CPU.
  The preset lives in :mod:`servers.model.tiny`, shared with ``envs model serve tiny``.

``policy.device`` (``auto``: CUDA when torch sees a GPU, else CPU) places the model; the decode
loop, the logprobs and the loss build their tensors on the parameters' device.

``Policy.version`` is the integer the GRPO engine bumps on every weight update; the decode
engine (:mod:`trainer.rollout.decode`) stamps each sampled token with the version that was
current when the token's forward pass ran.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field

# The tiny preset (tokenizer, chat template, model geometry and builder) lives in
# servers.model.tiny: the local model server serves the same preset.
from servers.model.tiny import (  # noqa: F401  (re-exported: trainer code and tests import them from here)
    BOS, CHATML_TOOLS_TEMPLATE, EOS, IM_END, IM_START, PAD, SPECIAL_TOKENS, TinyModelConfig,
    build_tiny_model, build_tiny_tokenizer,
)


class PolicyConfig(BaseModel):
    """``policy.*`` keys this module reads (NeMo-RL names where NeMo-RL has one)."""

    model_config = ConfigDict(extra="forbid")

    model_name: str = Field("tiny", description="'tiny' or a local path / hub id of a causal LM")
    seed: int = Field(0, description="Seeds the tiny model's initial weights")
    precision: str = Field("float32", description="float32 | bfloat16 | float16")
    device: str = Field("cpu", description="'auto' (CUDA when torch sees a GPU, else CPU), 'cpu', 'cuda' or 'cuda:N' "
                                           "(the GRPO engine passes its policy.device, default auto)")
    tiny: TinyModelConfig = Field(default_factory=TinyModelConfig)
    chat_template_kwargs: dict[str, Any] = Field(default_factory=dict,
                                                 description="Extra kwargs for apply_chat_template (enable_thinking...)")
    compile_decode: bool = Field(False, description="the decode engine's steps through torch.compile "
                                                    "(the GRPO engine passes its policy.generation.compile)")


_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(name: str) -> torch.device:
    """``policy.device`` as a torch device: ``auto`` is the first GPU torch sees, else the CPU; asking
    for CUDA where there is none is an error that says what to set instead."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name != "cpu" and name != "cuda" and not (name.startswith("cuda:") and name[5:].isdigit()):
        raise ValueError(f"policy.device={name!r}: use auto, cpu, cuda or cuda:N")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"policy.device={name!r} but torch sees no CUDA device here: set policy.device=cpu "
                         "(or auto, which picks the GPU when there is one)")
    return torch.device(name)


class Policy:
    """Model + tokenizer + the weight version, shared by generation and training."""

    def __init__(self, model: Any, tokenizer: Any, *, name: str, chat_template_kwargs: dict[str, Any] | None = None,
                 compile_decode: bool = False):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name
        self.version = 0
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        # Held by the decode loop for one forward step and by whoever swaps weights, so a
        # step never runs on half-loaded weights.
        self.weights_lock = threading.RLock()
        self.decode_engine: Any = None  # servers.model.engine.DecodeEngine on this model (trainer.rollout.decode)
        self.compile_decode = compile_decode  # policy.generation.compile: that engine's steps go through torch.compile
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token

    @classmethod
    def load(cls, config: PolicyConfig | None = None) -> "Policy":
        config = config or PolicyConfig()
        dtype = _DTYPES[config.precision]
        if config.model_name == "tiny":
            tokenizer = build_tiny_tokenizer()
            model = build_tiny_model(tokenizer, config.tiny, config.seed).to(dtype)
        else:
            from transformers import AutoModelForCausalLM, AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(config.model_name)
            model = AutoModelForCausalLM.from_pretrained(config.model_name, dtype=dtype)
            if tokenizer.chat_template is None:
                tokenizer.chat_template = CHATML_TOOLS_TEMPLATE
        model = model.to(resolve_device(config.device))  # everything else follows the parameters' device
        tokenizer.padding_side = "left"
        return cls(model, tokenizer, name=config.model_name, chat_template_kwargs=config.chat_template_kwargs,
                   compile_decode=config.compile_decode)

    @property
    def device(self) -> torch.device:
        """Where the model's parameters are: decode and logprob tensors are built there."""
        return next(self.model.parameters()).device

    def make_rng(self, seed: int) -> torch.Generator:
        """A sampling RNG on the policy's device (torch.multinomial needs one on the same device)."""
        return torch.Generator(device=self.device).manual_seed(seed)

    def save(self, path: str | Path) -> None:
        """A regular HF folder (safetensors + tokenizer): ``policy.model_name=<path>`` loads it back."""
        self.model.save_pretrained(str(path))
        self.tokenizer.save_pretrained(str(path))

    @property
    def stop_token_ids(self) -> set[int]:
        """Tokens that end a turn: EOS plus the chat template's end-of-turn marker if it has one."""
        ids = {self.tokenizer.eos_token_id}
        eos = getattr(self.model.generation_config, "eos_token_id", None)
        ids.update(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        im_end = self.tokenizer.convert_tokens_to_ids(IM_END)
        if isinstance(im_end, int) and im_end != self.tokenizer.unk_token_id:
            ids.add(im_end)
        return {i for i in ids if i is not None}

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, *,
               add_generation_prompt: bool = True) -> str:
        return self.tokenizer.apply_chat_template(messages, tools=tools or None, tokenize=False,
                                                  add_generation_prompt=add_generation_prompt,
                                                  **self.chat_template_kwargs)

    def encode(self, text: str) -> list[int]:
        """Token ids of already-templated text (special-token markers are parsed, nothing is added)."""
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def decode(self, ids: list[int], *, skip_special_tokens: bool = False) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    def describe(self) -> dict[str, Any]:
        cfg = self.model.config
        params = sum(p.numel() for p in self.model.parameters())
        return {"model": self.name, "parameters": params, "layers": getattr(cfg, "num_hidden_layers", None),
                "hidden": getattr(cfg, "hidden_size", None), "vocab": len(self.tokenizer), "version": self.version}


def load_policy(cfg: Any, threads: int | None, device: str | None = None) -> Policy:
    """The policy a GRPO run (a ``trainer.config.MasterConfig``) trains: ``policy.model_name``,
    ``precision``, ``device`` (or ``device``), the tiny preset's geometry from ``hf_config_overrides``;
    torch uses ``threads`` intra-op threads in this process (None: left as it is)."""
    if threads is not None:
        torch.set_num_threads(threads)
    p = cfg.policy
    kw: dict[str, Any] = {"model_name": p.model_name, "seed": cfg.grpo.seed, "precision": p.precision,
                          "device": device or p.device, "compile_decode": p.generation.compile}
    if p.model_name == "tiny" and p.hf_config_overrides:
        kw["tiny"] = TinyModelConfig(**p.hf_config_overrides)
    return Policy.load(PolicyConfig(**kw))
