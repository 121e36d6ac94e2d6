"""Final-answer math grading shared by ``math`` and ``math_python`` (both score an extracted answer
with the same code). Not an environment itself (no ``verifier.py``), so the registry does not
list it.

* ``extract``: the final answer of a response (``\\boxed{}``, ``Answer:`` line, last number);
* ``answer_cost``: the cost guard (answers too long or too deep to read score 0 up front);
* ``notation``: rewrites into notations math-verify reads (repeating decimals, units, intervals);
* ``scoring``: the exact fast path and math-verify (run in the CPU pool);
* ``symbolic``: the symbolic fast path (small expressions decided by their values, no sympy);
* ``final_answer``: the verdict for an extracted answer, the steps above in order, with its cache.
"""
