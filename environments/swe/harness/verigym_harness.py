"""verigym's result channel inside a SWE test run: a pytest plugin and a unittest hook.

Runs in the container's interpreter (Python 3.6+, standard library; pytest only inside a
pytest process). The grader writes this file and ``sitecustomize.py`` to a fresh folder before
any code of the patch runs, puts the folder first on ``PYTHONPATH``, names this module in
``PYTEST_PLUGINS`` and gives the channel in ``VERIGYM_CHANNEL`` (a file outside the repository)
and ``VERIGYM_NONCE``.

What it records, as ``<nonce> <json>`` lines appended to the channel while the run goes:
* ``start`` when the first test runner of the run starts recording (the pytest session's
  ``pytest_configure``; for unittest the first ``TestResult`` that starts). That process takes
  the channel out of its environment, so processes it starts later (pytester subprocesses,
  xdist workers, nested runs) do not record; nested runners in the same process are ignored.
* ``phase`` (pytest: one per setup/call/teardown report, with whether an xfail was declared by
  a marker or, for ``pytest.xfail()``, which file called it) and ``unit`` (unittest: a test's
  outcome), as each arrives, so a later print, ``atexit`` hook or ``os._exit`` cannot take back
  a failure already written.
* ``tampered`` when the test framework's functions are no longer the ones loaded before any
  code of the repository ran (``unittest`` asserts or ``TestResult`` replaced at import, pytest's
  runner/report/skipping machinery or pluggy's hook calling patched), checked when collection
  ends and when the run ends.
* ``end`` when the session ends normally (pytest ``pytest_sessionfinish``, unittest
  ``stopTestRun``). A run that never writes ``end`` is not trusted.

The grader (``environments/swe/results.py``) reads the file after the test command ended.
"""

import json
import os
import sys
import traceback

CHANNEL_ENV, NONCE_ENV, REPO_ENV = "VERIGYM_CHANNEL", "VERIGYM_NONCE", "VERIGYM_REPO"
UNITTEST_MODULES = ("unittest.case", "unittest.result", "unittest.runner", "unittest.suite", "unittest.signals")
PYTEST_MODULES = ("_pytest.runner", "_pytest.reports", "_pytest.skipping", "_pytest.outcomes", "_pytest.python",
                  "_pytest.unittest", "_pytest.main", "_pytest.fixtures", "pluggy._callers", "pluggy._hooks",
                  "pluggy._manager", "pluggy.callers", "pluggy.hooks", "pluggy.manager")

_state = {"fd": None, "nonce": None, "runner": None, "declined": False, "result": None, "ended": False}
_snapshots = []  # (label, entries) taken before any code of the repository ran


# ---- the channel ----------------------------------------------------------------------------
def _activate(runner):
    """Become this run's recorder (once per process; False if another runner already is,
    or this process was not given the channel)."""
    if _state["fd"] is not None:
        return _state["runner"] == runner
    if _state["declined"]:
        return False
    path, nonce = _take_channel()
    if not path or not nonce:
        _state["declined"] = True
        return False
    _state["fd"] = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    _state["nonce"], _state["runner"] = nonce, runner
    _emit({"t": "start", "runner": runner, "python": sys.version.split()[0]})
    return True


def _take_channel():
    """The channel from the environment, once per process; removed there, so processes this
    one starts do not record."""
    if "channel" not in _state:
        _state["channel"] = (os.environ.pop(CHANNEL_ENV, None), os.environ.pop(NONCE_ENV, None))
    return _state["channel"]


def _emit(record):
    record["pid"] = os.getpid()
    line = _state["nonce"] + " " + json.dumps(record, sort_keys=True) + "\n"
    os.write(_state["fd"], line.encode("utf-8", "replace"))


def _end(**fields):
    if _state["fd"] is None or _state["ended"]:
        return
    _check_integrity("end")
    _state["ended"] = True
    record = {"t": "end"}
    record.update(fields)
    _emit(record)


# ---- framework integrity ------------------------------------------------------------------
def _code_of(obj):
    func = getattr(obj, "__func__", obj)  # staticmethod, classmethod
    return getattr(func, "__code__", None)


def _take(label, names):
    entries = []
    for name in names:
        module = sys.modules.get(name)
        if module is None:
            continue
        entries.append((name, None, None, module, None))
        for attr, value in list(vars(module).items()):
            if isinstance(value, type) and getattr(value, "__module__", None) == name:
                entries.append((name, attr, None, value, None))
                for cattr, cvalue in list(vars(value).items()):
                    code = _code_of(cvalue)
                    if code is not None:
                        entries.append((name, attr, cattr, cvalue, code))
            elif getattr(value, "__module__", None) == name and _code_of(value) is not None:
                entries.append((name, attr, None, value, _code_of(value)))
    _snapshots.append((label, entries))


def _changed():
    for label, entries in _snapshots:
        for name, attr, cattr, value, code in entries:
            module = sys.modules.get(name)
            if attr is None:
                if module is not value:
                    return "%s: module %s replaced" % (label, name)
                continue
            holder = vars(module).get(attr) if module is not None else None
            current = holder if cattr is None else vars(holder).get(cattr) if isinstance(holder, type) else None
            if current is not value or (code is not None and _code_of(current) is not code):
                return "%s: %s.%s%s changed" % (label, name, attr, "." + cattr if cattr else "")
    return None


def _check_integrity(when):
    what = _changed()
    if what and _state["fd"] is not None:
        _emit({"t": "tampered", "when": when, "what": what})


def _under_repo(path):
    repo = os.environ.get(REPO_ENV) or _state.get("repo") or os.getcwd()
    return os.path.realpath(path).startswith(os.path.realpath(repo).rstrip("/") + "/")


# ---- unittest (Django's runtests.py, python -m unittest) -----------------------------------
_STATUS = {"addSuccess": "PASSED", "addFailure": "FAILED", "addError": "ERROR", "addSkip": "SKIPPED",
           "addExpectedFailure": "XFAIL", "addUnexpectedSuccess": "FAILED"}


def _test_id(test):
    method = getattr(test, "_testMethodName", None)
    if method is None:
        return str(test)  # e.g. setUpClass (mod.Class) errors
    cls = type(test)
    return "%s (%s.%s)" % (method, cls.__module__, getattr(cls, "__qualname__", cls.__name__))


def _recording(result):
    if _state["result"] is None and _activate("unittest"):
        _state["result"] = result
        _check_integrity("collected")
    return result is _state["result"]


def _wrap_result(result_cls):
    def start_run(orig):
        def startTestRun(self):
            _recording(self)
            return orig(self)
        return startTestRun

    def stop_run(orig):
        def stopTestRun(self):
            value = orig(self)
            if self is _state["result"]:
                _end(tests_run=getattr(self, "testsRun", None))
            return value
        return stopTestRun

    def outcome(name, orig):
        def record(self, test, *args):
            if _recording(self):
                _emit({"t": "unit", "id": _test_id(test), "status": _STATUS[name]})
            return orig(self, test, *args)
        return record

    def subtest(orig):
        def addSubTest(self, test, sub, err):
            if err is not None and _recording(self):
                failed = issubclass(err[0], getattr(test, "failureException", AssertionError))
                _emit({"t": "unit", "id": _test_id(test), "status": "FAILED" if failed else "ERROR"})
            return orig(self, test, sub, err)
        return addSubTest

    result_cls.startTestRun = start_run(result_cls.startTestRun)
    result_cls.stopTestRun = stop_run(result_cls.stopTestRun)
    for name in _STATUS:
        setattr(result_cls, name, outcome(name, getattr(result_cls, name)))
    if hasattr(result_cls, "addSubTest"):
        result_cls.addSubTest = subtest(result_cls.addSubTest)


def unittest_loaded():
    """Called when the ``unittest`` package finished importing (before the code that imported
    it resumes): wrap ``TestResult``, then take the integrity snapshot with the wrappers in."""
    import unittest.result
    _wrap_result(unittest.result.TestResult)
    _take("unittest", UNITTEST_MODULES)
    _take("harness", (__name__,))


class _UnittestWatch(object):
    """Meta path finder: lets ``unittest`` load normally, then calls :func:`unittest_loaded`."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name != "unittest":
            return None
        for finder in sys.meta_path:
            if finder is cls or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        spec.loader = _ThenHook(spec.loader)
        return spec


class _ThenHook(object):
    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        unittest_loaded()

    def __getattr__(self, name):
        return getattr(self._loader, name)


def install():
    """From ``sitecustomize`` at interpreter start."""
    if "unittest" in sys.modules:
        unittest_loaded()
    else:
        sys.meta_path.insert(0, _UnittestWatch)


# ---- pytest (loaded through PYTEST_PLUGINS before any conftest) ------------------------------
def pytest_addoption(parser):
    # Historic hook: called as soon as pytest registers this plugin, before the conftests and
    # test modules (the first code of the repository) are imported.
    global _Recorder
    if _Recorder is not None:
        return
    _take_channel()  # out of os.environ before any code of the repository can read it there
    _Recorder = _recorder_class()
    import _pytest
    if not _under_repo(os.path.dirname(_pytest.__file__)):  # else the repository is pytest itself
        _take("pytest", PYTEST_MODULES)
    _take("harness", (__name__,))


def pytest_configure(config):
    if _Recorder is not None and _state["fd"] is None and _activate("pytest"):
        _state["repo"] = str(getattr(config, "rootdir", "") or "")
        config.pluginmanager.register(_Recorder(), "verigym-recorder")


_Recorder = None


def _recorder_class():
    import pytest

    class Recorder(object):
        @pytest.hookimpl(hookwrapper=True, tryfirst=True)
        def pytest_runtest_makereport(self, item, call):
            outcome = yield
            report = outcome.get_result()
            marker = (item.get_closest_marker("xfail") if hasattr(item, "get_closest_marker")
                      else getattr(item, "get_marker", lambda name: None)("xfail"))
            declared = marker is not None or getattr(getattr(item, "obj", None), "__unittest_expecting_failure__", False)
            caller = None
            excinfo = getattr(call, "excinfo", None)
            if excinfo is not None and type(excinfo.value).__name__ == "XFailed":
                # pytest.xfail() called imperatively: which file called it (test code or not)
                frames = [f for f in traceback.extract_tb(excinfo.tb) if "_pytest" not in f[0].split(os.sep)]
                if frames:
                    repo = os.environ.get(REPO_ENV) or _state.get("repo") or os.getcwd()
                    caller = os.path.relpath(os.path.realpath(frames[-1][0]), os.path.realpath(repo))
            report.verigym_xfail = {"marker": bool(declared), "caller": caller}

        def pytest_collection_finish(self, session):
            _check_integrity("collected")

        def pytest_runtest_logreport(self, report):
            if not _state["ended"]:
                _emit({"t": "phase", "id": report.nodeid, "when": report.when, "outcome": report.outcome,
                       "wasxfail": hasattr(report, "wasxfail"), "xfail": getattr(report, "verigym_xfail", None)})

        @pytest.hookimpl(trylast=True)
        def pytest_sessionfinish(self, session, exitstatus):
            _end(exitstatus=int(exitstatus))

    Recorder.__module__ = __name__
    return Recorder
