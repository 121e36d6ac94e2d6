"""Per-test statuses from test-runner logs, and the SWE-bench resolution rule.

Parsers (as in SWE-bench's ``log_parsers/python.py``, made stricter where noted):
* pytest ``-rA`` short summary (``PASSED path::test``, ``FAILED path::test - msg``) and
  ``-v`` lines (``path::test PASSED [ 50%]``);
* unittest / Django ``-v 2`` lines (``test_x (pkg.mod.Class) ... ok``), including the
  Python >= 3.11 form ``test_x (pkg.mod.Class.test_x)``, which is mapped to the classic one
  so rows written for either interpreter match.

Resolution: every FAIL_TO_PASS and every PASS_TO_PASS test is PASSED or XFAIL; a test that
does not appear in the log counts as failed (SWE-bench). Anti-spoofing (SWE-bench #620): a
log in which nothing failed but whose test command exited non-zero is not trusted, and an
empty log (no test ran) never resolves.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

PASSED, FAILED, SKIPPED, ERROR, XFAIL = "PASSED", "FAILED", "SKIPPED", "ERROR", "XFAIL"
XPASS = "XPASS"
PASSING = frozenset({PASSED, XFAIL})
_PYTEST_STATUSES = (PASSED, FAILED, SKIPPED, ERROR, XFAIL, XPASS)
_PYTEST_SUMMARY = re.compile(rf"^({'|'.join(_PYTEST_STATUSES)}) (\S.*?)\s*$")
_PYTEST_VERBOSE = re.compile(rf"^(\S+::\S.*?) ({'|'.join(_PYTEST_STATUSES)})(?:\s+\[\s*\d+%\])?\s*$")
_UNITTEST = re.compile(r"^(\w+) \(([\w.]+)\)(?:\n.*?)?\s*\.\.\.\s*(ok|FAIL|ERROR|skipped.*|expected failure|unexpected success)\s*$",
                       re.MULTILINE)
_UNITTEST_MAP = {"ok": PASSED, "FAIL": FAILED, "ERROR": ERROR, "expected failure": XFAIL,
                 "unexpected success": FAILED}


def _pytest_name(status: str, rest: str) -> str:
    if " - " in rest:
        # "FAILED path::test[param] - AssertionError: ...", "XFAIL path::test - reason: ..." (pytest 7+):
        # cut the message, not the param id
        bracket = rest.rfind("]", 0, rest.find(" - ") + 1)
        cut = rest.find(" - ", bracket if bracket >= 0 else 0)
        rest = rest[:cut] if cut >= 0 else rest
    return rest.strip()


def parse_pytest(log: str) -> dict[str, str]:
    statuses: dict[str, str] = {}
    for line in log.splitlines():
        line = line.rstrip()
        m = _PYTEST_SUMMARY.match(line)
        if m:
            statuses[_pytest_name(m[1], m[2])] = m[1]
            continue
        m = _PYTEST_VERBOSE.match(line)
        if m and m[1] not in statuses:  # the -rA summary, when present, has the last word
            statuses[m[1]] = m[2]
    return statuses


def parse_unittest(log: str) -> dict[str, str]:
    statuses: dict[str, str] = {}
    for m in _UNITTEST.finditer(log):
        test, where, outcome = m[1], m[2], m[3]
        if where.endswith("." + test):  # Python 3.11+: "test_x (mod.Class.test_x)"
            where = where[: -len(test) - 1]
        status = SKIPPED if outcome.startswith("skipped") else _UNITTEST_MAP[outcome]
        statuses[f"{test} ({where})"] = status
    return statuses


def parse_log(log: str) -> dict[str, str]:
    """Both parsers; a runner writes one format, so they do not collide."""
    statuses = parse_pytest(log)
    statuses.update(parse_unittest(log))
    return statuses


@dataclass
class Resolution:
    resolved: bool
    fail_to_pass: dict[str, str] = field(default_factory=dict)
    pass_to_pass: dict[str, str] = field(default_factory=dict)
    reason: str = ""
    trusted: bool = True  # False: no results in the log, or a clean log from a failing command

    @property
    def counts(self) -> dict[str, int]:
        return {"fail_to_pass_passed": sum(s in PASSING for s in self.fail_to_pass.values()),
                "fail_to_pass_total": len(self.fail_to_pass),
                "pass_to_pass_passed": sum(s in PASSING for s in self.pass_to_pass.values()),
                "pass_to_pass_total": len(self.pass_to_pass)}


def resolve(statuses: dict[str, str], fail_to_pass: list[str], pass_to_pass: list[str],
            exit_code: int | None) -> Resolution:
    f2p = {t: statuses.get(t, "MISSING") for t in fail_to_pass}
    p2p = {t: statuses.get(t, "MISSING") for t in pass_to_pass}
    out = Resolution(False, f2p, p2p)
    if not statuses:
        out.reason, out.trusted = "no test results in the log (the test command did not run tests)", False
    elif exit_code not in (0, None) and not any(s in (FAILED, ERROR) for s in statuses.values()):
        out.reason = f"the log shows no failure but the test command exited {exit_code}: log not trusted"
        out.trusted = False
    elif not fail_to_pass and not pass_to_pass:
        out.reason = "the row lists no FAIL_TO_PASS / PASS_TO_PASS tests"
    else:
        bad_f2p = [t for t, s in f2p.items() if s not in PASSING]
        bad_p2p = [t for t, s in p2p.items() if s not in PASSING]
        out.resolved = not bad_f2p and not bad_p2p
        if not out.resolved:
            out.reason = (f"{len(bad_f2p)} FAIL_TO_PASS and {len(bad_p2p)} PASS_TO_PASS tests not passing: "
                          + ", ".join(f"{t}={f2p.get(t) or p2p.get(t)}" for t in (bad_f2p + bad_p2p)[:5]))
    return out
