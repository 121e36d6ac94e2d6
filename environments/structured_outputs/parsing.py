"""Turn a model's text into data, per ``schema_type``.

JSON is found wherever a model tends to put it: the whole text, a fenced block, or an
object after some reasoning prose (the last complete JSON value wins, since models
"think" first and answer last). The other formats are parsed from the last fenced block
when there is one, else from the whole text.

Text formats carry no types (XML, CSV) or types JSON Schema does not know (YAML and TOML
dates), so values are coerced towards the schema the way NeMo-Gym does: numbers and
booleans from strings where the schema asks for them, dates to ISO strings.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import math
import re
import tomllib
from typing import Any

import xmltodict
import yaml

from servers import json_values

FORMATS = ("json", "yaml", "xml", "toml", "csv")

_FENCE_TAG = re.compile(r"[ \t]*([A-Za-z0-9_+-]*)")
# Deeper bracket nesting than any structured output has: libyaml's C parser crashes the process
# (SIGSEGV) on ~100,000 nested "[" or "{", and Python's parsers recurse.
MAX_NESTING = 512


class ParseFailure(ValueError):
    """The text holds no value of the requested format."""


def fences(text: str) -> list[tuple[str, str]]:
    """``(tag, body)`` of each fenced block: what ``re.findall(r"```[ \\t]*([A-Za-z0-9_+-]*)[^\\n]*\\n(.*?)```",
    text, re.DOTALL)`` finds, in linear time (that regex rescans the line at every backtick of a
    long backtick run: quadratic)."""
    out: list[tuple[str, str]] = []
    pos = 0
    while (start := text.find("```", pos)) >= 0:
        newline = text.find("\n", start + 3)
        close = text.find("```", newline + 1) if newline >= 0 else -1
        if close < 0:
            break  # no later fence can close either
        tag = _FENCE_TAG.match(text, start + 3, newline)
        out.append((tag.group(1) if tag else "", text[newline + 1:close]))
        pos = close + 3
    return out


def _fenced_blocks(text: str, fmt: str) -> list[str]:
    """Bodies of fenced blocks tagged ``fmt`` (or untagged), in order."""
    aliases = {"yaml": ("yaml", "yml"), "json": ("json", "jsonc")}.get(fmt, (fmt,))
    return [body for tag, body in fences(text) if tag.lower() in aliases or tag == ""]


def nesting_depth(text: str) -> int:
    """The deepest run of open ``[``/``{`` (quotes not considered: an upper bound)."""
    depth = deepest = 0
    for match in _BRACKETS.finditer(text):
        depth = depth + 1 if match.group() in "[{" else max(0, depth - 1)
        deepest = max(deepest, depth)
    return deepest


_BRACKETS = re.compile(r"[\[\]{}]")
_MAX_FAILED_STARTS = 1000  # stray braces in prose before the answer: a handful; a wall of them is not an answer


def _last_json_value(text: str) -> Any:
    """The last complete top-level JSON object or array embedded in ``text``."""
    found: list[Any] = []
    pos, end, failures = 0, len(text), 0
    brace, bracket = text.find("{"), text.find("[")  # the next of each, found once per position passed
    while pos < end:
        if 0 <= brace < pos:
            brace = text.find("{", pos)
        if 0 <= bracket < pos:
            bracket = text.find("[", pos)
        starts = [p for p in (brace, bracket) if p >= 0]
        if not starts:
            break
        start = min(starts)
        try:
            value, stop = json_values.DECODER.raw_decode(text, start)
        except ValueError:  # not JSON here (NaN / Infinity included: not JSON numbers)
            failures += 1
            if failures > _MAX_FAILED_STARTS:  # each failure costs O(position) (the error's line number)
                raise ParseFailure(f"more than {_MAX_FAILED_STARTS} '{{' / '[' that start no JSON value") from None
            pos = start + 1
            continue
        except RecursionError:
            raise ParseFailure("JSON nested deeper than the parser allows") from None
        found.append(value)
        pos = stop  # skip its inside: nested objects are not separate answers
    if not found:
        raise ParseFailure("no JSON object or array found in the response")
    return found[-1]


def parse_json(text: str) -> Any:
    stripped = text.strip()
    try:
        return json_values.loads(stripped)
    except ValueError:
        pass
    for body in reversed(_fenced_blocks(text, "json")):
        try:
            return json_values.loads(body)
        except ValueError:
            continue
    return _last_json_value(text)


class _YamlLoader(yaml.CSafeLoader if hasattr(yaml, "CSafeLoader") else yaml.SafeLoader):  # type: ignore[misc]
    """SafeLoader that keeps ``2024-01-02`` a string: JSON Schema has no date type."""


_YamlLoader.yaml_implicit_resolvers = {
    key: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.copy().items()
}


def _body(text: str, fmt: str) -> str:
    blocks = _fenced_blocks(text, fmt)
    return blocks[-1] if blocks else text.strip()


def _dates_to_strings(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _dates_to_strings(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_dates_to_strings(v) for v in value]
    if isinstance(value, (dt.date, dt.time)):  # datetime is a date
        return value.isoformat()
    return value


def parse_text(fmt: str, text: str) -> Any:
    """Parse ``text`` as ``fmt``; raises :class:`ParseFailure` with the parser's reason."""
    try:
        if fmt == "json":
            return parse_json(text)
        body = _body(text, fmt)
        if fmt in ("yaml", "toml") and nesting_depth(body) > MAX_NESTING:
            raise ParseFailure(f"brackets nested deeper than {MAX_NESTING}: not a structured output")
        if fmt == "yaml":
            return yaml.load(body, Loader=_YamlLoader)  # noqa: S506 - a SafeLoader subclass
        if fmt == "toml":
            return _dates_to_strings(tomllib.loads(body))
        if fmt == "xml":
            return xmltodict.parse(body)
        if fmt == "csv":
            rows = list(csv.DictReader(io.StringIO(body)))
            if not rows:
                raise ParseFailure("CSV has no data rows")
            return rows
    except ParseFailure:
        raise
    except Exception as exc:  # noqa: BLE001 - every parser error means "did not parse"
        raise ParseFailure(f"{type(exc).__name__}: {str(exc)[:300]}") from None
    raise ParseFailure(f"unknown format {fmt!r}")


# ---- coercion towards the schema (XML and CSV are all strings) --------------------------

def _types(schema: Any) -> list[str]:
    kind = schema.get("type") if isinstance(schema, dict) else None
    return [kind] if isinstance(kind, str) else list(kind or [])


def _scalar(value: Any, types: list[str]) -> Any:
    if value is None or value == "":
        if "null" in types:
            return None
        return "" if "string" in types or value == "" else value
    if not isinstance(value, str):
        return value
    for kind in types:
        try:
            if kind == "integer":
                return int(value)
            if kind == "number":
                number = float(value)
                if math.isfinite(number):  # "NaN", "inf", "1e999" are not numbers: left as text
                    return number
                continue
        except ValueError:
            continue
        if kind == "boolean" and value.lower() in ("true", "false", "1", "0"):
            return value.lower() in ("true", "1")
        if kind == "string":
            return value
    return value


def coerce(value: Any, schema: Any) -> Any:
    """Walk ``value`` alongside ``schema`` converting strings to the types it asks for."""
    types = _types(schema)
    if not types:
        return value
    if "object" in types and isinstance(value, dict):
        props = schema.get("properties", {})
        return {k: coerce(v, props[k]) if k in props else v for k, v in value.items()}
    if "array" in types:
        if value is None:  # <tags/>: an empty list unless null is allowed
            return None if "null" in types else []
        if isinstance(value, dict) and len(value) == 1:  # xmltodict wraps repeated <item>s
            value = next(iter(value.values()))
        items = value if isinstance(value, list) else [value]
        return [coerce(item, schema.get("items", {})) for item in items]
    return _scalar(value, types)


def unwrap_xml_root(value: Any, schema: Any) -> Any:
    """xmltodict returns ``{root: {...}}``; drop the root element unless the schema names it."""
    if isinstance(value, dict) and len(value) == 1 and isinstance(schema, dict):
        (root, inner), = value.items()
        if root not in schema.get("properties", {}):
            return inner
    return value
