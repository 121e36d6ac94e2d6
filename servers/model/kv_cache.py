"""The key/value cache argument of a Hugging Face causal LM, across transformers versions.

transformers 5.x renamed the forward's ``past_key_values`` to ``cache`` (and the output field with
it); the old name warns and is to be removed. The decode loop and the shared-prompt logprob pass
both hand a cache back to the model, so they ask here which name this model's forward takes.
"""

from __future__ import annotations

import inspect
from functools import lru_cache
from typing import Any


@lru_cache(maxsize=None)
def _cache_parameter(model_class: type) -> str:
    params = inspect.signature(model_class.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def with_cache(model: Any, cache: Any) -> dict[str, Any]:
    """``{name: cache}`` for ``model(**...)``, the name this model's forward takes."""
    return {_cache_parameter(type(model)): cache}


def cache_of(output: Any) -> Any:
    """The key/value cache a forward pass returned (None when the model returns none)."""
    cache = output.get("cache") if hasattr(output, "get") else None
    return cache if cache is not None else getattr(output, "past_key_values", None)
