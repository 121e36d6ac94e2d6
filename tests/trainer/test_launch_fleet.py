"""The fleet steps of a job, as real processes: `serve` (envs serve bound to the node's address,
port 0, URLs reported in the ready file), the `gate` (waits for every node's report and /health),
the stop file (envs serve drains and exits 0), and the fleet file the trainer reads."""
import json
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from trainer.launch.fleet_steps import gate, read_fleet_file, reachable_address

REPO = Path(__file__).resolve().parents[2]


def test_serve_reports_bound_urls_gate_checks_health_stop_file_drains(tmp_path):
    ready_dir = tmp_path / "fleet"
    stop = tmp_path / "stop-fleet"
    proc = subprocess.Popen([sys.executable, "-m", "trainer.launch.fleet_steps", "serve", "--route-to", "127.0.0.1",
                             "--ready-file", str(ready_dir / "node-a.json"), "--stop-file", str(stop), "--", "math", "mcqa"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out = tmp_path / "fleet.json"
        assert gate(ready_dir, ["node-a"], ["math", "mcqa"], out, timeout_s=120) == 0
        urls = read_fleet_file(out)
        assert sorted(urls) == ["math", "mcqa"] and all(len(u) == 1 for u in urls.values())
        for (u,) in urls.values():
            assert u.startswith("http://127.0.0.1:") and not u.endswith(":0")
            assert urllib.request.urlopen(u + "/health", timeout=5).status == 200
        stop.touch()
        assert proc.wait(timeout=60) == 0
        assert not (ready_dir / "node-a.json").exists()  # envs serve removes its report on the way out
        assert "all servers stopped cleanly" in proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_gate_fails_on_a_missing_report_or_environment(tmp_path, capsys):
    (tmp_path / "a.json").write_text(json.dumps({"urls": {"math": "http://127.0.0.1:9"}}))
    assert gate(tmp_path, ["a"], ["math", "mcqa"], tmp_path / "out.json", timeout_s=1) == 1
    assert "serves ['math'], not ['mcqa']" in capsys.readouterr().err
    assert gate(tmp_path, ["a", "b"], ["math"], tmp_path / "out.json", timeout_s=0.5) == 1
    assert "no ready file from ['b']" in capsys.readouterr().err
    # reported but nothing answers /health (port 9 is discard; nothing listens there here)
    assert gate(tmp_path, ["a"], ["math"], tmp_path / "out.json", timeout_s=0.5) == 1
    assert "did not answer /health 200" in capsys.readouterr().err
    assert not (tmp_path / "out.json").exists()


def test_fleet_file_shapes(tmp_path):
    f = tmp_path / "f.json"
    f.write_text('{"math": "http://h:1", "mcqa": ["http://h:2", "http://h:3"]}')
    assert read_fleet_file(f) == {"math": ["http://h:1"], "mcqa": ["http://h:2", "http://h:3"]}
    for bad in ('{"math": 3}', '["x"]', '{"math": []}'):
        f.write_text(bad)
        with pytest.raises(ValueError, match="must map each environment"):
            read_fleet_file(f)
    with pytest.raises(ValueError, match="does not exist"):
        read_fleet_file(tmp_path / "missing.json")


def test_reachable_address_is_a_local_interface():
    assert reachable_address("127.0.0.1") == "127.0.0.1"
    own = socket.gethostbyname(socket.gethostname())
    addr = reachable_address(own)  # routing only: no packet is sent
    with socket.socket() as s:  # an address of this machine: something can bind it
        s.bind((addr, 0))
