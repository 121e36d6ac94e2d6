"""trainer.fleet starts environments through ``envs serve`` (the one launcher), on loopback."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from trainer.fleet import Fleet, FleetError, fetch_info, override_pairs

FIXTURES = Path(__file__).parent / "fixture_envs"


@pytest.fixture(autouse=True)
def fixture_envs(monkeypatch):
    monkeypatch.setenv("VERIGYM_ENV_PATH", str(FIXTURES))


def test_override_pairs_flatten_to_what_envs_serve_takes():
    assert override_pairs({"a": 1, "j": {"g": {"url": "http://x:1/v1"}}, "l": [1, "b"], "e": {}}) == \
        ['a=1', 'j.g.url="http://x:1/v1"', 'l=[1, "b"]', 'e={}']


def _gone(pid: int, wait_s: float = 10.0) -> bool:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_fleet_serves_through_envs_serve_with_overrides_and_stops_everything(tmp_path):
    with Fleet(["answer_match"], overrides={"answer_match": {"verify_timeout_s": 7}}, log_dir=tmp_path) as fleet:
        assert fetch_info(fleet.urls["answer_match"])["config"]["verify_timeout_s"] == 7
        # envs serve's own ready file: the supervisor's pid, and the server it started
        ready = json.loads((tmp_path / "answer_match.ready.json").read_text())
        supervisor = fleet.servers["answer_match"].process.pid
        server = ready["pids"]["answer_match"]
        assert ready["pid"] == supervisor and server != supervisor
        assert ready["urls"]["answer_match"] == fleet.urls["answer_match"]
    assert _gone(supervisor) and _gone(server)  # SIGTERM reached both: the server drained and exited


def test_kill_takes_the_server_down_with_its_supervisor(tmp_path):
    with Fleet(["answer_match"], log_dir=tmp_path) as fleet:
        server = json.loads((tmp_path / "answer_match.ready.json").read_text())["pids"]["answer_match"]
        fleet.kill("answer_match")
        assert not fleet.servers["answer_match"].alive() and _gone(server)
        with pytest.raises(OSError):
            fetch_info(fleet.urls["answer_match"], timeout_s=2)


def test_a_server_that_cannot_start_is_an_error_with_its_log(tmp_path):
    with pytest.raises(FleetError, match=r"exited with .* before it was ready:[\s\S]*no_such_key") as err:
        Fleet(["answer_match"], overrides={"answer_match": {"no_such_key": 1}}, log_dir=tmp_path).start()
    line = err.value.line  # what `driver run` prints
    assert "\n" not in line and f"before it was ready; its log: {tmp_path / 'answer_match.log'} (last line: " in line
