"""Writes the `tiny_tools` blend's data: math_python rows a tiny policy can learn, and the warm-start
conversations that teach it the multi-turn format.

    python -m blends.tiny_tools_data          # -> blends/data/tiny_tools.jsonl, tiny_tools_conversations.jsonl

Each row asks for a product ``a*b`` of digits 2 <= a <= b <= 9 (36 problems, 12 rows each) and
requires the tool: ``expected_code_contains`` is ``a*b``, so a response scores only if the model
called ``execute_python`` with that product (the environment checks the cells the session ran) and
then answered what the sandbox printed. Rows are NeMo-Gym ``math_with_code`` rows (agent
``math_with_code_simple_agent``), graded by the ``math_python`` environment's real tool in its real
sandbox. The tool definition is the environment's ``execute_python`` with no description.

Why this shape (measured, blends/README.md): a 2-layer byte-level model finds *which* digits a
prompt holds by their content, as it does for the ``tiny`` blend's sums; telling the first operand
from the second, 80 tokens back, it did not learn (0 of 16 held-out calls right after 1,300
warm-start steps on 450 two-digit products). With the smaller factor first, the call is fixed by
which digits the prompt holds; the answer is the product of the same digits.

The validation rows are the last ``VAL_ROWS`` rows: held-out rows of the same 36 problems (as in the
``tiny`` blend: the validation reward measures how well the policy does the task). The conversations
file (``policy.warm_start.conversations``) holds, per *train* row, the gold conversation (the user
turn, the assistant's tool call, the tool message exactly as the trainer feeds the sandbox's reply
back: the JSON body of ``/execute_python``, ``{"stdout", "stderr", "truncated", "success"}``, and
the final assistant answer) twice: with the tool list, as a rollout renders it (about 520 tokens,
270 of them the system prompt), and without it (about 250 tokens). In the long form the two
operand digits are 2 of ~500 context tokens; the short form is learned sooner and what it teaches
(attend to the prompt's digits) carries over to the long form. Deterministic: the same files on every run.
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
ROWS_PER_PROBLEM = 12


def problems(seed: int) -> list[tuple[int, int]]:
    """Every product ``a*b`` of digits 2 <= a <= b <= 9 (36 problems), ``ROWS_PER_PROBLEM`` rows
    each, shuffled. The smaller factor comes first, so the call is fixed by *which* digits the
    prompt holds, not by their order (see the module docstring)."""
    pairs = [(a, b) for a in DIGITS for b in DIGITS if a <= b] * ROWS_PER_PROBLEM
    random.Random(seed).shuffle(pairs)
    return pairs


def row(i: int, a: int, b: int) -> dict:
    return {"responses_create_params": {"input": [{"role": "user", "content": f"What is {a}*{b}?"}], "tools": TOOLS},
            "expected_result": str(a * b), "expected_code_contains": f"{a}*{b}", "agent_ref": {"type": "responses_api_agents", "name": AGENT},
            "dataset": "verigym_tiny_tools", "uuid": f"tiny-tools-{i:03d}"}


def conversation(a: int, b: int, with_tools: bool = True) -> dict:
    """The gold conversation in chat format (what the trainer's chat template renders); the tool
    message is the body the math_python server answers for ``print(a*b)``, as the trainer dumps it.
    ``with_tools=False`` leaves the tool list (the system prompt) out: the short form."""
    code = f"print({a}*{b})"
    reply = {"stdout": f"{a * b}\n", "stderr": "", "truncated": False, "success": True}
    convo = {"messages": [
        {"role": "user", "content": f"What is {a}*{b}?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "execute_python", "arguments": {"code": code}}}]},
        {"role": "tool", "content": json.dumps(reply)},
        {"role": "assistant", "content": f"\\boxed{{{a * b}}}"}]}
    return {"tools": TOOLS, **convo} if with_tools else convo


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    pairs = problems(args.seed)
    DATA.mkdir(parents=True, exist_ok=True)
    ROWS_FILE.write_text("".join(json.dumps(row(i, a, b)) + "\n" for i, (a, b) in enumerate(pairs)))
    train = pairs[:len(pairs) - VAL_ROWS]
    CONVERSATIONS_FILE.write_text("".join(json.dumps(conversation(a, b, with_tools)) + "\n"
                                          for a, b in train for with_tools in (True, False)))
    print(f"{ROWS_FILE}: {len(pairs)} rows ({VAL_ROWS} val); "
          f"{CONVERSATIONS_FILE}: {2 * len(train)} conversations (each train row with and without the tool list)")


if __name__ == "__main__":
    main()
