"""Rubric scoring shared by ``multichallenge`` and ``inverse_if`` (one judge call per rubric item,
the items' scores aggregated into the reward). Not an environment itself (no ``verifier.py``), so
the registry does not list it.

* ``rubric``: the aggregation modes and ``score_rubric`` (items judged concurrently, aggregated).
"""
