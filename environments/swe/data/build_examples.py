"""Rebuild ``tiny_rows.jsonl`` (SWE-bench-style rows for the local tiny instance image) and
``example.jsonl`` (those rows with responses and expected outcomes, plus the 5 real
SWE-bench rows unchanged).

    python -m environments.swe.data.build_examples

Patches are made with real ``git diff`` over the tiny repository (environments/swe_grading/
tiny_repo.py), so they apply exactly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from environments.swe_grading.tiny_repo import ANCHOR, BUGGY, IMAGE, STATS, TEST_MEAN, TESTS, make_diff
from servers.wire import response_from_text

HERE = Path(__file__).resolve().parent
SHARED = HERE.parents[2].parent / "shared" / "data" / "nemo_gym"


def tiny_rows() -> list[dict[str, Any]]:
    base, test_patch = make_diff({TESTS: (ANCHOR, TEST_MEAN + ANCHOR)})
    _, gold = make_diff({STATS: (BUGGY, "    return total(values) / len(values)\n")})
    problem = ("tinycalc.stats.mean returns the wrong value: mean([1, 2, 3]) should be 2. "
               "Fix it. The repository is at /testbed.")
    common = {"repo": "verigym/tinycalc", "base_commit": base, "patch": gold, "test_patch": test_patch,
              "version": "1.0", "image": IMAGE, "problem_statement": problem,
              "responses_create_params": {"input": [{"role": "user", "content": problem}]}}
    pytest_row = {**common, "instance_id": "verigym__tinycalc-1",
                  "FAIL_TO_PASS": json.dumps(["tests/test_stats.py::StatsTest::test_mean"]),
                  "PASS_TO_PASS": json.dumps(["tests/test_stats.py::StatsTest::test_total",
                                              "tests/test_stats.py::StatsTest::test_mean_empty"]),
                  "test_command": "python3 -m pytest --no-header -rA --tb=no -p no:cacheprovider {test_files}"}
    unittest_row = {**common, "instance_id": "verigym__tinycalc-2",
                    "FAIL_TO_PASS": ["test_mean (tests.test_stats.StatsTest)"],
                    "PASS_TO_PASS": ["test_total (tests.test_stats.StatsTest)",
                                     "test_mean_empty (tests.test_stats.StatsTest)"],
                    "test_command": "python3 -m unittest -v tests.test_stats"}
    return [pytest_row, unittest_row]


def patches() -> dict[str, str]:
    _, gold = make_diff({STATS: (BUGGY, "    return total(values) / len(values)\n")})
    _, wrong = make_diff({STATS: (BUGGY, "    return total(values) / (len(values) - 1)\n")})
    # Cheats: makes the (old) tests pass without fixing anything; the restored test patch wins.
    _, edits_tests = make_diff({TESTS: (ANCHOR, "    def test_mean(self):\n        pass\n\n" + ANCHOR)})
    stale = gold.replace("(len(values) + 1)", "(len(values) + 2)")  # context that is not in the file
    return {"gold": gold, "wrong": wrong, "edits_tests": edits_tests, "stale": stale}


def submit_response(patch: str) -> dict[str, Any]:
    resp = response_from_text("Submitting my fix.")
    resp["output"].append({"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "submit",
                           "arguments": json.dumps({"patch": patch}), "status": "completed"})
    return resp


def main() -> None:
    rows = tiny_rows()
    (HERE / "tiny_rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    p = patches()
    pytest_row, unittest_row = rows
    fenced = lambda patch: response_from_text(f"The divisor was off by one.\n\n```diff\n{patch}```\n")  # noqa: E731
    examples: list[dict[str, Any]] = [
        {**pytest_row, "response": fenced(p["gold"]),
         "_expected": {"reward": 1.0, "fields": {"resolved": True, "patch_applied": True, "apply_method": "git apply",
                                                 "tests_status": {"FAIL_TO_PASS": {"tests/test_stats.py::StatsTest::test_mean": "PASSED"}}}}},
        {**unittest_row, "response": submit_response(p["gold"]),
         "_expected": {"reward": 1.0, "fields": {"resolved": True, "patch_source": "submit"}}},
        {**pytest_row, "response": response_from_text(p["wrong"]),
         "_expected": {"reward": 0.0, "fields": {"resolved": False, "patch_applied": True,
                                                 "tests_status": {"FAIL_TO_PASS": {"tests/test_stats.py::StatsTest::test_mean": "FAILED"}}}}},
        {**pytest_row, "response": fenced(p["edits_tests"]),
         "_expected": {"reward": 0.0, "fields": {"resolved": False, "patch_applied": True}}},
        {**pytest_row, "response": fenced(p["stale"]),
         "_expected": {"reward": 0.0, "fields": {"resolved": False, "patch_applied": False,
                                                 "reason": "the patch does not apply (git apply and patch --fuzz failed)"}}},
        {**pytest_row, "response": response_from_text("I could not find the bug."),
         "_expected": {"reward": 0.0, "fields": {"patch_source": "none", "evaluation_completed": False}}},
        # Agent mode: the fix made through the tools, graded from the session's git diff.
        {**unittest_row, "response": response_from_text("Fixed the divisor in mean()."),
         "_script": [
             {"name": "exec", "arguments": {"command": "python3 -m pytest -q -p no:cacheprovider tests > /dev/null; git status --short"},
              "expect": {"exit_code": 0, "stdout": ""}},
             {"name": "read_file", "arguments": {"path": "tinycalc/stats.py", "start_line": 11},
              "expect": {"content": BUGGY, "total_lines": 11}},
             {"name": "str_replace", "arguments": {"path": "tinycalc/stats.py", "old_str": "(len(values) + 1)",
                                                   "new_str": "len(values)"}, "expect": {"replaced_at_line": 11}},
             {"name": "submit", "arguments": {}, "expect": {"submitted": True, "source": "git diff"}}],
         "_expected": {"reward": 1.0, "fields": {"resolved": True, "patch_source": "session diff"}}},
        # Malformed: no base_commit.
        {**{k: v for k, v in pytest_row.items() if k != "base_commit"}, "response": fenced(p["gold"]),
         "_expected": {"status": 422}},
    ]
    # The real SWE-bench rows, unchanged: their images are not on this machine and pulling at
    # verify time is off, so they are infrastructure failures, never a silent 0.
    for line in (SHARED / "swebench" / "example.jsonl").read_text().splitlines():
        if line.strip():
            real = json.loads(line)
            examples.append({**real, "response": fenced(real["patch"]),
                             "_expected": {"failure_class": "sandbox_error", "reward": 0.0}})
    (HERE / "example.jsonl").write_text("".join(json.dumps(r) + "\n" for r in examples))
    print(f"wrote {len(rows)} tiny rows and {len(examples)} examples")


if __name__ == "__main__":
    main()
