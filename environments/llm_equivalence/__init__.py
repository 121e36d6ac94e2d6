"""Answer-vs-reference equivalence judged by an LLM, shared by ``equivalence_llm_judge``,
``nl2bash_equivalency`` and ``long_context``'s ``lc_judge`` rows (NeMo-Gym runs all three as
configs of its ``equivalence_llm_judge`` server). Not an environment itself (no ``verifier.py``),
so the registry does not list it.

* ``equivalence``: the judging flow (question/answer extraction, the passes, the swap check);
* ``environment``: the row, config and environment class the two judged-equivalence
  environments are configs of (each folder's ``verifier.py`` names it and sets its defaults).
"""
