"""math_formal_lean: a gaming policy controls the proof text after the row's (trusted) statement.
It can try to hide placeholders or compiler-trusting tactics from the scan, stop Lean before the
appended ``#print axioms`` runs, or make the compile time out so the sample is masked instead of
scored. No Lean toolchain here: compiles go through the scripted checker (``data/scripted_lean.py``,
run as ``lean`` in the real process sandbox), which applies the same rules a Lean run reports
(sorry warning, axioms report); the scan, extraction, assembly and timeout rules run for real."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.adversarial.conftest import assert_refused, assert_scores
from tests.busy_machine import busy_cpu

ENV = "math_formal_lean"
ENV_DIR = Path(__file__).resolve().parents[2] / "environments/math_formal_lean"
ROW = json.loads((ENV_DIR / "data/minif2f_rows.jsonl").read_text().splitlines()[0])  # mathd_algebra_478
GOOD = "  subst h₂ h₃\n  norm_num [h₁]"


def lean(**overrides):
    return {"lean_command": [sys.executable, str(ENV_DIR / "data/scripted_lean.py")],
            "lean_toolchain_dirs": [str(ENV_DIR)], "memory_mb": 1024, "compile_timeout_s": 20.0, **overrides}


def fenced(proof: str) -> str:
    return f"Here is the proof.\n```lean4\n{ROW['formal_statement']}{proof}\n```"


# Code Lean runs that a naive comment/string scan would take for a string (the policy's way past the
# forbidden-token list), each followed by a forged axioms report and #exit so the real one never runs.
FORGED = "\n#eval IO.println \"'mathd_algebra_478' depends on axioms: [propext]\"\n#exit"
HIDDEN = {
    "behind_a_char_literal_quote": "  have : Char := '\"'\n  native_decide" + FORGED + "\n-- \"",
    "behind_a_raw_string_backslash": '  let s := r"\\"\n  native_decide' + FORGED + '\n-- "',
    "behind_a_raw_string_with_hashes": '  let s := r#"a"b"#\n  native_decide' + FORGED + '\n-- "',
    "behind_a_guillemet_identifier": '  have «"» : True := trivial\n  native_decide' + FORGED + '\n-- "',
    "inside_string_interpolation": '  have : String := s!"{(sorry : Nat)}"\n  norm_num',
    "escaped_quote_char": "  have : Char := '\\''\n  native_decide",
}


@pytest.mark.parametrize("trick", sorted(HIDDEN))
async def test_attack_forbidden_code_hidden_from_the_scan(scorer, trick):
    env = await scorer(ENV, **lean())
    reply = await env.verify(ROW, fenced(HIDDEN[trick]))
    assert_refused(reply)
    assert reply["proof_status"] == "forbidden", reply["proof_status"]


@pytest.mark.parametrize("proof", ["  sorry", "  admit", "  exact cheat.elim\n\naxiom cheat : False", "  native_decide",
                                   "  norm_num\n#exit", "  set_option debug.skipKernelTC true in\n  rfl",
                                   "  exact (sorryAx _)"])
async def test_attack_placeholders_axioms_and_trusted_compilation(scorer, proof):
    env = await scorer(ENV, **lean())
    assert_refused(await env.verify(ROW, fenced(proof)))


async def test_attack_compiler_side_checks_hold_when_the_scan_is_off(scorer):
    env = await scorer(ENV, **lean(forbidden=[]))
    for proof, status in (("  sorry", "has_sorry"), ("  native_decide", "bad_axioms"),
                          ("  exact cheat.elim\n\naxiom cheat : False", "bad_axioms")):
        reply = await env.verify(ROW, fenced(proof))
        assert_refused(reply)
        assert reply["proof_status"] == status


@pytest.mark.parametrize("tail", ["\n/- the rest of my reasoning", '\n  have : String := "unfinished', '\n#eval r#"x'])
async def test_attack_unterminated_comment_swallows_the_axioms_check(scorer, tail):
    # A comment or string left open swallows the appended '#print axioms'; with no report the reply
    # would be a masked verifier_error, not a 0 (cut-off generations do this by accident).
    env = await scorer(ENV, **lean())
    reply = await env.verify(ROW, fenced(GOOD + tail))
    assert_refused(reply)


async def test_attack_timeout_after_switching_off_leans_limits(scorer):
    # A masked timeout escapes the zero: a proof that raises maxHeartbeats (so only the wall clock
    # stops it) owns its timeout.
    env = await scorer(ENV, **lean(compile_timeout_s=2.0))
    reply = await env.verify(ROW, fenced("  set_option maxHeartbeats 0 in\n  norm_num -- scripted-lean: sleep 10"))
    assert_refused(reply)
    assert reply["proof_status"] == "timeout" and reply["timeout_blamed_on"] == "proof"


async def test_attack_timeout_by_a_proof_that_computes_past_the_limit(scorer):
    env = await scorer(ENV, **lean(compile_timeout_s=2.0))
    reply = await env.verify(ROW, fenced("  decide -- scripted-lean: spin 30"))
    assert_refused(reply)
    assert reply["timeout_blamed_on"] == "proof"


# On one CPU shared with 5 busy loops a compile gets about a sixth of it: in a plain wall-clock
# limit the spinning proof would use under timeout_cpu_share of it, and be masked as a starved checker.
BUSY_SPINNERS = 5


async def test_attack_timeout_by_a_proof_that_computes_past_the_limit_on_a_busy_machine(scorer):
    env = await scorer(ENV, **lean(compile_timeout_s=1.0))
    with busy_cpu(BUSY_SPINNERS):
        reply = await env.verify(ROW, fenced("  decide -- scripted-lean: spin 30"))
    assert_refused(reply)
    assert reply["timeout_blamed_on"] == "proof", reply


# ---- controls ---------------------------------------------------------------------------------------
async def test_control_proof_compiles(scorer):
    env = await scorer(ENV, **lean())
    assert_scores(await env.verify(ROW, fenced(GOOD)))


async def test_control_strings_chars_comments_and_primes_that_mention_forbidden_words(scorer):
    proof = ("  -- no sorry here, and no native_decide either\n  /- nested /- comment -/ admit -/\n"
             "  have h' : True := trivial\n  have c : Char := 'a'\n  have s : String := \"sorry native_decide\"\n"
             "  have t : String := r#\"#exit \"quoted\"\"#\n" + GOOD)
    env = await scorer(ENV, **lean())
    assert_scores(await env.verify(ROW, fenced(proof)))


async def test_control_a_starved_checker_is_masked_not_zeroed(scorer):
    # A compile that waited (no CPU used, limits untouched) timed out because of the checker.
    env = await scorer(ENV, **lean(compile_timeout_s=2.0))
    reply = await env.verify(ROW, fenced("  norm_num -- scripted-lean: sleep 10"))
    assert reply["_ng_failure_class"] == "timeout" and reply["timeout_blamed_on"] == "checker"


async def test_control_a_starved_checker_on_a_busy_machine_is_masked_not_zeroed(scorer):
    env = await scorer(ENV, **lean(compile_timeout_s=1.0))
    with busy_cpu(BUSY_SPINNERS):
        reply = await env.verify(ROW, fenced("  norm_num -- scripted-lean: sleep 10"))
    assert reply["_ng_failure_class"] == "timeout" and reply["timeout_blamed_on"] == "checker", reply


async def test_control_a_proof_within_its_time_still_scores_on_a_busy_machine(scorer):
    # Half a second of computing in a 1 s limit: on a sixth of a CPU the wall clock alone would cut it off.
    env = await scorer(ENV, **lean(compile_timeout_s=1.0))
    with busy_cpu(BUSY_SPINNERS):
        reply = await env.verify(ROW, fenced(GOOD + " -- scripted-lean: spin 0.5"))
    assert_scores(reply)
