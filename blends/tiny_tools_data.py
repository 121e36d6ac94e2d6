"""Writes the `tiny_tools` blend's data: math_python rows a tiny policy can learn, and the warm-start
conversations that teach it the multi-turn format.

    python -m blends.tiny_tools_data          # -> blends/data/tiny_tools.jsonl, tiny_tools_conversations.jsonl

Each row asks for a product ``a*b`` of two digits 2..9 (64 problems, 7 rows each) and requires the
tool: ``expected_code_contains`` is ``a*b``, so a response scores only if the model called
``execute_python`` with that product (the environment checks the cells the session ran) and then
answered what the sandbox printed. A 2-layer byte-level model learns each problem's call by heart,
as it learns the ``tiny`` blend's sums: what it cannot do is copy operands from 80 tokens back
(measured on 450 two-digit products: 0 of 16 held-out calls right after 1,300 warm-start steps,
blends/README.md), so the task keeps the problems few and repeats them. The answer is a copy from
the tool's reply, a few tokens back, which the model does learn. Rows are NeMo-Gym
``math_with_code`` rows (agent ``math_with_code_simple_agent``), graded by the ``math_python``
environment's real tool in its real sandbox. The tool definition is the environment's
``execute_python`` with no description, so the whole conversation stays short (about 550 byte tokens).

The validation rows are the last ``VAL_ROWS`` rows: held-out rows of the same 64 problems (as in the
``tiny`` blend: the validation reward measures how well the policy does the task). The conversations
file (``policy.warm_start.conversations``) holds one gold conversation per *train* row: the user
turn, the assistant's tool call, the tool message exactly as the trainer feeds the sandbox's reply
back (the JSON body of ``/execute_python``: ``{"stdout", "stderr", "truncated", "success"}``), and
the final assistant answer. Deterministic: the same files on every run.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
ROWS_FILE = DATA / "tiny_tools.jsonl"
CONVERSATIONS_FILE = DATA / "tiny_tools_conversations.jsonl"
VAL_ROWS = 64  # blends/tiny_tools.yaml: split.val_holdout
AGENT = "math_with_code_simple_agent"  # environments/math_python: agent_names
TOOLS = [{"type": "function", "name": "execute_python",
          "parameters": {"type": "object", "properties": {"code": {"type": "string"}}}}]


DIGITS = range(2, 10)
ROWS_PER_PROBLEM = 7


def problems(seed: int) -> list[tuple[int, int]]:
    """Every product of two digits 2..9, ``ROWS_PER_PROBLEM`` rows each, shuffled."""
    pairs = [(a, b) for a in DIGITS for b in DIGITS] * ROWS_PER_PROBLEM
    random.Random(seed).shuffle(pairs)
    return pairs


def row(i: int, a: int, b: int) -> dict:
    return {"responses_create_params": {"input": [{"role": "user", "content": f"What is {a}*{b}?"}], "tools": TOOLS},
            "expected_result": str(a * b), "expected_code_contains": f"{a}*{b}", "agent_ref": {"type": "responses_api_agents", "name": AGENT},
            "dataset": "verigym_tiny_tools", "uuid": f"tiny-tools-{i:03d}"}


def conversation(a: int, b: int) -> dict:
    """The gold conversation in chat format (what the trainer's chat template renders); the tool
    message is the body the math_python server answers for ``print(a*b)``, as the trainer dumps it."""
    code = f"print({a}*{b})"
    reply = {"stdout": f"{a * b}\n", "stderr": "", "truncated": False, "success": True}
    return {"tools": TOOLS, "messages": [
        {"role": "user", "content": f"What is {a}*{b}?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "execute_python", "arguments": {"code": code}}}]},
        {"role": "tool", "content": json.dumps(reply)},
        {"role": "assistant", "content": f"\\boxed{{{a * b}}}"}]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    pairs = problems(args.seed)
    DATA.mkdir(parents=True, exist_ok=True)
    ROWS_FILE.write_text("".join(json.dumps(row(i, a, b)) + "\n" for i, (a, b) in enumerate(pairs)))
    train = pairs[:len(pairs) - VAL_ROWS]
    CONVERSATIONS_FILE.write_text("".join(json.dumps(conversation(a, b)) + "\n" for a, b in train))
    print(f"{ROWS_FILE}: {len(pairs)} rows ({VAL_ROWS} val); {CONVERSATIONS_FILE}: {len(train)} conversations")


if __name__ == "__main__":
    main()
