"""swe: a gaming policy controls the patch (any file of the repository: code, tests, config,
packaging metadata, bytecode), and through it the code that runs inside the test process.
Every attack keeps the tiny instance's bug (FAIL_TO_PASS really fails) and tries to be paid
anyway; the controls are honest patches that must still resolve. Real Podman containers of
the tiny instance image. (README "Threat model" lists the classes.)"""

from __future__ import annotations

import json
import os
import py_compile
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Callable

import pytest

from environments.swe.data.build_examples import ANCHOR, TEST_MEAN
from environments.swe.models import SweConfig, SweRow
from environments.swe.verifier import SweEnvironment
from servers.wire import ResponseObject, response_from_text
from tests.envs.conftest import swe_tiny_image  # noqa: F401 - the fixture: podman + the tiny image

pytestmark = pytest.mark.podman
ROOT = Path(__file__).resolve().parents[2]
REPO = ROOT / "environments/swe/images/tiny/repo"
PYTEST_ROW, UNITTEST_ROW = [json.loads(line) for line in
                            (ROOT / "environments/swe/data/tiny_rows.jsonl").read_text().splitlines()]
ROWS = {"pytest": PYTEST_ROW, "unittest": UNITTEST_ROW}
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.invalid", "GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z",
           "GIT_COMMITTER_DATE": "2024-01-01T00:00:00Z"}
Content = str | bytes | Callable[[str], str] | None


def tiny_patch(files: dict[str, Content]) -> str:
    """A real ``git diff --binary`` over the tiny repository: path -> new content, a function of
    the old content, or None (delete). Ignored paths (__pycache__) are added too."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "testbed"
        shutil.copytree(REPO, work)

        def git(*args: str) -> str:
            return subprocess.run(["git", *args], cwd=work, check=True, capture_output=True, text=True,
                                  env={**os.environ, **GIT_ENV}).stdout
        git("init", "-q", "-b", "main")
        git("add", "-A", "-f")
        git("commit", "-q", "-m", "base")
        for rel, content in files.items():
            path = work / rel
            if content is None:
                path.unlink()
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            if callable(content):
                content = content(path.read_text())
            path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
        git("add", "-A", "-f")
        return git("diff", "--cached", "--binary")


def append(extra: str) -> Callable[[str], str]:
    return lambda old: old + extra


GOLD = {"tinycalc/stats.py": lambda old: old.replace("(len(values) + 1)", "len(values)")}
PASSING_PLUGIN = ("import pytest\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
                  "    outcome = yield\n    outcome.get_result().outcome = 'passed'\n")
FAKE = ("PASSED tests/test_stats.py::StatsTest::test_mean\\nPASSED tests/test_stats.py::StatsTest::test_total\\n"
        "PASSED tests/test_stats.py::StatsTest::test_mean_empty\\ntest_mean (tests.test_stats.StatsTest) ... ok\\n"
        "test_total (tests.test_stats.StatsTest) ... ok\\ntest_mean_empty (tests.test_stats.StatsTest) ... ok\\n")
SAY_PASSED = f"import sys\nsys.stdout.write('{FAKE}'); sys.stderr.write('{FAKE}'); sys.stdout.flush(); sys.stderr.flush()\n"


def _unchecked_pyc(source: str) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        src, out = os.path.join(tmp, "m.py"), os.path.join(tmp, "m.pyc")
        Path(src).write_text(source)
        py_compile.compile(src, cfile=out, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
        return Path(out).read_bytes()


ATTACKS: dict[str, dict[str, Content]] = {
    # test infrastructure changed by the patch
    "conftest_marks_reports_passed": {"conftest.py": PASSING_PLUGIN},
    "conftest_marks_failures_xfail": {"conftest.py": "import pytest\ndef pytest_collection_modifyitems(items):\n"
                                                     "    for item in items:\n        item.add_marker(pytest.mark.xfail)\n"},
    "pytest_ini_loads_a_plugin": {"pytest.ini": "[pytest]\naddopts = -p tinycalc.plug\n", "tinycalc/plug.py": PASSING_PLUGIN},
    "pyproject_addopts_loads_a_plugin": {"pyproject.toml": '[tool.pytest.ini_options]\naddopts = "-p tinycalc.plug"\n',
                                         "tinycalc/plug.py": PASSING_PLUGIN},
    "setup_cfg_addopts_loads_a_plugin": {"setup.cfg": "[tool:pytest]\naddopts = -p tinycalc.plug\n",
                                         "tinycalc/plug.py": PASSING_PLUGIN},
    "dist_info_entry_point_plugin": {"evil-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: evil\nVersion: 1.0\n",
                                     "evil-1.0.dist-info/entry_points.txt": "[pytest11]\nevil = tinycalc.plug\n",
                                     "tinycalc/plug.py": PASSING_PLUGIN},
    "sitecustomize_and_pth": {"sitecustomize.py": SAY_PASSED + "import os\nos._exit(0)\n",
                              "tinycalc.pth": "import os; os._exit(0)\n"},
    "unchecked_bytecode_for_the_test_module": {
        "tests/__pycache__/test_stats.cpython-311.pyc": _unchecked_pyc(
            "import unittest\nclass StatsTest(unittest.TestCase):\n    def test_mean(self): pass\n"
            "    def test_total(self): pass\n    def test_mean_empty(self): pass\n")},
    "module_shadows_unittest": {"unittest/__init__.py": SAY_PASSED + "sys.exit(0)\n", "unittest/__main__.py": "pass\n"},
    "module_shadows_pytest": {"pytest.py": SAY_PASSED + "sys.exit(0)\n"},
    # code under test that fakes results from inside the test process
    "atexit_prints_passed_then_exits_0": {"tinycalc/__init__.py": append(
        "import atexit, os\ndef _fake():\n" + "".join("    " + line + "\n" for line in SAY_PASSED.splitlines())
        + "    os._exit(0)\natexit.register(_fake)\n")},
    "prints_passed_and_exits_0_mid_test": {"tinycalc/stats.py": append(
        "\n_mean = mean\ndef mean(values):\n    if values:\n        import os\n"
        + "".join("        " + line + "\n" for line in SAY_PASSED.splitlines()) + "        os._exit(0)\n"
        "    return _mean(values)\n")},
    "unittest_asserts_replaced_at_import": {"tinycalc/__init__.py": append(
        "import unittest\nunittest.TestCase.assertEqual = lambda *a, **k: None\n")},
    "pytest_report_patched_at_import": {"tinycalc/__init__.py": append(
        "try:\n    import _pytest.reports as _r\n    _init = _r.TestReport.__init__\n"
        "    def _passed(self, *a, **k):\n        _init(self, *a, **k)\n        self.outcome = 'passed'\n"
        "    _r.TestReport.__init__ = _passed\nexcept ImportError:\n    pass\n")},
    "xfail_raised_by_the_code_under_test": {"tinycalc/stats.py": append(
        "\n_mean = mean\ndef mean(values):\n    if values:\n        import pytest\n        pytest.xfail('flaky')\n"
        "    return _mean(values)\n")},
    "skip_raised_by_the_code_under_test": {"tinycalc/stats.py": append(
        "\n_mean = mean\ndef mean(values):\n    if values:\n        import unittest\n"
        "        raise unittest.SkipTest('later')\n    return _mean(values)\n")},
}


@pytest.fixture(scope="module")
def patches() -> dict[str, str]:
    return {name: tiny_patch(files) for name, files in ATTACKS.items()}


@pytest.fixture
async def swe(swe_tiny_image):  # noqa: F811
    env = SweEnvironment(SweConfig(test_timeout_s=60))
    yield env
    await env.close()


async def grade(env: SweEnvironment, runner: str, patch: str):
    response = ResponseObject.model_validate(response_from_text(f"```diff\n{patch}```"))
    verdict = await env.verify(SweRow.model_validate(ROWS[runner]), response, None)
    verdict.check()
    return verdict


def refused(verdict) -> bool:
    return verdict.reward == 0.0 and verdict.failure_class is None and not verdict.extras["resolved"]


@pytest.mark.parametrize("runner", ["pytest", "unittest"])
@pytest.mark.parametrize("attack", sorted(ATTACKS))
async def test_attack_patch_games_the_test_run(swe, patches, attack, runner):
    verdict = await grade(swe, runner, patches[attack])
    assert refused(verdict), (verdict.extras.get("reason"), verdict.extras.get("log_tail", "")[-800:])
    assert verdict.extras["result_source"] == "harness"


async def test_attack_conftest_with_a_quoted_path_name(swe):
    # git quotes unusual names in its headers ("a/x\ty/conftest.py"): the guard reads the tree,
    # not the patch text.
    patch = tiny_patch({"odd\tdir/conftest.py": PASSING_PLUGIN, "conftest.py": "pytest_plugins = []\n"})
    verdict = await grade(swe, "pytest", patch)
    assert refused(verdict) and "conftest.py" in verdict.extras["restored_paths"], verdict.extras


async def test_parity_option_reads_the_log_as_swe_bench_does(swe_tiny_image, patches):  # noqa: F811
    # protect_test_infrastructure: false + result_channel: log is SWE-bench / NeMo-Gym: the same
    # attacks are paid there (why the safe rules are the default).
    env = SweEnvironment(SweConfig(test_timeout_s=60, protect_test_infrastructure=False, result_channel="log"))
    try:
        paid = {name: (await grade(env, "pytest", patches[name])).reward
                for name in ("atexit_prints_passed_then_exits_0", "conftest_marks_reports_passed",
                             "xfail_raised_by_the_code_under_test", "unittest_asserts_replaced_at_import")}
    finally:
        await env.close()
    assert paid == dict.fromkeys(paid, 1.0), paid


# ---- controls -----------------------------------------------------------------------------------
@pytest.mark.parametrize("runner", ["pytest", "unittest"])
async def test_control_gold_patch_resolves(swe, runner):
    verdict = await grade(swe, runner, tiny_patch(GOLD))
    assert verdict.reward == 1.0 and verdict.extras["result_source"] == "harness", verdict.extras.get("reason")
    assert "restored_paths" not in verdict.extras and "removed_paths" not in verdict.extras


async def test_control_fix_with_config_edits_and_stdlib_named_submodule_resolves(swe):
    # An honest patch that also touches packaging config and adds a module named like a standard
    # library one inside the package: the config edit is put back, the submodule stays.
    files = {**GOLD, "setup.cfg": "[metadata]\nname = tinycalc\n",
             "tinycalc/json.py": "def dumps(x):\n    return str(x)\n",
             "tinycalc/__init__.py": append("from tinycalc import json as _json  # noqa\n")}
    verdict = await grade(swe, "pytest", tiny_patch(files))
    assert verdict.reward == 1.0, verdict.extras.get("reason")
    assert verdict.extras["restored_paths"] == ["setup.cfg"] and "removed_paths" not in verdict.extras


async def test_control_declared_xfail_and_expected_failure_still_count(swe):
    # A FAIL_TO_PASS test the test patch itself declares xfail (pytest marker, unittest decorator)
    # passes as XFAIL, as in SWE-bench.
    test_patch = tiny_patch({"tests/test_stats.py": lambda old: old.replace(
        ANCHOR, "    @unittest.expectedFailure\n" + TEST_MEAN + ANCHOR)})
    for runner in ("pytest", "unittest"):
        row = {**ROWS[runner], "test_patch": test_patch}
        response = ResponseObject.model_validate(response_from_text("```diff\n" + tiny_patch(
            {"tinycalc/stats.py": lambda old: old.replace("(len(values) + 1)", "(len(values) + 2)")}) + "```"))
        verdict = await swe.verify(SweRow.model_validate(row), response, None)
        assert verdict.reward == 1.0, (runner, verdict.extras.get("reason"), verdict.extras.get("tests_status"))


# ---- agent mode: the session's repository ---------------------------------------------------------
async def test_attack_agent_reads_the_fix_from_future_commits():
    # An image cloned with its history holds the fix's commit after base_commit (a branch, a tag, a
    # stash, a remote ref, a reflog entry): a session sees none of it (prune_history, run on a real
    # repository in a process sandbox, as at the start of every agent session).
    from environments.swe import agent
    from sandboxes import SandboxSpec, open_backend
    backend = open_backend("process")
    setup = ("git init -q -b main && git config user.email t@x && git config user.name t && echo bug > f && "
             "git add f && git commit -qm base && git rev-parse HEAD > /tmp/base 2>/dev/null; "
             "git checkout -qb fix && echo fixed > f && git commit -qam 'the fix' && git tag v-fix && "
             "git update-ref refs/remotes/origin/main HEAD && git checkout -q main && echo wip > f && git stash -q && "
             "git rev-parse fix")
    try:
        async with await backend.create(SandboxSpec(workdir="/workspace")) as sb:
            made = await sb.exec(["bash", "-c", setup], env={"HOME": "/workspace"})
            assert made.ok, made.text("stderr")
            fix = made.text().split()[-1]
            await agent.prune_history(sb, "/workspace", SweConfig())
            probe = await sb.exec(["bash", "-c", f"git log --all --oneline | wc -l; git cat-file -t {fix} 2>&1; "
                                                 "git fsck --unreachable --no-reflogs 2>&1 | wc -l; git grep -c fixed $(git "
                                                 "rev-list --all) 2>/dev/null | wc -l; cat f"],
                                  env={"HOME": "/workspace"})
    finally:
        await backend.close()
    lines = probe.text().splitlines()
    assert lines[0] == "1" and "fatal" in lines[1] and lines[2:] == ["0", "0", "bug"], probe.text()
