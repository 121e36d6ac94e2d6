"""The ``envs`` command: in-process for the quick subcommands, real processes for ``serve``."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from servers import registry
from servers.cli import main
from servers.wire import response_from_text

ENV_DIR = Path(__file__).parent / "server_envs"
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _restore_env_path(monkeypatch):
    # main() prepends --env-path folders to VERIGYM_ENV_PATH; monkeypatch restores it afterwards.
    monkeypatch.setenv("VERIGYM_ENV_PATH", "")


def probe_row(mode: str = "answer", text: str = "right", **fields) -> dict:
    return {"responses_create_params": {"input": [{"role": "user", "content": "q"}]}, "mode": mode,
            "response": response_from_text(text), **fields}


def post_json(url: str, body: dict, timeout: float = 30) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_list_shows_envs_and_broken_ones(tmp_path, capsys):
    broken = tmp_path / "broken_env"
    broken.mkdir()
    (broken / "verifier.py").write_text("import no_such_module_anywhere\n")
    assert main(["--env-path", str(ENV_DIR), "--env-path", str(tmp_path), "list", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["probe"]["ok"] and rows["probe"]["domain"] == "test" and "CPU pool" in rows["probe"]["summary"]
    assert not rows["broken_env"]["ok"] and "no_such_module_anywhere" in rows["broken_env"]["summary"]
    assert main(["--env-path", str(ENV_DIR), "list"]) == 0
    table = capsys.readouterr().out
    assert table.splitlines()[0].split() == ["name", "domain", "needs", "summary"] and "probe" in table


def test_same_name_in_two_env_folders_is_warned_and_listed(tmp_path, capsys, caplog, monkeypatch):
    # A second folder with a known name used to be ignored silently: edits there had no effect.
    second = tmp_path / "probe"
    shutil.copytree(ENV_DIR / "probe", second)
    monkeypatch.setenv("VERIGYM_ENV_PATH", os.pathsep.join([str(ENV_DIR), str(tmp_path)]))
    with caplog.at_level(logging.WARNING, logger="verigym.registry"):
        entries = registry.discover()
    assert entries["probe"].folder == ENV_DIR / "probe" and entries["probe"].shadowed == (second,)
    (warning,) = [r.getMessage() for r in caplog.records if "ignored" in r.getMessage()]
    assert str(second) in warning and str(ENV_DIR / "probe") in warning
    assert main(["list", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["probe"]["shadowed"] == [str(second)] and rows["math"]["shadowed"] == []
    assert main(["list"]) == 0
    (line,) = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("warning:")]
    assert str(second) in line and str(ENV_DIR / "probe") in line
    # The same folder named twice is not a conflict.
    monkeypatch.setenv("VERIGYM_ENV_PATH", os.pathsep.join([str(ENV_DIR), str(ENV_DIR)]))
    assert registry.discover()["probe"].shadowed == ()


def test_new_scaffold_passes_check_in_process_and_over_http(tmp_path, capsys):
    assert main(["new", "my_env", "--dir", str(tmp_path)]) == 0
    folder = tmp_path / "my_env"
    for name in ("__init__.py", "verifier.py", "config.yaml", "README.md", "data/example.jsonl"):
        assert (folder / name).is_file(), name
    assert main(["--env-path", str(tmp_path), "check", "my_env", "--http"]) == 0
    out = capsys.readouterr().out
    assert out.count("4/4 passed") == 2 and "FAIL" not in out
    # the conformance suite's layout rule: full, zero and malformed rows
    kinds = [json.loads(line)["_expected"] for line in (folder / "data/example.jsonl").read_text().splitlines()]
    assert {"status": 422} in kinds and any(k.get("reward") == 1.0 for k in kinds) and \
        any(k.get("reward") == 0.0 for k in kinds)
    # a check that should fail does fail: break the gold answer of the full-reward row
    lines = (folder / "data/example.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    first["expected_answer"] = "Lyon"
    (folder / "data/example.jsonl").write_text("\n".join([json.dumps(first)] + lines[1:]) + "\n")
    assert main(["--env-path", str(tmp_path), "check", "my_env"]) == 1
    assert "FAIL" in capsys.readouterr().out


def test_new_refuses_bad_names_and_existing_folders(tmp_path, capsys):
    assert main(["new", "Bad-Name", "--dir", str(tmp_path)]) == 2
    assert main(["new", "class", "--dir", str(tmp_path)]) == 2
    assert main(["new", "fine_name", "--dir", str(tmp_path)]) == 0
    assert main(["new", "fine_name", "--dir", str(tmp_path)]) == 2
    assert "already exists" in capsys.readouterr().err
    # A name that is already registered would be shadowed by the packaged one: refused.
    assert main(["new", "math", "--dir", str(tmp_path)]) == 2
    assert "an environment named 'math' already exists" in capsys.readouterr().err
    assert not (tmp_path / "math").exists()


def test_unknown_environment_is_exit_2_with_known_names(capsys):
    assert main(["--env-path", str(ENV_DIR), "check", "prob"]) == 2
    err = capsys.readouterr().err
    assert "unknown environment 'prob'" in err and "probe" in err
    assert main(["--env-path", str(ENV_DIR), "serve", "nope", "probe"]) == 2


def test_verify_reports_scores_failures_and_rejected_lines(tmp_path, capsys):
    data = tmp_path / "rows.jsonl"
    lines = [json.dumps(probe_row()), json.dumps(probe_row(text="wrong")), "{not json",
             json.dumps(probe_row("raise")), "", json.dumps({"mode": "answer"}), json.dumps(probe_row(sleep_s=-2)),
             "[1, 2]"]
    data.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out.jsonl"
    assert main(["--env-path", str(ENV_DIR), "verify", "probe", "--data", str(data), "--output", str(out),
                 "--json", "cpu_workers=1"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["count"] == 7 and summary["scored"] == 2 and summary["mean_reward"] == 0.5
    assert summary["failures_by_class"] == {"verifier_error": 1}
    rejected = {r["line"]: r["reason"] for r in summary["rejected"]}
    assert set(rejected) == {3, 6, 7, 8}
    assert "malformed JSON" in rejected[3] and "no 'response'" in rejected[6]
    assert "422" in rejected[7] and "sleep_s" in rejected[7] and "JSON object" in rejected[8]
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["_line"], r["_status"]) for r in written] == [(1, 200), (2, 200), (4, 200), (7, 422)]


def test_verify_joins_responses_by_line(tmp_path, capsys):
    rows = [{k: v for k, v in probe_row(expected_answer=a).items() if k != "response"} for a in ("x", "y", "z")]
    (tmp_path / "rows.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    answers = [json.dumps("x"), json.dumps({"response": response_from_text("nope")}), json.dumps(response_from_text("z"))]
    (tmp_path / "answers.jsonl").write_text("\n".join(answers) + "\n")
    assert main(["--env-path", str(ENV_DIR), "verify", "probe", "--data", str(tmp_path / "rows.jsonl"),
                 "--responses", str(tmp_path / "answers.jsonl"), "--json", "cpu_workers=1"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["scored"] == 3 and summary["mean_reward"] == pytest.approx(2 / 3)


def test_generate_and_prepare(tmp_path, capsys):
    out = tmp_path / "gen.jsonl"
    args = ["--env-path", str(ENV_DIR), "generate", "probe", "--tasks", "alpha,beta", "--size", "4", "--seed", "3"]
    assert main(args + ["--output", str(out), "suffix=_x"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["expected_answer"] for r in rows] == ["alpha-3-0_x", "beta-3-1_x", "alpha-3-2_x", "beta-3-3_x"]
    assert main(["--env-path", str(ENV_DIR), "generate", "probe", "--tasks", "gamma"]) == 2
    bad_out = tmp_path / "bad.jsonl"  # a failed generate leaves no (empty) output file behind
    assert main(["--env-path", str(ENV_DIR), "generate", "probe", "--tasks", "gamma", "--output", str(bad_out)]) == 2
    assert not bad_out.exists() and not list(tmp_path.glob("bad.jsonl*"))
    assert "unknown tasks" in capsys.readouterr().err
    assert main(["--env-path", str(ENV_DIR), "prepare", "probe", "--data", str(out), "cpu_call_timeout_s=2"]) == 0
    assert json.loads(capsys.readouterr().out) == {"prepared": 4, "cpu_call_timeout_s": 2}
    assert main(["--env-path", str(ENV_DIR), "prepare", "probe", "--data", str(out), "no_such_key=1"]) == 2
    assert main(["new", "plain_env", "--dir", str(tmp_path)]) == 0
    capsys.readouterr()
    assert main(["--env-path", str(tmp_path), "generate", "plain_env"]) == 2
    assert "has no generate()" in capsys.readouterr().err
    assert main(["--env-path", str(tmp_path), "prepare", "plain_env", "--data", str(out)]) == 0
    assert "nothing to prepare" in capsys.readouterr().out


def test_bench_starts_its_own_server(tmp_path, capsys):
    assert main(["new", "bench_env", "--dir", str(tmp_path)]) == 0
    capsys.readouterr()
    assert main(["--env-path", str(tmp_path), "bench", "bench_env", "--requests", "200", "--concurrency", "8",
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["requests"] == 200 and result["ok"] == 200 and result["errors"] == {}
    assert result["rows"] == 3 and result["req_per_s"] > 0 and result["p50_ms"] <= result["p99_ms"]


def _free_port_pair() -> int:
    for _ in range(50):
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            port = a.getsockname()[1]
            with socket.socket() as b:
                try:
                    b.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
            return port
    raise RuntimeError("no free port pair")


def _start_serve(tmp_path: Path, *args: str) -> tuple[subprocess.Popen, dict]:
    ready = tmp_path / "ready.json"
    env = {**os.environ, "VERIGYM_ENV_PATH": f"{ENV_DIR}{os.pathsep}{tmp_path}"}
    proc = subprocess.Popen([sys.executable, "-m", "servers.cli", "serve", *args, "--ready-file", str(ready)],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"envs serve did not get ready: {proc.communicate()}")
        time.sleep(0.1)
    return proc, json.loads(ready.read_text())


def _wait_in_flight(url: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with urllib.request.urlopen(url + "/metrics") as r:
            if any(line.startswith("verigym_in_flight{") and not line.endswith(" 0")
                   for line in r.read().decode().splitlines()):
                return
        time.sleep(0.02)
    raise AssertionError("the slow verification never showed up in flight")


def test_serve_ports_overrides_and_sigterm_drains(tmp_path, capsys):
    assert main(["new", "other_env", "--dir", str(tmp_path)]) == 0
    capsys.readouterr()
    port = _free_port_pair()
    proc, ready = _start_serve(tmp_path, "probe", "other_env", "--port", str(port), "verify_timeout_s=20",
                               "probe.cpu_workers=1", "other_env.case_sensitive=true")
    try:
        assert ready["urls"] == {"probe": f"http://127.0.0.1:{port}", "other_env": f"http://127.0.0.1:{port + 1}"}
        with urllib.request.urlopen(ready["urls"]["probe"] + "/info") as r:
            probe_config = json.loads(r.read())["config"]
        with urllib.request.urlopen(ready["urls"]["other_env"] + "/info") as r:
            other_config = json.loads(r.read())["config"]
        assert probe_config["cpu_workers"] == 1 and probe_config["verify_timeout_s"] == 20
        assert other_config["case_sensitive"] is True and other_config["verify_timeout_s"] == 20
        # envs verify --url against the running server
        # A session row scores 1 only if its _script ran in a seeded session, over HTTP as in-process
        # (--url used to skip seed_session and the script, so stateful rows scored differently).
        session_row = {**probe_row("session", target=2), "_script": [{"name": "bump", "arguments": {"by": 2}}]}
        data = tmp_path / "rows.jsonl"
        data.write_text("\n".join(json.dumps(r) for r in (probe_row(), probe_row(text="no"), session_row)) + "\n")
        assert main(["--env-path", str(ENV_DIR), "verify", "probe", "--data", str(data), "--url",
                     ready["urls"]["probe"], "--json"]) == 0
        over_http = json.loads(capsys.readouterr().out)
        assert main(["--env-path", str(ENV_DIR), "verify", "probe", "--data", str(data), "--json",
                     "cpu_workers=1"]) == 0
        assert over_http == json.loads(capsys.readouterr().out)
        assert over_http["mean_reward"] == pytest.approx(2 / 3) and over_http["scored"] == 3
        # SIGTERM while a slow verification is in flight: it completes, everything exits 0
        result: dict = {}
        slow = threading.Thread(target=lambda: result.update(
            zip(("status", "reply"), post_json(ready["urls"]["probe"] + "/verify", probe_row("sleep", sleep_s=3)))))
        slow.start()
        _wait_in_flight(ready["urls"]["probe"])  # a fixed sleep raced the request's arrival on a loaded machine
        proc.send_signal(signal.SIGTERM)
        slow.join(30)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert result["status"] == 200 and result["reply"]["reward"] == 1.0
    assert proc.returncode == 0, err
    assert "all servers stopped cleanly" in err
    assert "probe" in out and f"http://127.0.0.1:{port + 1}" in out


def test_serve_reports_a_dead_child_and_exits_nonzero(tmp_path):
    proc, ready = _start_serve(tmp_path, "probe", "cpu_workers=1")
    try:
        os.kill(ready["pids"]["probe"], signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1 and "probe" in err and "exited unexpectedly" in err
