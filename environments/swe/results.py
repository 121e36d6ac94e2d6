"""Per-test statuses from the harness's result channel (``harness/verigym_harness.py``).

The channel is a file outside the repository that the harness appends ``<nonce> <json>`` lines
to while the tests run (one ``start`` and one ``end`` per recording process, a ``phase`` per
pytest report, a ``unit`` per unittest outcome, ``tampered`` when the test framework changed).
It is not the test log: a test that prints ``PASSED`` lines, or an ``atexit`` hook that does
before ``os._exit(0)``, writes nothing here, and a failure written when it happened cannot be
taken back. The reading is not trusted (the run resolves nothing) when:

* a line does not carry the run's nonce, does not parse, or comes from a process that never
  started recording or after that process's ``end``;
* a recording process never wrote ``end`` (``os._exit``, a crash or a kill mid-session);
* the harness saw the test framework's functions replaced (``tampered``);
* no test runner recorded at all (the command did not run tests through pytest or unittest).

Statuses follow pytest's ``-rA`` and unittest's words (PASSED, FAILED, ERROR, SKIPPED, XFAIL,
XPASS); a test reported more than once keeps its worst. An XFAIL counts only when the test
declares it (an ``xfail`` marker) or test code called ``pytest.xfail()``; an xfail raised from
the code under test is a failure (``xfail_refused``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable

from environments.swe.logparse import ERROR, FAILED, PASSED, SKIPPED, XFAIL, XPASS

_RANK = {PASSED: 0, XFAIL: 1, SKIPPED: 2, XPASS: 3, FAILED: 4, ERROR: 5}


@dataclass
class ChannelReading:
    statuses: dict[str, str] = field(default_factory=dict)
    trusted: bool = False
    reason: str = ""
    sessions: int = 0
    xfail_refused: list[str] = field(default_factory=list)


def _worst(a: str | None, b: str) -> str:
    return b if a is None or _RANK[b] > _RANK[a] else a


def _pytest_status(phases: list[dict[str, Any]], xfail_ok: Callable[[dict[str, Any] | None], bool]) -> tuple[str, bool]:
    """(status, xfail refused) of one test from its setup/call/teardown reports."""
    status: str | None = None
    refused = False
    for ph in phases:
        when, outcome, wasxfail = ph.get("when"), ph.get("outcome"), bool(ph.get("wasxfail"))
        if outcome == "failed":
            status = _worst(status, FAILED if when == "call" else ERROR)
        elif outcome == "skipped":
            if wasxfail and not xfail_ok(ph.get("xfail")):
                status, refused = _worst(status, FAILED), True
            else:
                status = _worst(status, XFAIL if wasxfail else SKIPPED)
        elif outcome == "passed" and when == "call":
            status = _worst(status, XPASS if wasxfail else PASSED)
    if status is None:  # only setup/teardown reports that passed: the call never reported
        status = ERROR
    return status, refused


def read_channel(text: str, nonce: str, is_test_path: Callable[[str], bool]) -> ChannelReading:
    out = ChannelReading()
    started: set[Any] = set()
    ended: set[Any] = set()
    phases: dict[str, list[dict[str, Any]]] = {}
    units: dict[str, str] = {}

    def untrusted(reason: str) -> ChannelReading:
        out.trusted, out.reason, out.statuses = False, reason, {}
        return out

    def xfail_ok(info: dict[str, Any] | None) -> bool:
        if not info:
            return False
        return bool(info.get("marker")) or bool(info.get("caller") and is_test_path(str(info["caller"])))

    for number, line in enumerate(text.splitlines(), 1):
        if not line:
            continue
        head, _, body = line.partition(" ")
        if head != nonce:
            return untrusted(f"line {number} of the result channel was not written by the harness")
        try:
            record = json.loads(body)
        except json.JSONDecodeError:
            return untrusted(f"line {number} of the result channel does not parse")
        if not isinstance(record, dict):
            return untrusted(f"line {number} of the result channel is not a record")
        kind, pid = record.get("t"), record.get("pid")
        if kind == "start":
            started.add(pid)
            continue
        if pid not in started or pid in ended:
            return untrusted(f"line {number} of the result channel comes from outside a recording session")
        if kind == "end":
            ended.add(pid)
        elif kind == "tampered":
            return untrusted(f"the test framework was changed during the run ({record.get('what')})")
        elif kind == "phase" and isinstance(record.get("id"), str):
            phases.setdefault(record["id"], []).append(record)
        elif kind == "unit" and isinstance(record.get("id"), str) and record.get("status") in _RANK:
            units[record["id"]] = _worst(units.get(record["id"]), record["status"])
        else:
            return untrusted(f"line {number} of the result channel is not a harness record")
    out.sessions = len(started)
    if not started:
        return untrusted("no test ran through the harness (the test command ran neither pytest nor unittest "
                         "with the harness loaded; result_channel: log reads such runners from the log)")
    if started - ended:
        return untrusted("the test run stopped before its session ended (os._exit, a crash or a kill)")
    for test_id, test_phases in phases.items():
        status, refused = _pytest_status(test_phases, xfail_ok)
        out.statuses[test_id] = _worst(out.statuses.get(test_id), status)
        if refused:
            out.xfail_refused.append(test_id)
    for test_id, status in units.items():
        out.statuses[test_id] = _worst(out.statuses.get(test_id), status)
    out.trusted = True
    return out
