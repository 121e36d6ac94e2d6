"""Write example.jsonl: swerl_gen-shaped rows for swe's tiny offline instance
(``verigym-swe-tiny:latest``, built by environments/swe/images/tiny/build.sh), and two
NeMo-Gym swerl_gen rows unchanged (``nemo_gym_rows.jsonl``, from NeMo-Gym's example data),
with responses and expected outcomes.

    python -m environments.swe_gen.data.build_examples

The tiny rows' scripts follow SWE-Gym's: setup_script restores the test file at the base
commit and applies the test patch; test_script runs pytest -rA; regression_script restores
the test file. Patches and the base commit come from swe's builder (real ``git diff``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from environments.swe.data.build_examples import ANCHOR, BUGGY, IMAGE, REPO, STATS, TEST_MEAN, TESTS, make_diff
from servers.wire import response_from_text

HERE = Path(__file__).resolve().parent
FIXED = "    return total(values) / len(values)\n"
TEST_MEDIAN = ("    def test_median(self):\n        from tinycalc.stats import median\n"
               "        self.assertEqual(median([3, 1, 2]), 2)\n\n")
HEREDOC = "EOF_114329324912"
PYTEST = "python3 -m pytest --no-header -rA --tb=no -p no:cacheprovider"
F2P = "tests/test_stats.py::StatsTest::test_mean"
P2P = ["tests/test_stats.py::StatsTest::test_total", "tests/test_stats.py::StatsTest::test_mean_empty"]


def tiny_row(mode: str, *, with_median: bool = False) -> dict[str, Any]:
    base, test_patch = make_diff({TESTS: (ANCHOR, TEST_MEAN + (TEST_MEDIAN if with_median else "") + ANCHOR)})
    _, gold = make_diff({STATS: (BUGGY, FIXED)})
    restore = f"#!/bin/bash\ncd /testbed\ngit checkout {base} -- {TESTS}\n"
    f2p = [F2P, "tests/test_stats.py::StatsTest::test_median"] if with_median else [F2P]
    issue = "tinycalc.stats.mean returns the wrong value: mean([1, 2, 3]) should be 2."
    instance = {"instance_id": "verigym__tinycalc-1" + ("-median" if with_median else ""), "repo": "verigym/tinycalc",
                "base_commit": base, "patch": gold, "test_patch": test_patch, "problem_statement": issue,
                "FAIL_TO_PASS": json.dumps(f2p), "PASS_TO_PASS": json.dumps(P2P), "version": "1.0",
                "setup_script": f"{restore}git apply -v - <<'{HEREDOC}'\n{test_patch}{HEREDOC}\n",
                "test_script": f"#!/bin/bash\ncd /testbed\n{PYTEST} {TESTS}\n",
                "regression_script": restore}
    task = ("Fix the issue with SEARCH/REPLACE edits inside <solution>...</solution>." if mode == "eval" else
            "Write a test that exits 2 while the issue exists, 0 once it is fixed, 1 on anything unexpected.")
    return {"responses_create_params": {"input": [{"role": "user", "content": f"<issue>\n{issue}\n</issue>\n{task}"}]},
            "instance": instance, "mode": mode, "dataset_name": "verigym/tinycalc", "dataset_split": "test",
            "metadata": {"relevant_file_contents": json.dumps({STATS: (REPO / STATS).read_text()}),
                         "remove_repo_name": False, "image": IMAGE},
            "agent_ref": {"type": "responses_api_agents", "name": "swerl_gen_simple_agent"}}


def edit_answer(search: str, replace: str, *, path: str = STATS, tags: bool = True) -> str:
    block = f"```python\n### {path}\n<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n```"
    body = f"<solution>\n{block}\n</solution>" if tags else block
    return f"The divisor counts one value too many.\n</think>\n{body}"


def repro_answer(body: str) -> str:
    return f"I will check mean directly.\n</think>\n<solution>\n```python\nimport sys\n{body}\n```\n</solution>"


REPRO_GOOD = ("try:\n    from tinycalc.stats import mean\n    ok = mean([1, 2, 3]) == 2\nexcept Exception as exc:\n"
              "    print('unexpected', exc)\n    sys.exit(1)\nprint('issue solved' if ok else 'issue reproduced')\n"
              "sys.exit(0 if ok else 2)")


def main() -> None:
    buggy, fixed = BUGGY.rstrip("\n"), FIXED.rstrip("\n")
    evals, repro, median = tiny_row("eval"), tiny_row("repro-gen"), tiny_row("eval", with_median=True)
    out: list[dict[str, Any]] = []

    def add(row: dict[str, Any], text: str, expected: dict[str, Any]) -> None:
        out.append({**row, "response": response_from_text(text), "_expected": expected})

    add(evals, edit_answer(buggy, fixed), {"reward": 1.0, "fields": {"resolution": "RESOLVED_FULL", "patch_applied": True,
                                                                      "tests_status": {"FAIL_TO_PASS": {F2P: "PASSED"}}}})
    add(evals, edit_answer(buggy, "    return total(values) / (len(values) - 1)"),
        {"reward": 0.0, "fields": {"resolution": "RESOLVED_NO", "tests_status": {"FAIL_TO_PASS": {F2P: "FAILED"}}}})
    add(median, edit_answer(buggy, fixed), {"reward": 0.2, "fields": {"resolution": "RESOLVED_PARTIAL",
                                                                       "fail_to_pass_passed": 1, "fail_to_pass_total": 2}})
    add(evals, edit_answer("    return sum(values) / len(values)", fixed),
        {"reward": 0.0, "fields": {"reason": "unusable answer: tinycalc/stats.py: SEARCH block not found: "
                                             "'    return sum(values) / len(values)'"}})
    add(evals, edit_answer(buggy, fixed, tags=False),
        {"reward": 0.0, "fields": {"reason": "unusable answer: no <solution>...</solution> block in the answer"}})
    # repro_guard (default): two runs per phase, in crossed-over containers (environments/swe_gen/repro.py)
    add(repro, repro_answer(REPRO_GOOD), {"reward": 1.0, "fields": {"return_codes_before_patch": [2, 2],
                                                                   "return_codes_after_patch": [0, 0]}})
    add(repro, repro_answer("sys.exit(0)"), {"reward": 0.0, "fields": {"return_codes_before_patch": [0, 0]}})
    add(repro, repro_answer("print('issue reproduced')\nsys.exit(2)"),
        {"reward": 0.0, "fields": {"return_codes_before_patch": [2, 2], "return_codes_after_patch": [2, 2]}})
    broken = json.loads(json.dumps(evals))
    del broken["instance"]["setup_script"]
    add(broken, edit_answer(buggy, fixed), {"status": 422})
    # NeMo-Gym's own rows, unchanged. Their SWE-Gym images are not here (pull_missing_images is off).
    hydra, conan = [json.loads(line) for line in (HERE / "nemo_gym_rows.jsonl").read_text().splitlines()]
    add(hydra, edit_answer("def compose(\n    config_name: Optional[str] = None,",
                           "def compose(\n    config_name: Optional[str] = None,  # the config's name",
                           path="hydra/compose.py"),
        {"failure_class": "sandbox_error", "reward": 0.0,
         "fields": {"mode": "eval", "instance_id": "facebookresearch__hydra-1695"}})
    add(hydra, edit_answer("def compose(\n    config_name: str,", "def compose(config_name,", path="hydra/compose.py"),
        {"reward": 0.0, "fields": {"reason": "unusable answer: hydra/compose.py: SEARCH block not found: "
                                             "'def compose(\\n    config_name: str,'"}})
    add(conan, repro_answer("sys.exit(2)"), {"failure_class": "sandbox_error", "reward": 0.0, "fields": {"mode": "repro-gen"}})
    (HERE / "example.jsonl").write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in out))
    print(f"wrote {len(out)} examples")


if __name__ == "__main__":
    main()
