"""`envs info` and `envs validate`: what environments publish, for processes that must not import them."""

from __future__ import annotations

import json
from pathlib import Path

from servers.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_info_json_lists_agent_names_row_schema_and_tools(capsys):
    assert main(["info", "swe_pivot", "workplace_assistant", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert "swe_pivot_simple_agent" in info["swe_pivot"]["agent_names"]
    assert "expected_action" in info["swe_pivot"]["row_fields"]["properties"]
    assert info["workplace_assistant"]["tools"] and info["workplace_assistant"]["stateful"]
    assert main(["info", "no_such_env", "--json"]) == 0
    assert "unknown environment" in json.loads(capsys.readouterr().out)["no_such_env"]["error"]


def test_validate_uses_the_servers_row_model(tmp_path, capsys):
    rows = [json.loads(x) for x in (ROOT / "environments/swe/data/tiny_rows.jsonl").read_text().splitlines() if x]
    assert isinstance(rows[0]["FAIL_TO_PASS"], str)  # JSON-string test lists, as SWE-bench publishes them
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + json.dumps({**rows[0], "base_commit": 7}) + "\n{bad\n")
    assert main(["validate", "--env", "swe", "--data", str(path), "--json"]) == 1
    verdicts = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [v["ok"] for v in verdicts] == [True] * len(rows) + [False, False]
    assert verdicts[-2]["detail"][0]["loc"] == "base_commit" and "not valid JSON" in verdicts[-1]["error"]
    routed = tmp_path / "routed.jsonl"
    routed.write_text(json.dumps({"env": "swe", "row": rows[0]}) + "\n" + json.dumps({"env": "nope", "row": {}}) + "\n")
    assert main(["validate", "--data", str(routed), "--json"]) == 1
    out = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert out[0]["ok"] and "unknown environment 'nope'" in out[1]["error"]
