"""``POST /v1/completions`` as vLLM serves it: prompt token ids in, sampled token ids and logprobs out.

The request and reply shapes are vLLM's ``CompletionRequest`` / ``CompletionResponse``
(vllm/entrypoints/openai/completion/protocol.py): ``prompt`` may be text, a list of token ids, or a
list of either; ``return_token_ids`` adds ``prompt_token_ids`` and ``token_ids`` to every choice;
``logprobs: k`` adds OpenAI's ``{tokens, token_logprobs, top_logprobs, text_offset}`` (the sampled
token and the ``k`` most likely, logprobs floored at -9999.0 as vLLM does); ``prompt_logprobs: k``
adds ``[None, {token_id: {logprob, rank, decoded_token}}, ...]``; ``return_tokens_as_token_ids``
names tokens ``token_id:N``. Choices are ordered prompt by prompt, ``n`` per prompt.

One addition: every choice carries ``weight_versions``, the spans of output tokens each weight
version sampled — ``[{"version", "start", "end"}]``, the shape vLLM gives on its tokens-in/tokens-out
route (``/inference/v1/generate``) and request outputs; vLLM's ``/v1/completions`` does not send it,
so a client must treat it as optional.

Parameters this engine cannot honour (``stream``, ``echo``, ``top_k``, penalties, ``logit_bias``,
structured output...) are a 400 naming the parameter, never silently dropped.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from servers.model.openai_api import BadRequest, max_tokens_of, number, seed_of, stop_strings
from servers.model.sampling import MAX_TOP_LOGPROBS, SamplingParams, SequenceOutput

_KEYS = {"model", "prompt", "max_tokens", "n", "temperature", "top_p", "seed", "stop", "stop_token_ids", "ignore_eos",
         "logprobs", "prompt_logprobs", "return_token_ids", "return_tokens_as_token_ids", "include_stop_str_in_output",
         "skip_special_tokens", "add_special_tokens", "request_id", "user", "stream", "echo", "top_k", "min_p",
         "min_tokens", "repetition_penalty", "presence_penalty", "frequency_penalty", "logit_bias", "suffix"}
# vLLM's "no effect" value of each parameter this engine does not implement
_NEUTRAL = {"stream": (False, None), "echo": (False, None), "top_k": (None, 0, -1), "min_p": (None, 0, 0.0),
            "min_tokens": (None, 0), "repetition_penalty": (None, 1, 1.0), "presence_penalty": (None, 0, 0.0),
            "frequency_penalty": (None, 0, 0.0), "logit_bias": (None, {}), "suffix": (None, "")}
DEFAULT_MAX_TOKENS = 16  # vLLM's (and OpenAI's) completions default


@dataclass
class CompletionRequest:
    model: str | None
    prompts: list[list[int] | str]
    n: int
    params: SamplingParams
    return_token_ids: bool
    logprobs: int | None
    as_token_ids: bool
    include_stop_str: bool
    skip_special_tokens: bool
    add_special_tokens: bool
    request_id: str


def _flag(body: dict[str, Any], key: str, default: bool) -> bool:
    value = body.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise BadRequest(f"{key} must be true or false", param=key)
    return value


def _count(body: dict[str, Any], key: str, hi: int) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= hi:
        raise BadRequest(f"{key} must be an integer in [0, {hi}], got {value!r}", param=key)
    return value


def _prompts(value: Any) -> list[list[int] | str]:
    def ids(x: Any) -> bool:
        return isinstance(x, list) and bool(x) and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in x)

    if isinstance(value, str) and value:
        return [value]
    if ids(value):
        return [list(value)]
    if isinstance(value, list) and value and all((isinstance(p, str) and p) or ids(p) for p in value):
        return list(value)
    raise BadRequest("prompt must be a non-empty string, a list of token ids (>= 0), or a list of either",
                     param="prompt")


def parse(body: dict[str, Any]) -> CompletionRequest:
    for key in body:
        if key not in _KEYS:
            raise BadRequest(f"unsupported parameter {key!r}", param=key)
    for key, neutral in _NEUTRAL.items():
        if key in body and body[key] not in neutral:
            raise BadRequest(f"{key}={body[key]!r} is not supported by this server", param=key)
    prompts = _prompts(body.get("prompt"))
    n = body.get("n", 1)
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 64:
        raise BadRequest(f"n must be an integer in [1, 64], got {n!r}", param="n")
    stop_ids = body.get("stop_token_ids") or []
    if not isinstance(stop_ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in stop_ids):
        raise BadRequest("stop_token_ids must be a list of token ids", param="stop_token_ids")
    top_p = number(body, "top_p", 1.0, 0.0, 1.0)
    if top_p == 0.0:
        raise BadRequest("top_p must be > 0", param="top_p")
    max_tokens = max_tokens_of(body, "max_tokens", allow_zero=True)
    logprobs = _count(body, "logprobs", MAX_TOP_LOGPROBS)
    params = SamplingParams(max_new_tokens=DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens,
                            temperature=number(body, "temperature", 1.0, 0.0, 2.0), top_p=top_p,
                            stop=stop_strings(body.get("stop")), stop_token_ids=tuple(stop_ids),
                            ignore_eos=_flag(body, "ignore_eos", False), seed=seed_of(body), top_logprobs=logprobs or 0,
                            prompt_logprobs=_count(body, "prompt_logprobs", MAX_TOP_LOGPROBS))
    request_id = body.get("request_id") or uuid.uuid4().hex
    if not isinstance(request_id, str):
        raise BadRequest("request_id must be a string", param="request_id")
    return CompletionRequest(model=body.get("model"), prompts=prompts, n=n, params=params,
                             return_token_ids=_flag(body, "return_token_ids", False), logprobs=logprobs,
                             as_token_ids=_flag(body, "return_tokens_as_token_ids", False),
                             include_stop_str=_flag(body, "include_stop_str_in_output", False),
                             skip_special_tokens=_flag(body, "skip_special_tokens", True),
                             add_special_tokens=_flag(body, "add_special_tokens", True), request_id=request_id)


def output_text(tokenizer: Any, out: SequenceOutput, *, skip_special_tokens: bool = True,
                include_stop_str: bool = False) -> str:
    """The text of a sequence as vLLM returns it: special tokens skipped, cut before the stop string
    that ended it unless ``include_stop_str``."""
    text = tokenizer.decode(out.token_ids, skip_special_tokens=skip_special_tokens)
    if isinstance(out.stop_reason, str) and not include_stop_str and out.stop_reason in text:
        text = text[:text.index(out.stop_reason)]
    return text


def weight_version_spans(versions: list[Any]) -> list[dict[str, Any]]:
    """Per-token versions as vLLM's half-open spans over output-token indexes."""
    spans: list[dict[str, Any]] = []
    for i, v in enumerate(versions):
        if spans and spans[-1]["version"] == str(v):
            spans[-1]["end"] = i + 1
        else:
            spans.append({"version": str(v), "start": i, "end": i + 1})
    return spans


def _token_str(tokenizer: Any, token: int, as_ids: bool) -> str:
    return f"token_id:{token}" if as_ids else tokenizer.decode([token])


def _logprobs(tokenizer: Any, out: SequenceOutput, k: int, as_ids: bool) -> dict[str, Any]:
    tokens = [_token_str(tokenizer, t, as_ids) for t in out.token_ids]
    offsets, at = [], 0
    for piece in tokens:
        offsets.append(at)
        at += len(piece)
    top: list[dict[str, float] | None] = []
    for i, (token, lp) in enumerate(zip(out.token_ids, out.logprobs)):
        entry = {tokens[i]: max(lp, -9999.0)}
        for alt, alt_lp in (out.top_logprobs[i] if out.top_logprobs else [])[:k]:
            entry.setdefault(_token_str(tokenizer, alt, as_ids), max(alt_lp, -9999.0))
        top.append(entry)
    return {"text_offset": offsets, "token_logprobs": [max(lp, -9999.0) for lp in out.logprobs], "tokens": tokens,
            "top_logprobs": top}


def _prompt_logprobs(tokenizer: Any, out: SequenceOutput) -> list[dict[str, dict[str, Any]] | None] | None:
    if out.prompt_logprobs is None:
        return None
    return [None if entry is None else {str(t): {"logprob": max(lp, -9999.0), "rank": rank,
                                                 "decoded_token": tokenizer.decode([t])}
                                        for t, (lp, rank) in entry.items()}
            for entry in out.prompt_logprobs]


def response(tokenizer: Any, model: str, req: CompletionRequest, outputs: list[SequenceOutput]) -> dict[str, Any]:
    """vLLM's CompletionResponse for ``outputs`` (prompt by prompt, ``n`` each)."""
    choices = []
    for i, out in enumerate(outputs):
        choice: dict[str, Any] = {
            "index": i,
            "text": output_text(tokenizer, out, skip_special_tokens=req.skip_special_tokens,
                                include_stop_str=req.include_stop_str),
            "logprobs": _logprobs(tokenizer, out, req.logprobs, req.as_token_ids) if req.logprobs is not None else None,
            "finish_reason": out.finish_reason, "stop_reason": out.stop_reason,
            "token_ids": list(out.token_ids) if req.return_token_ids else None,
            "prompt_logprobs": _prompt_logprobs(tokenizer, out),
            "prompt_token_ids": list(out.prompt_ids) if req.return_token_ids else None,
            "weight_versions": weight_version_spans(out.versions),
        }
        choices.append(choice)
    prompt_tokens = sum(len(out.prompt_ids) for out in outputs[::req.n])
    completion_tokens = sum(len(out.token_ids) for out in outputs)
    return {"id": f"cmpl-{req.request_id}", "object": "text_completion", "created": int(time.time()), "model": model,
            "choices": choices, "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                                          "total_tokens": prompt_tokens + completion_tokens}}
