"""Writes the `tiny_tools` blend's data: math_python rows a tiny policy can learn, and the warm-start
conversations that teach it the multi-turn format.

    python -m blends.tiny_tools_data          # -> blends/data/tiny_tools.jsonl, tiny_tools_conversations.jsonl

Each row asks for a product ``a*b`` (a in 25..99, b in 4..9: always three digits, so every copy
is from a fixed offset): a 2-layer byte-level model cannot know 450 products by heart, so the way to score is the multi-turn one — call ``execute_python``
with ``print(a*b)`` (copying the operands from the prompt), read the sandbox's stdout in the tool
response, copy it into ``\\boxed{}``. Rows are NeMo-Gym ``math_with_code`` rows (agent
``math_with_code_simple_agent``), graded by the ``math_python`` environment's real tool in its
real sandbox. The tool definition is the environment's ``execute_python`` with no description,
so the whole conversation stays short (about 560 byte tokens).

The conversations file (``policy.warm_start.conversations``) holds one gold conversation per
*train* row (the validation rows are the last ``VAL_ROWS``, never shown): the user turn, the
assistant's tool call, the tool message exactly as the trainer feeds the sandbox's reply back
(the JSON body of ``/execute_python``: ``{"stdout", "stderr", "truncated", "success"}``), and the
final assistant answer. Deterministic: the same files on every run.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
ROWS_FILE = DATA / "tiny_tools.jsonl"
CONVERSATIONS_FILE = DATA / "tiny_tools_conversations.jsonl"
NUM_ROWS = 448
VAL_ROWS = 64  # blends/tiny_tools.yaml: split.val_holdout
AGENT = "math_with_code_simple_agent"  # environments/math_python: agent_names
TOOLS = [{"type": "function", "name": "execute_python",
          "parameters": {"type": "object", "properties": {"code": {"type": "string"}}}}]


def problems(n: int, seed: int) -> list[tuple[int, int]]:
    pairs = [(a, b) for a in range(25, 100) for b in range(4, 10)]
    random.Random(seed).shuffle(pairs)
    return pairs[:n]


def row(i: int, a: int, b: int) -> dict:
    return {"responses_create_params": {"input": [{"role": "user", "content": f"What is {a}*{b}?"}], "tools": TOOLS},
            "expected_result": str(a * b), "agent_ref": {"type": "responses_api_agents", "name": AGENT},
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
    pairs = problems(NUM_ROWS, args.seed)
    DATA.mkdir(parents=True, exist_ok=True)
    ROWS_FILE.write_text("".join(json.dumps(row(i, a, b)) + "\n" for i, (a, b) in enumerate(pairs)))
    train = pairs[:NUM_ROWS - VAL_ROWS]
    CONVERSATIONS_FILE.write_text("".join(json.dumps(conversation(a, b)) + "\n" for a, b in train))
    print(f"{ROWS_FILE}: {len(pairs)} rows ({VAL_ROWS} val); {CONVERSATIONS_FILE}: {len(train)} conversations")


if __name__ == "__main__":
    main()
