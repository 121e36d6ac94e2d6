"""The ``tiny`` model preset: a small Llama-style causal LM built from a config, with a
byte-level tokenizer and a ChatML chat template — no downloads, runs on a CPU.

One implementation, two users: the trainer's policy (``policy.model_name=tiny``) and the
local model server (``envs model serve tiny``), so a tiny policy and a tiny judge are the same
model. It lives in ``servers`` because servers import nothing of the trainer; the trainer
imports this module (and the client / wire models) from servers. torch, transformers and
tokenizers (the ``[train]`` extra) are imported inside the builders, so importing this module
costs nothing on a base install.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

# Special tokens of the tiny tokenizer. ChatML markers, as Qwen and Nemotron chat use.
BOS, EOS, PAD = "<|bos|>", "<|endoftext|>", "<|pad|>"
IM_START, IM_END = "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = [PAD, BOS, EOS, IM_START, IM_END]

# ChatML + Hermes tool-call syntax (the format Qwen2.5/3 and many Nemotron checkpoints use),
# so the tool-call parser in trainer.responses works for both the tiny preset and real models.
CHATML_TOOLS_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\nYou may call functions. Signatures:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}"
    "{{- '\\n</tools>\\nReturn a call as <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call><|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'system' and loop.first %}"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- else %}"
    "{{- '<|im_start|>' + message.role + '\\n' + (message.content or '') }}"
    "{%- for call in (message.tool_calls or []) %}"
    "{{- '<tool_call>{\"name\": \"' + call.function.name + '\", \"arguments\": ' + (call.function.arguments | tojson) + '}</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


class TinyModelConfig(BaseModel):
    """Geometry of the ``tiny`` preset (a Llama-style decoder)."""

    model_config = ConfigDict(extra="forbid")

    num_hidden_layers: int = 2
    hidden_size: int = 128
    intermediate_size: int = 384
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 2048


def build_tiny_tokenizer() -> Any:
    """A byte-level tokenizer (256 byte symbols + ChatML specials), built offline.

    No merges, so every byte is one token: any text round-trips and re-tokenising a
    decoded generation gives back the same ids (handy for multi-turn contiguity).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for symbol in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab[symbol] = len(vocab)
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=None))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens(SPECIAL_TOKENS)
    tok = PreTrainedTokenizerFast(tokenizer_object=core, bos_token=BOS, eos_token=EOS, pad_token=PAD,
                                  additional_special_tokens=[IM_START, IM_END])
    tok.chat_template = CHATML_TOOLS_TEMPLATE
    tok.padding_side = "left"
    return tok


def build_tiny_model(tokenizer: Any, cfg: TinyModelConfig, seed: int) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_hidden_layers, num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_key_value_heads, max_position_embeddings=cfg.max_position_embeddings,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=[tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids(IM_END)],
        pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=True,
    )
    # Seed a private generator-free init: fork_rng keeps the caller's global RNG untouched.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return model
