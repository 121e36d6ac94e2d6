"""swe: patch extraction, test-log parsing and the resolution rule (pure, no containers)."""

from __future__ import annotations

import json

import pytest

from environments.swe.logparse import FAILED, PASSED, SKIPPED, XFAIL, parse_log, parse_pytest, parse_unittest, resolve
from environments.swe.models import SweConfig, SweRow
from environments.swe.patches import extract_patch, files_in_patch
from environments.swe.verifier import command_for_tests
from servers.wire import ResponseObject, response_from_text

PATCH = "diff --git a/a.py b/a.py\n--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"


def _resp(output):
    return ResponseObject.model_validate({"output": output})


def test_patch_sources():
    submit = {"type": "function_call", "name": "submit", "arguments": json.dumps({"patch": PATCH})}
    msg = response_from_text(f"fix:\n```diff\n{PATCH}```\nbye")["output"][0]
    assert extract_patch(_resp([msg, submit]), ("submit",)) == (PATCH, "submit")
    assert extract_patch(_resp([msg]), ("submit",)) == (PATCH, "message")
    bare = response_from_text("Here it is\n" + PATCH.rstrip("\n"))["output"][0]
    assert extract_patch(_resp([bare]), ("submit",)) == (PATCH, "message")  # final newline restored
    crlf = response_from_text("```patch\n" + PATCH.replace("\n", "\r\n") + "```")["output"][0]
    assert extract_patch(_resp([crlf]), ("submit",)) == (PATCH, "message")
    prose = response_from_text("```python\nx = 2\n```")["output"][0]
    assert extract_patch(_resp([prose]), ("submit",)) == (None, "none")
    other = {"type": "function_call", "name": "execute_bash", "arguments": json.dumps({"patch": PATCH})}
    assert extract_patch(_resp([other]), ("submit",)) == (None, "none")


def test_files_in_patch():
    two = PATCH + "diff --git a/t/new.py b/t/new.py\nnew file mode 100644\n--- /dev/null\n+++ b/t/new.py\n@@ -0,0 +1 @@\n+y\n"
    assert files_in_patch(two) == ["a.py", "t/new.py"]
    assert files_in_patch("--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n") == ["x.py"]


PYTEST_LOG = """
tests/test_a.py::test_one PASSED                                         [ 33%]
tests/test_a.py::test_two[a b] FAILED                                    [ 66%]
=========================== short test summary info ============================
PASSED tests/test_a.py::test_one
PASSED tests/test_a.py::Cls::test_x[1-2]
FAILED tests/test_a.py::test_two[a b] - AssertionError: 1 - 2
ERROR tests/test_b.py::test_setup - fixture 'db' not found
SKIPPED [1] tests/test_c.py:3: no network
XFAIL tests/test_a.py::test_known - reason: bug 12
"""


def test_parse_pytest():
    s = parse_pytest(PYTEST_LOG)
    assert s["tests/test_a.py::test_one"] == PASSED
    assert s["tests/test_a.py::Cls::test_x[1-2]"] == PASSED
    assert s["tests/test_a.py::test_two[a b]"] == FAILED
    assert s["tests/test_b.py::test_setup"] == "ERROR"
    assert s["tests/test_a.py::test_known"] == XFAIL  # pytest 7+ prints "XFAIL id - reason: ..."


UNITTEST_LOG = """test_mean (tests.test_stats.StatsTest.test_mean) ... FAIL
test_total (tests.test_stats.StatsTest.test_total) ... ok
test_skip (tests.test_stats.StatsTest) ... skipped 'no'
test_doc (app.tests.T)
Docstring line ... ok
test_known (app.tests.T) ... expected failure
"""


def test_parse_unittest_both_python_forms():
    s = parse_unittest(UNITTEST_LOG)
    assert s == {"test_mean (tests.test_stats.StatsTest)": FAILED, "test_total (tests.test_stats.StatsTest)": PASSED,
                 "test_skip (tests.test_stats.StatsTest)": SKIPPED, "test_doc (app.tests.T)": PASSED,
                 "test_known (app.tests.T)": XFAIL}
    assert parse_log(UNITTEST_LOG) == s


def test_resolution_rules():
    s = {"a": PASSED, "b": PASSED, "c": FAILED}
    assert resolve(s, ["a"], ["b"], 1).resolved  # other failing tests do not matter
    assert not resolve(s, ["a"], ["c"], 1).resolved
    missing = resolve(s, ["zz"], ["a"], 1)
    assert not missing.resolved and missing.fail_to_pass == {"zz": "MISSING"}
    assert not resolve({}, [], [], 0).resolved
    spoof = resolve({"a": PASSED, "b": PASSED}, ["a"], ["b"], 1)  # all pass but the runner failed
    assert not spoof.resolved and "not trusted" in spoof.reason
    assert resolve({"a": XFAIL, "b": PASSED}, ["a"], ["b"], 0).resolved


def test_rows_and_test_commands():
    base = {"responses_create_params": {"input": []}, "instance_id": "x__y-1", "base_commit": "abc123",
            "test_patch": "diff --git a/tests/m/test_q.py b/tests/m/test_q.py\n--- a/tests/m/test_q.py\n+++ b/tests/m/test_q.py\n@@ -1 +1 @@\n-a\n+b\n",
            "FAIL_TO_PASS": '["t1"]', "PASS_TO_PASS": ""}
    row = SweRow.model_validate({**base, "repo": "a/b"})
    assert row.FAIL_TO_PASS == ["t1"] and row.PASS_TO_PASS == []
    cfg = SweConfig()
    assert command_for_tests(row, cfg) == cfg.default_test_command + " tests/m/test_q.py"
    django = SweRow.model_validate({**base, "repo": "django/django"})
    assert command_for_tests(django, cfg).endswith("--parallel 1 m.test_q")
    custom = SweRow.model_validate({**base, "test_cmd": "python -m pytest {test_files} -x", "docker_image": "img:1"})
    assert command_for_tests(custom, cfg) == "python -m pytest tests/m/test_q.py -x" and custom.image == "img:1"
    with pytest.raises(ValueError):
        SweRow.model_validate({**base, "FAIL_TO_PASS": '{"a": 1}'})


def test_real_rows_image_names():
    from environments.swe.verifier import SweEnvironment
    env = SweEnvironment()
    row = SweRow.model_validate({"responses_create_params": {"input": []}, "instance_id": "astropy__astropy-12907",
                                 "base_commit": "d16bfe05", "repo": "astropy/astropy"})
    assert env.image_for(row) == "swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:latest"
    env2 = SweEnvironment(SweConfig(image_template="{image_prefix}{instance_id}", image_prefix="reg.local/swe/"))
    assert env2.image_for(row) == "reg.local/swe/astropy__astropy-12907"


def test_result_channel_rules():
    from environments.swe.integrity import is_protected
    from environments.swe.results import read_channel

    def lines(*records, nonce="n0"):
        return "\n".join(f"{nonce} {json.dumps(r)}" for r in records) + "\n"
    start, end = {"t": "start", "pid": 1}, {"t": "end", "pid": 1}

    def phase(test, when, outcome, **kw):
        return {"t": "phase", "pid": 1, "id": test, "when": when, "outcome": outcome, **kw}
    ok = read_channel(lines(start, phase("a", "setup", "passed"), phase("a", "call", "passed"),
                            phase("b", "call", "failed"), phase("b", "call", "passed"),  # a failure stays
                            phase("c", "teardown", "failed"), phase("c", "call", "passed"), end), "n0", is_protected)
    assert ok.trusted and ok.statuses == {"a": "PASSED", "b": "FAILED", "c": "ERROR"}
    xf = read_channel(lines(start, phase("d", "call", "skipped", wasxfail=True, xfail={"marker": True, "caller": None}),
                            phase("e", "call", "skipped", wasxfail=True, xfail={"marker": False, "caller": "tests/t.py"}),
                            phase("f", "call", "skipped", wasxfail=True, xfail={"marker": False, "caller": "pkg/m.py"}),
                            end), "n0", is_protected)
    assert xf.statuses == {"d": "XFAIL", "e": "XFAIL", "f": "FAILED"} and xf.xfail_refused == ["f"]
    unit = read_channel(lines(start, {"t": "unit", "pid": 1, "id": "t (m.C)", "status": "PASSED"},
                              {"t": "unit", "pid": 1, "id": "t (m.C)", "status": "ERROR"}, end), "n0", is_protected)
    assert unit.statuses == {"t (m.C)": "ERROR"}
    untrusted = {
        "foreign line": lines(start, end) + "PASSED tests/t.py::x\n",
        "wrong nonce": lines(start, end) + lines({"t": "end", "pid": 2}, nonce="n1"),
        "no end": lines(start, phase("a", "call", "passed")),
        "after end": lines(start, end, phase("a", "call", "passed")),
        "never started": lines(phase("a", "call", "passed"), end),
        "tampered": lines(start, {"t": "tampered", "pid": 1, "what": "x"}, end),
        "nothing": "",
    }
    for why, text in untrusted.items():
        assert not read_channel(text, "n0", is_protected).trusted, why


def test_protected_paths():
    from environments.swe.integrity import is_protected
    for path in ("conftest.py", "src/pkg/conftest.py", "tests/helpers.py", "pkg/tests/data/x.json", "test_x.py",
                 "pkg/x_test.py", "pytest.ini", "sub/tox.ini", "setup.cfg", "pyproject.toml", "a.pth",
                 "sitecustomize.py", "pkg/__pycache__/m.cpython-311.pyc", "x.egg-info/entry_points.txt",
                 "e-1.dist-info/METADATA", "pkg/_speed.cpython-311-x86_64-linux-gnu.so", "bin/test"):
        assert is_protected(path), path
    for path in ("pkg/module.py", "pkg/contest.py", "docs/testing_guide.rst", "README.md", "setup.py", "pkg/latest.py"):
        assert not is_protected(path), path


def test_shell_guard_agrees_with_the_python_rules():
    import subprocess

    from environments.swe.integrity import guard_script, is_protected
    script = guard_script("/nonexistent", "/nonexistent", "HEAD").split("{ find")[0]  # the functions only
    paths = ["conftest.py", "a b/conftest.py", "tests/x.py", "pkg/mod.py", "x.egg-info/y", "p/__pycache__/m.pyc",
             "pkg/json.py", "json.py", "unittest/__init__.py", "lib/pytest.py", "README.md", "odd\tdir/conftest.py"]
    probe = script + 'for p in "$@"; do vg_protected "$p" && echo P || { vg_shadows "$p" && echo S || echo -; }; done'
    out = subprocess.run(["bash", "-c", probe, "bash", *paths], capture_output=True, text=True, check=True).stdout.split()
    got = dict(zip(paths, out))
    assert all((got[p] == "P") == is_protected(p) for p in paths), got
    # shadowing outside a package (no __init__.py in the parent here): json.py, unittest/, lib/pytest.py
    assert [p for p in paths if got[p] == "S"] == ["pkg/json.py", "json.py", "unittest/__init__.py", "lib/pytest.py"]
