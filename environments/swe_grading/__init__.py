"""SWE instance images, instance sandboxes and patch grading shared by ``swe`` and ``swe_gen``.
Not an environment itself (no ``verifier.py``), so the registry does not list it.

* ``images``: instance images (pulled, from a template, or built by a local recipe; Apptainer SIFs);
* ``instances``: the container keys both environments share and their sandbox pool;
* ``patches``: patch extraction and normalisation;
* ``grading``: one patch graded in a fresh sandbox (apply, protect, test) with ``integrity``'s rules,
  the ``harness/`` result channel (``results``) and the log parsers (``logparse``);
* ``tiny_repo`` and ``images/tiny/``: the offline tiny instance both environments' examples use.
"""
