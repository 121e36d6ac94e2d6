"""A ``/verify`` body decoded without building the prompt it only echoes.

Why: structured_outputs' rows are 17-30 KB, ~90% of it ``responses_create_params`` (the
prompt and a dozen tool definitions) that its verifier never reads; a profile of the server on
unique traffic put ``orjson.loads`` of the whole body at ~85 µs of a ~330 µs request. An
environment that declares ``reads_create_params = False`` gets its bodies decoded here:
every top-level field as usual except ``responses_create_params``, which is only checked —
it must be JSON of :class:`~servers.wire.ResponsesCreateParams`' shape — not built (~35 µs
in all). The reply is spliced onto the request's bytes (``servers.replies.splice_reply``), so
the echo is unchanged; wherever the parsed body is needed after all (a reply that is not
spliced), ``EnvService.verify`` decodes the whole body again.

Anything the fast check does not accept (malformed JSON, a field of another shape, a body
that is not an object) returns None and the caller takes the ordinary path, so every 400
and 422 is worded exactly as before. One difference remains, inside the unread field only:
a number too large for a double (``1e999``) is echoed as written where orjson answers 400
(Python's json, NeMo-Gym's parser, reads it as infinity).
"""

from __future__ import annotations

from typing import Any

import msgspec
import orjson

from servers.wire import ResponsesCreateParams

CREATE_PARAMS = "responses_create_params"


class _CreateParamsShape(msgspec.Struct):
    """What ``ResponsesCreateParams`` requires of the two fields it types (others: any JSON)."""

    input: str | list[dict[str, msgspec.Raw]] = []
    tools: list[dict[str, msgspec.Raw]] = []


class UnreadCreateParams(ResponsesCreateParams):
    """Stands in for a ``responses_create_params`` that was checked but not built: empty
    ``input`` and ``tools``. Only an environment that never reads the field gets one."""


_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])
_SHAPE = msgspec.json.Decoder(_CreateParamsShape)
_UNREAD = UnreadCreateParams()


def decode_unread_prompt(raw: bytes) -> dict[str, Any] | None:
    """The body with ``responses_create_params`` checked but not built, or None when the
    ordinary ``orjson.loads`` + pydantic path must decide (it then words the error)."""
    # msgspec skips a field without checking its UTF-8; orjson refuses invalid UTF-8 (400).
    if not raw.isascii():
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            return None
    try:
        fields = _TOP.decode(raw)
        body = {key: orjson.loads(memoryview(value)) for key, value in fields.items() if key != CREATE_PARAMS}
        if CREATE_PARAMS in fields:
            _SHAPE.decode(fields[CREATE_PARAMS])
            body[CREATE_PARAMS] = _UNREAD
    except (msgspec.DecodeError, msgspec.ValidationError, orjson.JSONDecodeError):
        return None
    return body


def has_unread_prompt(body: Any) -> bool:
    return isinstance(body, dict) and isinstance(body.get(CREATE_PARAMS), UnreadCreateParams)
