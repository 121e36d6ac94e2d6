"""Write example.jsonl: NeMo-Gym's math_formal_lean rows (unchanged) with responses and ``_expected``.

    python environments/math_formal_lean/data/build_examples.py

The rows are the five miniF2F rows of NeMo-Gym's example data. The examples run under
``example_config.yaml``: the compile step is the SCRIPTED checker ``scripted_lean.py`` (there
is no Lean toolchain here), so a "full reward" example shows that extraction, assembly, the
axiom check and scoring work end to end, not that the proof is true in Lean. The forbidden-
token and empty rows never reach the checker.
"""

from __future__ import annotations

import json
from pathlib import Path

from servers.wire import response_from_text

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parents[3] / "shared/data/nemo_gym/math_formal_lean/example.jsonl"
ROWS_FILE = HERE / "minif2f_rows.jsonl"  # the five NeMo-Gym rows, copied unchanged
CHECK_PROOF_TOOL = {"type": "function", "name": "check_proof", "strict": False,
                    "description": "Compile a Lean 4 proof attempt and return Lean's errors.",
                    "parameters": {"type": "object", "properties": {"proof": {"type": "string"}},
                                   "required": ["proof"]}}


def rows() -> list[dict]:
    if SOURCE.exists():
        ROWS_FILE.write_text(SOURCE.read_text())
    return [json.loads(line) for line in ROWS_FILE.read_text().splitlines() if line.strip()]


def fenced(code: str, plan: str = "Plan: substitute the hypotheses and normalise.") -> str:
    return f"{plan}\n\n```lean4\n{code}\n```"


def main() -> None:
    r = rows()
    algebra_478, nt_2003, aime, amc, algebra_141 = r
    out = []

    def add(row: dict, text: str, expected: dict, **extra: object) -> None:
        out.append({**row, **extra, "response": response_from_text(text), "_expected": expected})

    statement = algebra_478["formal_statement"].rstrip()
    add(algebra_478, "<think>b = 30 and h = 13/2, so v = 65.</think>\n" + fenced(
        f"{statement}\n  subst h₂ h₃\n  norm_num [h₁]"),
        {"reward": 1.0, "fields": {"proof_status": "completed", "needs_correction": False,
                                    "axioms": ["propext", "Classical.choice", "Quot.sound"]}})
    add(algebra_141, fenced("  nlinarith [sq_nonneg (a - b), sq_nonneg (a + b), h₁, h₂]"),
        {"reward": 1.0, "fields": {"proof_status": "completed"}})
    add(nt_2003, fenced("  intro h\n  omega -- scripted-lean: error omega could not prove the goal"),
        {"reward": 0.0, "fields": {"proof_status": "compile_error", "needs_correction": True}})
    add(aime, fenced("  -- the logs are proportional\n  sorry"),
        {"reward": 0.0, "fields": {"proof_status": "forbidden", "forbidden_found": ["sorry"]}})
    add(amc, fenced("  native_decide"),
        {"reward": 0.0, "fields": {"proof_status": "forbidden", "forbidden_found": ["native_decide"]}})
    add(algebra_141, fenced("  exact absurd h₁ (by admit)"),
        {"reward": 0.0, "fields": {"proof_status": "forbidden", "forbidden_found": ["admit"]}})
    add(algebra_478, fenced("  norm_num [h₁, h₂, h₃]\n\naxiom cheat : False"),
        {"reward": 0.0, "fields": {"proof_status": "forbidden", "forbidden_found": ["axiom"]}})
    add(algebra_478, "", {"reward": 0.0, "fields": {"proof_status": "empty_generation", "needs_correction": True}})
    # NeMo-Gym's proof_refinement_agent sends turn_index; the reply echoes it.
    add(nt_2003, fenced("  nlinarith -- scripted-lean: error linarith failed"),
        {"reward": 0.0, "fields": {"turn_index": 1, "proof_status": "compile_error"}}, turn_index=1)
    # Multi-turn session: check_proof returns the error, the final answer is the fixed proof.
    session_row = json.loads(json.dumps(algebra_478))
    session_row["responses_create_params"]["tools"] = [CHECK_PROOF_TOOL]
    out.append({**session_row,
                "_script": [{"name": "check_proof", "arguments": {"proof": fenced("  linarith -- scripted-lean: error linarith failed")},
                             "expect": {"compiled": False, "status": "compile_error"}},
                            {"name": "check_proof", "arguments": {"proof": "  subst h₂ h₃\n  norm_num [h₁]"},
                             "expect": {"compiled": True, "status": "completed"}}],
                "response": response_from_text(fenced(f"{statement}\n  subst h₂ h₃\n  norm_num [h₁]")),
                "_expected": {"reward": 1.0, "fields": {"proof_status": "completed"}}})
    malformed = {k: v for k, v in algebra_478.items() if k != "formal_statement"}
    add(malformed, fenced("  norm_num"), {"status": 422})
    (HERE / "example.jsonl").write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in out))
    print(f"wrote {len(out)} examples")


if __name__ == "__main__":
    main()
