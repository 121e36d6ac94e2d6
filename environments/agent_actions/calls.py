"""Function-call matching: expected calls vs predicted calls, order-insensitive.

Pure functions, no framework imports: ``tool_call``, ``swe_pivot`` and ``next_action``
score with them.

Rules
* arguments may be JSON strings (Responses-API ``function_call.arguments``) or objects;
* values compare structurally: objects by key set then value, lists element-wise in order;
* numbers compare exactly, in ``Decimal`` (no float overflow or rounding); where the
  expected number is a real (a float, or a string with a point or an exponent) a tolerance
  applies (``math.isclose(rel_tol, abs_tol)`` semantics). Integers stay exact: a relative
  tolerance would make ids 1234567890 and 1234567891 "equal". A string written as a JSON
  number equals that number ("14" == 14), because models often quote numbers; a string that is
  not one ("02134", a zip code; "+14"; "1_000") stays text, so an identifier never equals the
  number its digits spell; booleans are not numbers (True != 1); NaN and Infinity are not
  numbers, and arguments holding them are not JSON;
* typed arguments keep their type: where the row's tool declares a parameter's JSON type,
  a predicted value of another type does not match (:func:`type_problems`);
* strings compare after whitespace normalisation (``collapse``: trim and squeeze runs of
  whitespace to one space; ``strip``: trim only; ``exact``) and optionally case-folded
  (``text_match="normalized"``, the default), or by a similarity threshold, NeMo-Gym's
  PivotRL rules: ``word_overlap`` (lower-cased word multisets, |common| / (|expected| + |got|),
  so identical texts score 0.5; texts under two words must be identical) or ``sequence``
  (``difflib.SequenceMatcher`` ratio after trimming and CRLF -> LF);
* ``numeric_strings=False`` keeps strings and numbers apart ("14" != 14), as NeMo-Gym does;
* calls are a multiset: each expected call is matched to at most one predicted call by a
  maximum bipartite matching, so order never matters and duplicates count.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from difflib import SequenceMatcher
from typing import Any, Callable, Iterable, Literal

from servers import json_values

Whitespace = Literal["collapse", "strip", "exact"]
TextMatch = Literal["normalized", "word_overlap", "sequence"]
_SPACES = re.compile(r"\s+")
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")  # RFC 8259's number grammar


@dataclass(frozen=True)
class MatchOptions:
    rel_tol: float = 1e-6
    abs_tol: float = 1e-9
    whitespace: Whitespace = "collapse"
    case_sensitive: bool = True
    allow_extra_arguments: bool = False  # predicted keys the expected call lacks
    text_match: TextMatch = "normalized"
    text_threshold: float = 1.0  # for word_overlap / sequence
    numeric_strings: bool = True  # "14" == 14
    # word_overlap: also |common words| / |predicted words| >= this (0: NeMo-Gym's rule alone). Its
    # |common| / (|expected| + |got|) >= 0.1 is met by a query stuffed with every plausible keyword.
    min_word_precision: float = 0.0


@dataclass
class Call:
    name: str
    arguments: dict[str, Any] | None  # None: the arguments were not valid JSON / not an object
    raw_arguments: Any = None


@dataclass
class CallReport:
    expected: str
    matched: bool
    predicted_index: int | None
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"expected": self.expected, "matched": self.matched, "predicted_index": self.predicted_index,
                "problems": self.problems}


@dataclass
class MatchResult:
    name_score: float  # matched names / max(#expected, #predicted)
    arguments_score: float  # fully matched calls / max(#expected, #predicted)
    exact: bool  # every expected call matched and nothing extra
    calls: list[CallReport]
    unmatched_predicted: list[int]


def parse_arguments(raw: Any) -> dict[str, Any] | None:
    """A call's arguments as a dict; ``None`` if they are not a JSON object (NaN, Infinity and
    overflowing numbers are not JSON: servers/json_values.py)."""
    if raw is None or raw == "":
        return {}
    if isinstance(raw, dict):
        return raw  # a row's call, or a <tool_call> block already parsed strictly
    if isinstance(raw, str):
        try:
            value = json_values.loads(raw)
        except (ValueError, RecursionError):  # not JSON, an int over 4300 digits, nesting past the stack
            return None
        return value if isinstance(value, dict) else None
    return None


def make_call(name: str, arguments: Any) -> Call:
    return Call(name=name, arguments=parse_arguments(arguments), raw_arguments=arguments)


def _number(value: Any) -> Decimal | None:
    """A finite number as an exact Decimal; None for anything else (bools, nan, inf, text)."""
    if isinstance(value, bool):
        return None
    try:
        if isinstance(value, (int, float)):
            number = Decimal(value)
        elif isinstance(value, str) and len(value) <= 100 and _JSON_NUMBER.fullmatch(value.strip()):
            number = Decimal(value.strip())
        else:
            return None
    except (InvalidOperation, ValueError):
        return None
    return number if number.is_finite() else None


def _is_real(value: Any) -> bool:
    """Written as a real number (so a tolerance makes sense), not as an integer."""
    return isinstance(value, float) or isinstance(value, str) and any(ch in value for ch in ".eE")


def _numbers_equal(expected: Any, got: Any, expected_num: Decimal, got_num: Decimal, options: MatchOptions) -> bool:
    if expected_num == got_num:
        return True
    if not _is_real(expected):
        return False
    diff = abs(expected_num - got_num)
    return diff <= max(Decimal(repr(options.rel_tol)) * max(abs(expected_num), abs(got_num)),
                       Decimal(repr(options.abs_tol)))


def _norm_text(text: str, options: MatchOptions) -> str:
    if options.whitespace == "collapse":
        text = _SPACES.sub(" ", text).strip()
    elif options.whitespace == "strip":
        text = text.strip()
    return text if options.case_sensitive else text.casefold()


def word_overlap(expected: str, got: str) -> float:
    """NeMo-Gym's word-count similarity: |common words| / (|expected| + |got|), in [0, 0.5]."""
    want, have = Counter(expected.strip().lower().split()), Counter(got.strip().lower().split())
    total = sum(want.values()) + sum(have.values())
    return sum((want & have).values()) / total if total else 1.0


def sequence_similarity(expected: str, got: str, threshold: float = 0.0) -> float:
    """``SequenceMatcher`` ratio of the trimmed, LF-normalised texts. Below ``threshold`` the
    cheap upper bounds may be returned instead (the full ratio is quadratic in the length)."""
    a = expected.replace("\r\n", "\n").strip()
    b = got.replace("\r\n", "\n").strip()
    if a == b:
        return 1.0
    matcher = SequenceMatcher(None, a, b, autojunk=False)
    for bound in (matcher.real_quick_ratio, matcher.quick_ratio):
        value = bound()
        if value < threshold:
            return value
    return matcher.ratio()


def texts_match(expected: str, got: str, options: MatchOptions) -> bool:
    if options.text_match == "word_overlap":
        if len(expected.split()) < 2 or len(got.split()) < 2:
            return expected == got  # NeMo-Gym: one-word values must be identical
        want, have = Counter(expected.strip().lower().split()), Counter(got.strip().lower().split())
        common, size = sum((want & have).values()), sum(have.values())
        return common / (sum(want.values()) + size) >= options.text_threshold and \
            (options.min_word_precision <= 0 or common / size >= options.min_word_precision)
    if options.text_match == "sequence":
        return sequence_similarity(expected, got, options.text_threshold) >= options.text_threshold
    return _norm_text(expected, options) == _norm_text(got, options)


def value_problems(expected: Any, got: Any, options: MatchOptions, where: str) -> list[str]:
    """Why ``got`` does not equal ``expected`` (empty: equal under the rules above)."""
    if isinstance(expected, dict):
        if not isinstance(got, dict):
            return [f"{where}: expected an object, got {got!r}"[:200]]
        out = [f"{where}.{k}: missing" for k in expected if k not in got]
        if not options.allow_extra_arguments or where != "arguments":
            out += [f"{where}.{k}: unexpected" for k in got if k not in expected]
        for key in expected:
            if key in got:
                out += value_problems(expected[key], got[key], options, f"{where}.{key}")
        return out
    if isinstance(expected, list):
        if not isinstance(got, list):
            return [f"{where}: expected a list, got {got!r}"[:200]]
        if len(got) != len(expected):
            return [f"{where}: expected {len(expected)} items, got {len(got)}"]
        out = []
        for i, (e, g) in enumerate(zip(expected, got)):
            out += value_problems(e, g, options, f"{where}[{i}]")
        return out
    if expected is None or isinstance(expected, bool) or got is None or isinstance(got, bool):
        return [] if expected == got and type(expected) is type(got) else [f"{where}: expected {expected!r}, got {got!r}"[:200]]
    expected_num, got_num = _number(expected), _number(got)
    both_strings = isinstance(expected, str) and isinstance(got, str)
    mixed = isinstance(expected, str) != isinstance(got, str)
    if expected_num is not None and got_num is not None and not both_strings and (options.numeric_strings or not mixed):
        if _numbers_equal(expected, got, expected_num, got_num, options):
            return []
        return [f"{where}: expected {expected!r}, got {got!r}"[:200]]
    if isinstance(expected, str) and isinstance(got, str):
        if texts_match(expected, got, options):
            return []
        return [f"{where}: expected {expected!r}, got {got!r}"[:200]]
    return [f"{where}: expected {expected!r}, got {got!r}"[:200]]


def call_problems(expected: Call, predicted: Call, options: MatchOptions) -> list[str]:
    if expected.name != predicted.name:
        return [f"name: expected {expected.name!r}, got {predicted.name!r}"]
    if predicted.arguments is None:
        return [f"arguments: not a JSON object: {str(predicted.raw_arguments)[:200]!r}"]
    if expected.arguments is None:
        return ["arguments: the expected call's arguments are not a JSON object"]
    return value_problems(expected.arguments, predicted.arguments, options, "arguments")


# JSON Schema type names, plus the Python-style names xLAM-style tool specs use ("str", "List[int]").
_TYPE_ALIASES = {"str": "string", "int": "integer", "float": "number", "bool": "boolean", "list": "array",
                 "tuple": "array", "dict": "object", "none": "null"}
_JSON_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer()),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}


def _type_name(declared: Any) -> str | None:
    if not isinstance(declared, str):
        return None
    name = declared.split(",")[0].strip().lower()  # "str, optional"
    name = name.split("[")[0]  # "list[int]"
    name = _TYPE_ALIASES.get(name, name)
    return name if name in _JSON_TYPES else None


class DeclaredTypes:
    """Per tool name, per top-level parameter: the JSON types the row's tool ``parameters`` schema
    declares (Responses tools ``{name, parameters}`` or Chat tools ``{function: {...}}``), read per
    tool on first use; parameters declaring no known type are absent (not checked)."""

    def __init__(self, tools: Iterable[Any]):
        self.tools = tools
        self._by_name: dict[str, dict[str, frozenset[str]]] = {}

    def of(self, name: str) -> dict[str, frozenset[str]]:
        if name not in self._by_name:
            self._by_name[name] = {}
            for tool in self.tools:
                spec = tool.get("function", tool) if isinstance(tool, dict) else None
                if isinstance(spec, dict) and spec.get("name") == name:
                    self._by_name[name] = _parameter_types(spec.get("parameters"))
                    break
        return self._by_name[name]


def _parameter_types(parameters: Any) -> dict[str, frozenset[str]]:
    properties = parameters.get("properties") if isinstance(parameters, dict) else None
    types: dict[str, frozenset[str]] = {}
    for key, schema in (properties if isinstance(properties, dict) else {}).items():
        kind = schema.get("type") if isinstance(schema, dict) else None
        names = frozenset(n for n in (_type_name(k) for k in (kind if isinstance(kind, list) else [kind])) if n)
        if names:
            types[key] = names
    return types


def type_problems(call: Call, declared: DeclaredTypes) -> list[str]:
    """A predicted call's arguments whose JSON type is not the one its tool declares (``"02134"``
    for a string parameter is not 2134; ``"14"`` for an integer one is not 14). Null values are
    left to the comparison (an optional argument left at its default)."""
    if not call.arguments:
        return []
    types = declared.of(call.name)
    if not types:
        return []
    out = []
    for key, value in call.arguments.items():
        allowed = types.get(key)
        if allowed and value is not None and not any(_JSON_TYPES[t](value) for t in allowed):
            out.append(f"arguments.{key}: the tool declares {'/'.join(sorted(allowed))}, got {type(value).__name__} "
                       f"{value!r}"[:200])
    return out


def _max_matching(edges: list[list[int]], n_right: int) -> list[int | None]:
    """Kuhn's augmenting paths: left i -> right index (or None). Call lists are short."""
    owner: list[int | None] = [None] * n_right

    def augment(left: int, seen: list[bool]) -> bool:
        for right in edges[left]:
            if not seen[right]:
                seen[right] = True
                if owner[right] is None or augment(owner[right], seen):
                    owner[right] = left
                    return True
        return False

    for left in range(len(edges)):
        augment(left, [False] * n_right)
    matched: list[int | None] = [None] * len(edges)
    for right, left in enumerate(owner):
        if left is not None:
            matched[left] = right
    return matched


CallCompare = Callable[[Call, Call], list[str]]


def match_calls(expected: list[Call], predicted: list[Call], options: MatchOptions | None = None,
                compare: CallCompare | None = None) -> MatchResult:
    """Maximum matching of expected to predicted calls. ``compare(expected, predicted)`` gives
    the problems of one pair (empty: they match); default :func:`call_problems` with ``options``."""
    options = options or MatchOptions()
    pair = compare or (lambda e, p: call_problems(e, p, options))
    problems = [[pair(e, p) for p in predicted] for e in expected]
    edges = [[j for j, found in enumerate(row) if not found] for row in problems]
    assignment = _max_matching(edges, len(predicted))
    used = {j for j in assignment if j is not None}
    reports = []
    for i, call in enumerate(expected):
        j = assignment[i]
        if j is not None:
            reports.append(CallReport(call.name, True, j))
            continue
        # Explain with the closest unused predicted call of the same name (fewest problems).
        candidates = [k for k in range(len(predicted)) if k not in used and predicted[k].name == call.name]
        if candidates:
            best = min(candidates, key=lambda k: len(problems[i][k]))
            reports.append(CallReport(call.name, False, None, [f"closest call #{best}: " + "; ".join(problems[i][best])]))
        elif any(p.name == call.name for p in predicted):
            reports.append(CallReport(call.name, False, None,
                                      [f"every call named {call.name!r} is matched to another expected call"]))
        else:
            reports.append(CallReport(call.name, False, None, [f"no call named {call.name!r}"]))
    denominator = max(len(expected), len(predicted))
    names_matched = sum((Counter(c.name for c in expected) & Counter(c.name for c in predicted)).values())
    full = len(used)
    exact = full == len(expected) == len(predicted)
    return MatchResult(name_score=names_matched / denominator if denominator else 1.0,
                       arguments_score=full / denominator if denominator else 1.0,
                       exact=exact, calls=reports,
                       unmatched_predicted=[k for k in range(len(predicted)) if k not in used])
