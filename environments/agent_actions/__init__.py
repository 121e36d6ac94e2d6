"""Pure matching code shared by the agent-action environments (``tool_call``, ``swe_pivot``,
``next_action``): one implementation of call/argument comparison, shell-command equivalence
and text tool-call parsing. Not an environment itself (no ``verifier.py``), so the registry
does not list it.

* ``calls``: argument values and call multisets (tolerances, text rules, bipartite matching);
* ``shell``: canonical form of a shell command line (flag order, quoting, paths);
* ``arguments``: per-tool-family argument normalisation (shell / editor / generic);
* ``text_calls``: ``<tool_call>{...}</tool_call>`` blocks printed in message text.
"""
