"""JSON values as the standard defines them: NaN and Infinity are not numbers.

Python's ``json`` reads ``NaN``, ``Infinity`` and ``-Infinity`` (not JSON) and turns ``1e999``
into ``inf``; YAML (``.nan``, ``.inf``), TOML (``nan``, ``inf``) and ``float("nan")`` on XML/CSV
text do the same. Every comparison with NaN is false, so ``NaN`` passes a schema's ``minimum``
and ``maximum``, and ``Infinity`` passes ``exclusiveMinimum``: a policy writing them satisfies
numeric constraints without a number. Verifiers read model output through these helpers:

* :func:`loads` — ``json.loads`` that refuses ``NaN``/``Infinity`` and numbers that overflow a
  double (ValueError, like any other malformed JSON);
* :func:`non_finite_path` — where in a parsed value (any format) a NaN or infinite float sits.
"""

from __future__ import annotations

import json
import math
from typing import Any, NoReturn


def _constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:40]} overflows a double: not a finite number")
    return value


DECODER = json.JSONDecoder(parse_constant=_constant, parse_float=_finite_float)


def loads(text: str) -> Any:
    """``json.loads`` without Python's extensions: ``NaN``, ``Infinity``, ``-Infinity`` and
    overflowing numbers (``1e999``) raise ValueError. A value it returns holds no non-finite float."""
    return DECODER.decode(text)


def non_finite_path(value: Any) -> str | None:
    """The path (``a/0/b``; ``<root>`` for the value itself) of the first NaN or infinite float
    in ``value`` (dicts, lists, scalars), or None when there is none. Iterative, and each container
    is visited once: a value nested thousands deep, or YAML aliases sharing one list a billion times
    over ("billion laughs"), costs its size in distinct objects, not its expanded size."""
    if not _has_non_finite(value):  # the common case, without building a path per item
        return None
    stack: list[tuple[Any, str]] = [(value, "")]
    seen: set[int] = set()
    while stack:
        item, where = stack.pop()
        if isinstance(item, float):
            if not math.isfinite(item):
                return where or "<root>"
        elif isinstance(item, (dict, list, tuple)) and id(item) not in seen:
            seen.add(id(item))
            pairs = item.items() if isinstance(item, dict) else enumerate(item)
            stack.extend((v, f"{where}/{k}" if where else str(k)) for k, v in reversed(list(pairs)))
    return None


def _has_non_finite(value: Any) -> bool:
    stack = [value]
    seen: set[int] = set()
    while stack:
        item = stack.pop()
        if isinstance(item, float):
            if not math.isfinite(item):
                return True
        elif isinstance(item, (dict, list, tuple)) and id(item) not in seen:
            seen.add(id(item))
            stack.extend(item.values() if isinstance(item, dict) else item)
    return False
