"""The judge / GenRM model servers of a run: which models the environments need (their own config
loading, through `envs judges`), how a run gets each (profile, env.server_config, stage preset, else
missing), the argv that serves it, and the readiness gate that requires the served model name."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainer.model_servers import (JudgeUse, ModelServerSetting, judge_uses, local_report, plan_model_servers,
                                   serve_argv)

REPO = Path(__file__).resolve().parents[2]
QWEN = "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8"
SAFETY = "nvidia/Nemotron-Content-Safety-Reasoning-4B"


def test_judge_uses_come_from_each_environments_config_with_server_config_applied():
    uses = judge_uses(["genrm", "jailbreak", "math", "multichallenge"],
                      {"genrm": {"judges": {"genrm": {"base_url": "http://10.0.0.9:8000/v1", "model": "g"}}}})
    by_key = {u.key: u for u in uses}
    assert set(by_key) == {"genrm.genrm", "jailbreak.safety", "jailbreak.judge", "multichallenge.judge"}  # math: none
    assert (by_key["genrm.genrm"].model, by_key["genrm.genrm"].base_url, by_key["genrm.genrm"].set_by_user) == \
        ("g", "http://10.0.0.9:8000/v1", True)
    assert by_key["multichallenge.judge"].model == QWEN and not by_key["multichallenge.judge"].set_by_user
    assert by_key["jailbreak.safety"].model == SAFETY


def test_a_bad_server_config_key_is_one_line_before_anything_starts():
    from trainer.model_servers import ModelServerError

    with pytest.raises(ModelServerError, match=r"genrm: invalid config: judges.genrm.bogus"):
        judge_uses(["genrm"], {"genrm": {"judges": {"genrm": {"bogus": 1}}}})


def _use(env: str, model: str, url: str = "http://127.0.0.1:8000/v1", set_by_user: bool = False) -> JudgeUse:
    return JudgeUse(env, "judge", model, url, set_by_user)


def test_plan_order_profile_then_server_config_then_preset_else_missing():
    preset = {"nl2bash_judge": {"model": QWEN, "tensor_parallel": 8, "replicas": 2},
              "safety_judge": {"model": SAFETY, "tensor_parallel": 1, "replicas": 8}}
    uses = [_use("multichallenge", QWEN), _use("inverse_if", QWEN), _use("jailbreak", SAFETY),
            _use("genrm", "tiny_genrm", "http://10.1.1.1:9000/v1", set_by_user=True), _use("odd", "unknown/model")]
    profile = {"safety": ModelServerSetting(model=SAFETY, url="https://nim.example/v1/")}
    plan = plan_model_servers(uses, preset=preset, profile=profile, gpus_per_node=8, where="cl")
    by_model = {s.model: s for s in plan.servers}
    qwen = by_model[QWEN]
    assert (qwen.how, qwen.engine, qwen.tensor_parallel, qwen.replicas, qwen.nodes) == ("job", "vllm", 8, 2, 2)
    assert [u.env for u in qwen.users] == ["multichallenge", "inverse_if"]  # one server, both judges
    assert (by_model[SAFETY].how, by_model[SAFETY].url) == ("external", "https://nim.example/v1")  # the profile wins
    assert (by_model["tiny_genrm"].how, by_model["tiny_genrm"].url) == ("external", "http://10.1.1.1:9000/v1")
    assert plan.nodes == 2
    assert len(plan.missing) == 1 and plan.missing[0].startswith("odd.judge: judge model 'unknown/model': nothing serves it")
    assert '[cl.model_servers.NAME] with model = "unknown/model"' in plan.missing[0]
    assert "env.server_config.odd.judges.judge.base_url" in plan.missing[0]
    # the profile also beats a URL that env.server_config gives (where this cluster serves the model)
    plan = plan_model_servers([_use("genrm", "tiny_genrm", "http://127.0.0.1:8000/v1", set_by_user=True)],
                              profile={"g": ModelServerSetting(model="tiny_genrm", source="/ckpt/g", engine="envs-model")})
    assert [(s.how, s.engine, s.nodes) for s in plan.servers] == [("job", "envs-model", 0)]


def test_plan_refuses_what_cannot_run():
    uses = [_use("multichallenge", QWEN)]
    plan = plan_model_servers(uses, preset={"q": {"model": QWEN, "tensor_parallel": 8, "replicas": 2}}, gpus_per_node=None)
    assert plan.missing and "engine vllm needs GPU nodes" in plan.missing[0]
    plan = plan_model_servers(uses, preset={"q": {"model": QWEN, "tensor_parallel": 8, "replicas": 2, "nodes": 1}},
                              gpus_per_node=8)
    assert plan.missing and "16 GPUs do not fit on nodes = 1 x 8 GPUs" in plan.missing[0]


def test_serving_commands():
    plan = plan_model_servers([_use("m", QWEN)], preset={"q": {"model": QWEN, "tensor_parallel": 8, "replicas": 2,
                                                               "vllm_args": ["--max-model-len", "131072"]}},
                              gpus_per_node=8)
    argv = serve_argv(plan.servers[0], python="python3", vllm=("/opt/venv/bin/vllm",))
    assert argv[:3] == ["/opt/venv/bin/vllm", "serve", QWEN]
    joined = " ".join(argv)
    assert f"--served-model-name {QWEN}" in joined and "--tensor-parallel-size 8" in joined
    assert "--data-parallel-size 2 --data-parallel-backend ray --distributed-executor-backend ray" in joined  # 2 nodes
    assert "--port {port}" in joined and joined.endswith("--max-model-len 131072")
    tiny = plan_model_servers([_use("g", "tiny_genrm")], profile={"g": ModelServerSetting(model="tiny_genrm", source="x")})
    argv = serve_argv(tiny.servers[0], python="py")
    assert argv[:6] == ["py", "-m", "servers.cli", "model", "serve", "x"] and "{ready_file}" in argv
    assert "--cpu-threads" not in argv  # torch's own choice unless the setting says
    tiny = plan_model_servers([_use("g", "tiny_genrm")],
                              profile={"g": ModelServerSetting(model="tiny_genrm", source="x", cpu_threads=2)})
    assert serve_argv(tiny.servers[0], python="py")[-2:] == ["--cpu-threads", "2"]


def test_an_option_of_the_other_engine_is_refused_not_ignored():
    plan = plan_model_servers([_use("g", "tiny_genrm")], profile={"g": ModelServerSetting(
        model="tiny_genrm", source="x", engine="envs-model", vllm_args=["--max-model-len", "4096"])})
    assert not plan.servers and "vllm_args is not an option of engine envs-model" in plan.missing[0]
    plan = plan_model_servers([_use("m", QWEN)], preset={"q": {"model": QWEN, "cpu_threads": 1}}, gpus_per_node=8)
    assert not plan.servers and "cpu_threads is not an option of engine vllm" in plan.missing[0]


def _serve(tmp_path: Path, model: str, name: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "trainer.launch.model_steps", "serve", "--model", model, "--route-to", "127.0.0.1",
         "--ready-file", str(tmp_path / name / "0.json"), "--stop-file", str(tmp_path / name / "stop"), "--timeout", "300",
         "--", sys.executable, "-m", "servers.cli", "model", "serve", "tiny", "--host", "{host}", "--port", "0",
         "--ready-file", "{ready_file}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)


@pytest.mark.train
def test_the_model_gate_requires_the_served_name_and_a_wrong_model_closes_it_in_one_line(tmp_path):
    """A real `envs model serve tiny` behind model_steps: ready only with /health 200 and 'tiny' listed
    at /v1/models; the same server checked for another model closes the gate with one line (exit 3),
    and a step whose own server serves another model stops it and exits 3."""
    (tmp_path / "ok").mkdir()
    (tmp_path / "wrong").mkdir()
    good = _serve(tmp_path, "tiny", "ok")
    wrong = _serve(tmp_path, "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", "wrong")
    try:
        ready = tmp_path / "ok" / "0.json"
        deadline = time.monotonic() + 240
        while not ready.exists():
            assert good.poll() is None, good.communicate()
            assert time.monotonic() < deadline, "model server not ready"
            time.sleep(0.5)
        url = json.loads(ready.read_text())["base_url"]
        assert json.loads(ready.read_text())["model"] == "tiny" and url.endswith("/v1")
        check = [sys.executable, "-m", "trainer.launch.model_steps", "check", "--url", url, "--timeout", "30"]
        bad = subprocess.run([*check, "--model", "nvidia/Qwen3-Nemotron-235B-A22B-GenRM-2603", "--ready-file",
                              str(tmp_path / "x.json")], capture_output=True, text=True, timeout=60)
        assert bad.returncode == 3 and not (tmp_path / "x.json").exists()
        assert bad.stderr.strip() == (f"model server: {url} serves ['tiny'], not "
                                      "'nvidia/Qwen3-Nemotron-235B-A22B-GenRM-2603'")
        ok = subprocess.run([*check, "--model", "tiny", "--ready-file", str(tmp_path / "y.json")], capture_output=True,
                            text=True, timeout=60)
        assert ok.returncode == 0 and json.loads((tmp_path / "y.json").read_text())["base_url"] == url
        assert wrong.wait(timeout=240) == 3
        assert "serves ['tiny'], not 'Qwen/Qwen3-235B-A22B-Instruct-2507-FP8'" in wrong.stderr.read()
        assert not (tmp_path / "wrong" / "0.json").exists()
        (tmp_path / "ok" / "stop").touch()  # the job's stop: the step stops its server and reports 0
        assert good.wait(timeout=60) == 0
    finally:
        for p in (good, wrong):
            if p.poll() is None:
                p.kill()


def test_a_local_run_names_the_judges_it_cannot_reach_before_starting_anything(tmp_path):
    """No judge model on this machine: the plan says which environment needs which endpoint, the run
    refuses in one line per judge (issue 29: no ~200 s wait ending in a FleetError traceback)."""
    lines, problems = local_report(["genrm", "multichallenge"],
                                   {"genrm": {"judges": {"genrm": {"base_url": "http://127.0.0.1:9/v1"}}}})
    assert "judge endpoints (checked now):" in lines
    assert any(line.strip().startswith(f"{QWEN} at http://127.0.0.1:8000/v1 <- multichallenge.judge") for line in lines)
    genrm = next(p for p in problems if p.startswith("genrm.genrm:"))
    assert "http://127.0.0.1:9/v1 does not answer" in genrm and "envs model serve PATH" in genrm
    data = tmp_path / "data"
    prep = subprocess.run([sys.executable, "-m", "trainer.cli", "data", "prep", "--blend", "tiny_rlhf", "--output", str(data)],
                          capture_output=True, text=True, cwd=REPO, timeout=300)
    assert prep.returncode == 0, prep.stderr
    run = [sys.executable, "-m", "trainer.cli", "run", "--blend", "tiny_rlhf", "-c", "tiny_rlhf", "--data-dir", str(data),
           f"logger.log_dir={tmp_path / 'run'}", "env.server_config.genrm.judges.genrm.base_url=http://127.0.0.1:9/v1"]
    dry = subprocess.run([*run, "--dry-run"], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert dry.returncode == 0 and "missing: genrm.genrm: judge model 'tiny_genrm'" in dry.stdout
    started = time.monotonic()
    real = subprocess.run(run, capture_output=True, text=True, cwd=REPO, timeout=300)
    assert real.returncode == 2 and "Traceback" not in real.stderr
    assert real.stderr.strip().splitlines()[-1].startswith("driver run: genrm.genrm: judge model 'tiny_genrm'")
    assert not (tmp_path / "run" / "env_logs").exists()  # refused before any server started
    assert time.monotonic() - started < 60
