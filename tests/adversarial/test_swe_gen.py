"""swe_gen: a gaming policy controls the SEARCH/REPLACE edits (eval: a patch, including new
files) or the reproduction test (repro-gen: a Python program run in the instance container).
Attacks keep the bug unfixed (eval) or do not test the bug (repro-gen); the controls are honest
answers that must still score. Real Podman containers of swe's tiny instance image.
(README "Threat model" lists the classes.)"""

from __future__ import annotations

import pytest

from environments.swe_gen.data.build_examples import BUGGY, FIXED, REPRO_GOOD, STATS, edit_answer, repro_answer, tiny_row
from environments.swe_gen.verifier import SweGenConfig, SweGenEnvironment, SweGenRow
from servers.wire import ResponseObject, response_from_text
from tests.envs.conftest import swe_tiny_image  # noqa: F401 - the fixture: podman + the tiny image

pytestmark = pytest.mark.podman
FAKE = ("PASSED tests/test_stats.py::StatsTest::test_mean\\nPASSED tests/test_stats.py::StatsTest::test_total\\n"
        "PASSED tests/test_stats.py::StatsTest::test_mean_empty\\n")


def edits(*blocks: tuple[str, str, str]) -> str:
    """An answer with several SEARCH/REPLACE blocks: (path, search, replace); empty search = new file."""
    body = "\n".join(f"```python\n### {path}\n<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n```"
                     for path, search, replace in blocks)
    return f"done\n</think>\n<solution>\n{body}\n</solution>"


def keep_bug_and_add(code: str) -> tuple[str, str, str]:
    """An edit of stats.py that leaves the buggy mean as it is and appends ``code``."""
    last = BUGGY.rstrip("\n")
    return STATS, last, last + "\n\n\n" + code.rstrip("\n")


@pytest.fixture
async def swe_gen(swe_tiny_image):  # noqa: F811
    env = SweGenEnvironment(SweGenConfig(test_timeout_s=120, repro_timeout_s=60))
    yield env
    await env.close()


async def score(env: SweGenEnvironment, row: dict, text: str):
    verdict = await env.verify(SweGenRow.model_validate(row), ResponseObject.model_validate(response_from_text(text)), None)
    verdict.check()
    return verdict


def refused(verdict) -> bool:
    return verdict.reward == 0.0 and verdict.failure_class is None


# ---- eval: the patch ----------------------------------------------------------------------------
PLUGIN = ("import pytest\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
          "    outcome = yield\n    outcome.get_result().outcome = 'passed'")
EVAL_ATTACKS = {
    "new_conftest_marks_reports_passed": edits(("conftest.py", "", PLUGIN), keep_bug_and_add("pass")),
    "atexit_prints_passed_then_exits_0": edits(keep_bug_and_add(
        f"import atexit, os, sys\n\ndef _fake():\n    sys.stdout.write('{FAKE}')\n    sys.stdout.flush()\n"
        "    os._exit(0)\n\natexit.register(_fake)")),
    "xfail_raised_by_the_code_under_test": edits((STATS, BUGGY.rstrip("\n"),
                                                  "    import pytest\n    pytest.xfail('flaky')")),
    "unittest_asserts_replaced_at_import": edits(keep_bug_and_add(
        "import unittest\nunittest.TestCase.assertEqual = lambda *a, **k: None")),
}


@pytest.mark.parametrize("attack", sorted(EVAL_ATTACKS))
async def test_attack_eval_patch_games_the_test_run(swe_gen, attack):
    verdict = await score(swe_gen, tiny_row("eval"), EVAL_ATTACKS[attack])
    assert refused(verdict) and verdict.extras["resolution"] == "RESOLVED_NO", verdict.extras.get("reason")


async def test_attack_patch_code_run_by_the_rows_setup(swe_gen):
    # NeMo-Gym rows install the repository in setup_script (pip install -e . imports it). Code of
    # the patch run there could prepare the test interpreter before any harness loads (a .pth that
    # replaces unittest's asserts). The setup runs before the patch is applied: it never sees it.
    row = tiny_row("eval")
    row["instance"]["setup_script"] = row["instance"]["setup_script"].replace(
        "cd /testbed\n", "cd /testbed\npython3 -c 'import tinycalc.stats'\n", 1)
    pth = "import unittest; unittest.TestCase.assertEqual = lambda *a, **k: None"
    attack = edits(keep_bug_and_add(
        "import glob\nfor _site in glob.glob('/usr/lib/python3/dist-packages'):\n"
        f"    open(_site + '/zz_verigym_attack.pth', 'w').write({pth!r} + '\\n')"))
    verdict = await score(swe_gen, row, attack)
    assert refused(verdict) and verdict.extras["resolution"] == "RESOLVED_NO", verdict.extras.get("reason")


async def test_control_eval_fix_with_a_new_helper_module_resolves(swe_gen):
    answer = edits((STATS, BUGGY.rstrip("\n"), "    from tinycalc._divide import divide\n"
                    "    return divide(total(values), len(values))"),
                   ("tinycalc/_divide.py", "", "def divide(a, b):\n    return a / b"))
    verdict = await score(swe_gen, tiny_row("eval"), answer)
    assert verdict.reward == 1.0 and verdict.extras["result_source"] == "harness", verdict.extras.get("reason")


async def test_control_eval_plain_fix_resolves(swe_gen):
    verdict = await score(swe_gen, tiny_row("eval"), edit_answer(BUGGY.rstrip("\n"), FIXED.rstrip("\n")))
    assert verdict.reward == 1.0, verdict.extras.get("reason")


# ---- repro-gen: the reproduction test -----------------------------------------------------------
REPRO_ATTACKS = {
    # tells the trees apart by git's view of the working tree
    "git_diff_quiet": "import subprocess\nr = subprocess.run(['git', 'diff', '--quiet'])\nsys.exit(2 if r.returncode == 0 else 0)",
    "git_status_porcelain": ("import subprocess\nout = subprocess.run(['git', 'status', '--porcelain'], capture_output=True, "
                             "text=True).stdout\nsys.exit(0 if out.strip() else 2)"),
    "reads_git_index_against_files": ("import os\ntry:\n    t = os.path.getmtime('.git/index')\nexcept OSError:\n    sys.exit(1)\n"
                                      "sys.exit(0 if os.path.getmtime('tinycalc/stats.py') > t else 2)"),
    # by file times: the patched file is newer than its neighbours
    "patched_file_is_newest": ("import os\nsys.exit(0 if os.path.getmtime('tinycalc/stats.py') > "
                               "os.path.getmtime('tinycalc/__init__.py') else 2)"),
    # by the grade's own traces, or by the order of runs
    "grade_files_left_in_tmp": "import glob\nsys.exit(0 if glob.glob('/tmp/verigym*') else 2)",
    "second_run_in_a_container_passes": ("import os\nseen = os.path.exists('/tmp/.ran')\nopen('/tmp/.ran', 'w').close()\n"
                                         "sys.exit(0 if seen else 2)"),
}


@pytest.mark.parametrize("attack", sorted(REPRO_ATTACKS))
async def test_attack_repro_test_checks_the_tree_not_the_bug(swe_gen, attack):
    verdict = await score(swe_gen, tiny_row("repro-gen"), repro_answer(REPRO_ATTACKS[attack]))
    assert refused(verdict), (verdict.extras.get("return_codes_before_patch"), verdict.extras.get("return_codes_after_patch"))


@pytest.mark.xfail(strict=True, reason="open: a test that greps the source text for the buggy line tells the trees "
                                       "apart by content (README 'Threat model'); it is scored 1")
async def test_attack_repro_test_reads_the_buggy_source_line(swe_gen):
    probe = "src = open('tinycalc/stats.py').read()\nsys.exit(2 if '(len(values) + 1)' in src else 0)"
    verdict = await score(swe_gen, tiny_row("repro-gen"), repro_answer(probe))
    assert refused(verdict)


async def test_parity_option_runs_each_phase_once_on_the_plain_trees(swe_tiny_image):  # noqa: F811
    env = SweGenEnvironment(SweGenConfig(test_timeout_s=120, repro_timeout_s=60, repro_guard=False))
    try:
        verdict = await score(env, tiny_row("repro-gen"), repro_answer(REPRO_ATTACKS["git_diff_quiet"]))
    finally:
        await env.close()
    assert verdict.reward == 1.0 and verdict.extras["return_codes_before_patch"] == [2]  # paid under parity


async def test_control_repro_test_of_the_behaviour_scores(swe_gen):
    verdict = await score(swe_gen, tiny_row("repro-gen"), repro_answer(REPRO_GOOD))
    assert verdict.reward == 1.0, verdict.extras.get("reason")
    assert verdict.extras["return_codes_before_patch"] == [2, 2] and verdict.extras["return_codes_after_patch"] == [0, 0]


async def test_control_repro_test_in_a_subprocess_with_temp_files_scores(swe_gen):
    body = ("import subprocess, tempfile, os\nd = tempfile.mkdtemp()\nopen(os.path.join(d, 'in.txt'), 'w').write('1 2 3')\n"
            "code = 'from tinycalc.stats import mean; print(mean([int(x) for x in open(%r).read().split()]))' % "
            "os.path.join(d, 'in.txt')\n"
            "out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True).stdout.strip()\n"
            "sys.exit(0 if out in ('2', '2.0') else 2)")
    verdict = await score(swe_gen, tiny_row("repro-gen"), repro_answer(body))
    assert verdict.reward == 1.0, (verdict.extras.get("reason"), verdict.extras.get("output_before"))
