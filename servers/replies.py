"""What ``/verify`` answers: the request echoed + the verdict's fields (NeMo-Gym's verify
response shape), built from the parsed body or spliced onto the request's own bytes."""

from __future__ import annotations

from typing import Any

import orjson

from servers.environment import Verdict
from servers.lazy_body import has_unread_prompt
from servers.wire import failure_fields


def in_full(body: dict[str, Any], raw: bytes | None) -> dict[str, Any]:
    """``body`` with its prompt, when it was decoded without it (servers/lazy_body.py)."""
    return orjson.loads(raw) if raw is not None and has_unread_prompt(body) else body


def splice_reply(raw: bytes, body: dict[str, Any], verdict: Verdict) -> bytes | None:
    """``build_reply(body, verdict)`` as JSON bytes made from the request's own bytes: its closing
    brace replaced by the verdict's new fields. A field the request already holds with the same
    value stays where it is (as ``dict.update`` leaves it); None when the reply would differ
    otherwise (a field with another value, a failure's merged ``instance_config``, an empty body).

    Why: a profile of structured_outputs on unique traffic (17-30 KB rows, the prompt and tools
    echoed back) put re-serialising the parsed request at ~10% of the server's CPU per request."""
    if not body or verdict.failure_class is not None:
        return None
    additions: dict[str, Any] = {}

    def put(key: str, value: Any) -> bool:
        if key in body:
            return _same_json(body[key], value)  # unchanged in place, or not spliceable
        additions[key] = value
        return True

    for key, value in verdict.extras.items():
        if not put(key, value):
            return None
    if not put("reward", float(verdict.reward)):
        return None
    if verdict.components is not None:
        if not put("reward_components", {k: float(v) for k, v in verdict.components.items()}):
            return None
        for key, value in verdict.components.items():
            if key not in body:
                additions.setdefault(key, float(value))
    end = len(raw.rstrip())
    if end < 2 or raw[end - 1:end] != b"}":
        return None
    if not additions:
        return raw[:end]
    return raw[:end - 1] + b"," + orjson.dumps(additions, option=orjson.OPT_SERIALIZE_NUMPY)[1:]


def _same_json(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False  # 1 vs 1.0 vs True: equal in Python, not the same JSON
    if isinstance(a, (dict, list)):
        return orjson.dumps(a) == orjson.dumps(b)
    return a == b


def build_reply(body: dict[str, Any], verdict: Verdict, *, legacy: bool = True) -> dict[str, Any]:
    """Request echoed unchanged + reward + diagnostics (NeMo-Gym's verify response shape). A
    failure adds the fields of ``servers.wire.failure_fields`` and ``instance_config.mask_sample``
    (NeMo-RL's mask); ``legacy=False`` (a Gym >= 0.7 session) leaves out the ``_ng_*`` ones."""
    reply = dict(body)
    reply.update(verdict.extras)
    reply["reward"] = float(verdict.reward)
    if verdict.components is not None:
        reply["reward_components"] = {k: float(v) for k, v in verdict.components.items()}
        for key, value in verdict.components.items():
            reply.setdefault(key, float(value))  # NeMo-Gym also exposes components top-level
    if verdict.failure_class is not None:
        reply.update(failure_fields(verdict.failure_class, verdict.failure_detail,
                                    judge_error_kind=verdict.extras.get("judge_error_kind"), legacy=legacy))
        # NeMo-RL drops samples whose result says instance_config.mask_sample = true.
        instance_config = dict(reply.get("instance_config") or {})
        instance_config["mask_sample"] = True
        reply["instance_config"] = instance_config
    return reply
