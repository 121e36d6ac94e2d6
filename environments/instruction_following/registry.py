"""The instruction registry, filled by declaration (reasoning-gym style).

Each checker is a pure function ``fn(response: str, *, kwarg: type = default...) -> bool``
decorated with ``@instruction("family:name")``. Its keyword-only parameters *are* its
kwargs schema: the registry builds a pydantic model from them, so a row's kwargs are
type-checked (``39.0`` is accepted as ``39``) and a missing required kwarg is a 422 rather
than a random default (IFEval fills missing kwargs with random values; a verifier must not).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

Checker = Callable[..., bool]

# IFEval's relations, plus the two IFBench-era datasets also use.
Relation = Literal["less than", "at least", "at most", "exactly"]


def compare(actual: int | float, relation: str, target: int | float) -> bool:
    if relation == "less than":
        return actual < target
    if relation == "at least":
        return actual >= target
    if relation == "at most":
        return actual <= target
    return actual == target


@dataclass(frozen=True)
class InstructionSpec:
    id: str
    fn: Checker
    args: type[BaseModel]
    source: str  # "ifeval", "ifevalg" (open-instruct IF-RLVR) or "ifbench"

    def bind(self, kwargs: dict[str, Any] | None) -> dict[str, Any]:
        """Validated kwargs for ``fn``; unknown keys and ``None`` values are dropped
        (NeMo-Gym/IFBench rows carry every kwarg name of every instruction, mostly null)."""
        given = {k: v for k, v in (kwargs or {}).items() if v is not None and k in self.args.model_fields}
        return self.args.model_validate(given).model_dump()

    def check(self, response: str, bound: dict[str, Any]) -> bool:
        return bool(self.fn(response, **bound))


INSTRUCTIONS: dict[str, InstructionSpec] = {}


def instruction(instruction_id: str, *, source: str = "ifeval") -> Callable[[Checker], Checker]:
    def register(fn: Checker) -> Checker:
        if instruction_id in INSTRUCTIONS:
            raise ValueError(f"instruction {instruction_id!r} registered twice")
        fields: dict[str, Any] = {}
        for param in list(inspect.signature(fn).parameters.values())[1:]:
            if param.kind is not inspect.Parameter.KEYWORD_ONLY:
                raise TypeError(f"{fn.__name__}: kwargs must be keyword-only (after '*')")
            default = ... if param.default is inspect.Parameter.empty else param.default
            fields[param.name] = (param.annotation, default)
        model = create_model(f"Args_{fn.__name__}", __config__=ConfigDict(extra="ignore"), **fields)
        INSTRUCTIONS[instruction_id] = InstructionSpec(instruction_id, fn, model, source)
        return fn

    return register


def load_all() -> dict[str, InstructionSpec]:
    """Import every checker family (each registers itself on import)."""
    from environments.instruction_following import (  # noqa: F401 - imported for registration
        checks_format,
        checks_ifbench,
        checks_ifevalg,
        checks_keywords,
        checks_length,
    )

    return INSTRUCTIONS


def bind_all(ids: list[str], kwargs_list: list[dict[str, Any] | None]) -> list[dict[str, Any]]:
    """Validate a row's instruction ids and kwargs; raises ValueError naming every problem.

    Cached by the (ids, kwargs) content: a GRPO group sends one row with 8-16 responses, and the
    pydantic binding was a fifth of a verification. The bound dicts are shared between rows with
    the same content; checkers receive them as ``**kwargs`` and never mutate them."""
    try:
        key = (tuple(ids), _freeze(kwargs_list))
        hash(key)
    except TypeError:  # an unhashable leaf (not JSON-shaped): bind without the cache
        return _bind_all(ids, kwargs_list)
    return list(_bind_all_cached(key, ids, kwargs_list))


def _freeze(value: Any) -> Any:
    """A hashable key of a JSON-shaped value that keeps types apart (39, 39.0 and True differ;
    NaN never equals itself, so a row holding one is simply never a cache hit)."""
    if isinstance(value, dict):
        return ("d", tuple(sorted((str(k), _freeze(v)) for k, v in value.items())))
    if isinstance(value, list):
        return ("l", tuple(_freeze(v) for v in value))
    return (type(value), value)


_BIND_CACHE: dict[Any, tuple[dict[str, Any], ...]] = {}
_BIND_CACHE_SIZE = 4096


def _bind_all_cached(key: Any, ids: list[str], kwargs_list: list[dict[str, Any] | None]) -> tuple[dict[str, Any], ...]:
    bound = _BIND_CACHE.get(key)
    if bound is None:
        bound = tuple(_bind_all(ids, kwargs_list))  # raises for a bad row: nothing is cached
        if len(_BIND_CACHE) >= _BIND_CACHE_SIZE:
            _BIND_CACHE.pop(next(iter(_BIND_CACHE)))  # oldest first
        _BIND_CACHE[key] = bound
    return bound


def _bind_all(ids: list[str], kwargs_list: list[dict[str, Any] | None]) -> list[dict[str, Any]]:
    registry = load_all()
    unknown = [i for i in ids if i not in registry]
    if unknown:
        raise ValueError(f"unknown instruction id(s) {unknown}; see the README for the supported ids")
    if len(kwargs_list) != len(ids):
        raise ValueError(f"kwargs has {len(kwargs_list)} entries for {len(ids)} instruction ids")
    bound, problems = [], []
    for index, (instruction_id, kwargs) in enumerate(zip(ids, kwargs_list)):
        if kwargs is not None and not isinstance(kwargs, dict):
            problems.append(f"kwargs[{index}] ({instruction_id}) must be an object or null")
            continue
        try:
            bound.append(registry[instruction_id].bind(kwargs))
        except ValidationError as exc:
            detail = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors(include_url=False))
            problems.append(f"kwargs[{index}] ({instruction_id}): {detail}")
    if problems:
        raise ValueError(" | ".join(problems))
    return bound
