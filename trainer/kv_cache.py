"""The KV-cache argument helpers live with the decode engine (:mod:`servers.model.kv_cache`); the
trainer's logprob pass imports them from here until it moves to that module."""

from servers.model.kv_cache import cache_of, with_cache  # noqa: F401
