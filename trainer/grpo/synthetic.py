"""Single-digit addition rows routed to the math environment, for engine tests and benchmarks
(fixed, learnable, fast to score; independent of any blend)."""

from __future__ import annotations

import random
from typing import Any

from trainer.rollout.task import Routes, Task, make_tasks

AGENT = "math_simple_agent"


def arithmetic_rows(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        a, b = rng.randint(0, 4), rng.randint(0, 4)
        rows.append({"responses_create_params": {"input": [{"role": "user", "content": f"{a}+{b}="}]},
                     "agent_ref": {"type": "responses_api_agents", "name": AGENT}, "expected_answer": str(a + b),
                     "question": f"{a}+{b}="})
    return rows


def arithmetic_tasks(n: int, seed: int) -> list[Task]:
    """:func:`arithmetic_rows` as tasks routed to the math environment."""
    return make_tasks(arithmetic_rows(n, seed), Routes({AGENT: "math"}))
