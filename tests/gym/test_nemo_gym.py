"""verigym against the real NeMo-Gym (its own code as the client; see conftest.py for the venvs).

* Gym's config parser on every blend's fleet config, in the form for that Gym (strict mode
  ``error_on_agent_without_environment_server`` on 0.7: no error, no deprecation warning);
* Gym's own response models on every kind of verigym reply (verify, masked failures, the 0.7
  seed/close replies, aggregate metrics) and Gym 0.7's session-contract checker;
* Gym's spinup of the fleet config (``RunHelper().start`` the way NeMo-RL's Gym actor calls it)
  with real verigym servers behind it, then ``ng_collect_rollouts`` through Gym's agents with
  ``envs model serve tiny`` as the policy: a stateless env (mcqa) and a sandboxed env (code,
  bubblewrap); a judged env (equivalence_llm_judge, scripted judge: the double of a large judge
  model) and a session env with tools (workplace_assistant) through a scripted policy that
  gives a fixed answer or makes the row's tool calls (scripted_policy.py: the double of a policy
  that can use tools, and that always answers);
  one row verigym cannot score ends as a masked sample and the collection goes on.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.gym.conftest import REPO, gym_python, run_driver, site_packages, version_tuple

from trainer.blends import available, load_blend
from trainer.nemo_rl.backend import build_plan
from trainer.nemo_rl.gym_config import GYM_ROOT, fill_addresses, fleet_env, for_gym_version, render_template
from trainer.nemo_rl.gym_install import gym_version, install_stand_in

pytestmark = pytest.mark.timeout(900)


@pytest.mark.parametrize("blend", available())
def test_gyms_parser_accepts_every_blends_fleet_config(gym, blend, tmp_path):
    version, python = gym
    plan = build_plan("rlvr_test", [f"logger.log_dir={tmp_path / 'run'}"], load_blend(blend), tmp_path / "data")
    if not plan.envs:
        pytest.skip(f"blend {blend} routes to no installed environment")
    filled = fill_addresses(plan.gym_template, {e.name: f"http://127.0.0.1:{41000 + i}" for i, e in enumerate(plan.envs)})
    config = tmp_path / "fleet.yaml"
    config.write_text(yaml.safe_dump(for_gym_version(filled, version_tuple(version))))
    strict = ["--strict"] if version_tuple(version) >= (0, 7) else []
    out = run_driver(python, "parse", str(config), *strict, cwd=tmp_path)
    agents = sum(len(e.agent_names) for e in plan.envs)
    assert out["kinds"]["resources_servers"] == len(plan.envs) and out["kinds"]["responses_api_agents"] == agents
    if version_tuple(version) >= (0, 7):
        assert out["kinds"]["environment_servers"] == agents
    assert out["deprecations"] == []


def test_the_pre_07_form_is_what_07s_strict_mode_refuses(tmp_path):
    """The control: the agent-only form (what every Gym before 0.7 takes) fails 0.7's strict mode
    and draws the deprecation warning without it, so the test above can fail."""
    python = gym_python("0.7.0")
    plan = build_plan("rlvr_test", [f"logger.log_dir={tmp_path / 'run'}"], load_blend("tiny"), tmp_path / "data")
    filled = fill_addresses(plan.gym_template, {e.name: "http://127.0.0.1:41000" for e in plan.envs})
    config = tmp_path / "fleet.yaml"
    config.write_text(yaml.safe_dump(for_gym_version(filled, (0, 4, 0))))
    done = subprocess.run([str(python), str(Path(__file__).with_name("gym_driver.py")), "parse", str(config),
                           "--strict"], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode != 0 and "AgentWithoutEnvironmentServerError" in done.stderr
    out = run_driver(python, "parse", str(config), cwd=tmp_path)
    assert out["deprecations"] and "DEPRECATED: agents without an environment server" in out["deprecations"][0]


# ---- Gym's response models on verigym's replies --------------------------------------------------------

async def _collect_replies(tmp_path: Path) -> dict[str, list[Any]]:
    import aiohttp

    from servers import registry
    from servers.app import start_server
    from servers.wire import SESSION_COOKIE, UNSCORABLE_HEADER

    rows = {name: [json.loads(line) for line in (REPO / "environments" / name / "data" / "example.jsonl")
                   .read_text().splitlines()] for name in ("mcqa", "workplace_assistant", "tool_call")}
    out: dict[str, list[Any]] = {"verify": [], "aggregate": [], "seed07": [], "close07": [], "seed_legacy": []}
    for name, examples in rows.items():
        server = await start_server(registry.instantiate(name))
        try:
            async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as http:
                async def post(path: str, body: Any, **kw: Any) -> tuple[int, Any, Any]:
                    async with http.post(server.url + path, json=body, **kw) as r:
                        return r.status, await r.json(), r.cookies.get(SESSION_COOKIE)

                for i, example in enumerate(examples):
                    body = {k: v for k, v in example.items() if not k.startswith("_")}
                    status, reply, _ = await post("/verify", body, headers={UNSCORABLE_HEADER: "mask"})
                    assert status == 200, reply
                    out["verify"].append(reply)
                    row = {k: v for k, v in body.items() if k != "response"}
                    status, seeded, cookie = await post("/seed_session", {
                        "resources_session_id": f"{name}-{i}", "episode_id": {"rollout_id": f"{i}-0", "attempt": 0},
                        "task_id": {"taskset": name, "task_id": str(i)}, "task_data": row})
                    assert status == 200, seeded
                    out["seed07"].append(seeded)
                    status, reply, _ = await post("/verify", body, cookies={SESSION_COOKIE: cookie.value})
                    out["verify"].append(reply)
                    status, closed, _ = await post("/close_session", {
                        "resources_session_id": f"{name}-{i}", "episode_id": {"rollout_id": f"{i}-0", "attempt": 0}})
                    assert status == 200, closed
                    out["close07"].append(closed)
                    status, seeded, _ = await post("/seed_session", row)
                    out["seed_legacy"].append(seeded)
                status, agg, _ = await post("/aggregate_metrics", {"verify_responses": [
                    {**r, "_ng_task_index": i // 2, "_ng_rollout_index": i % 2}
                    for i, r in enumerate(out["verify"][-2 * len(examples):])]})
                assert status == 200
                out["aggregate"].append(agg)
        finally:
            await server.stop(drain_timeout=5)
    return out


async def test_every_reply_validates_against_gyms_own_models(gym, tmp_path):
    version, python = gym
    replies = await _collect_replies(tmp_path)
    masked = [r for r in replies["verify"] if r.get("mask_sample")]
    assert masked and {r["failure_kind"] for r in masked} >= {"verigym:invalid_row"}
    (tmp_path / "replies.json").write_text(json.dumps(replies))
    out = run_driver(python, "models", str(tmp_path / "replies.json"), cwd=tmp_path)
    assert out["checked"]["BaseVerifyResponse"] == len(replies["verify"])
    if version_tuple(version) >= (0, 3):  # Gym 0.2 has no aggregate-metrics model
        assert out["checked"]["AggregateMetrics"] == len(replies["aggregate"])
    if version_tuple(version) >= (0, 7):
        assert out["checked"]["ResourcesSeedSessionResponse"] == len(replies["seed07"])
        assert out["checked"]["ResourcesCloseSessionResponse"] == len(replies["close07"])


def test_gyms_session_contract_checker_passes(tmp_path):
    """``nemo_gym.testing.session_conformance.check_resources_session_contract`` (Gym 0.7) against
    a running verigym server, through a small ASGI app that relays each request to it over HTTP
    (the checker drives an ASGI app; the server under test is a real one on loopback)."""
    python = gym_python("0.7.0")
    env = {**os.environ, "VERIGYM_ENV_PATH": str(REPO / "tests" / "server_envs")}
    ready = tmp_path / "ready.json"
    server = subprocess.Popen([sys.executable, "-m", "servers.cli", "serve", "probe", "--port", "0",
                               "--ready-file", str(ready)], env=env, cwd=REPO, start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(ready, server)
        url = json.loads(ready.read_text())["urls"]["probe"]
        (tmp_path / "check.py").write_text(SESSION_CHECK)
        done = subprocess.run([str(python), "check.py", url], capture_output=True, text=True, cwd=tmp_path, timeout=120)
        assert done.returncode == 0 and "contract ok" in done.stdout, done.stdout + done.stderr[-3000:]
    finally:
        _stop(server)


SESSION_CHECK = '''
import sys
import httpx
from fastapi import FastAPI, Request, Response
from nemo_gym.base_resources_server import ResourcesSeedSessionRequest
from nemo_gym.testing.session_conformance import check_resources_session_contract

target = sys.argv[1]
app = FastAPI()

@app.post("/{path:path}")
async def relay(path: str, request: Request) -> Response:
    async with httpx.AsyncClient() as client:
        reply = await client.post(f"{target}/{path}", content=await request.body(),
                                  headers={"Content-Type": "application/json", "Cookie": request.headers.get("cookie", "")})
    response = Response(content=reply.content, status_code=reply.status_code, media_type="application/json")
    for value in reply.headers.get_list("set-cookie"):
        response.headers.append("set-cookie", value)
    return response

seed = ResourcesSeedSessionRequest(resources_session_id="conformance-1", episode_id={"rollout_id": "1-0"},
                                   task_id={"taskset": "probe", "task_id": "1"},
                                   task_data={"responses_create_params": {"input": "q"}, "mode": "session"})
check_resources_session_contract(app, seed, keeps_state=True)
print("contract ok")
'''


def _wait_for(path: Path, process: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not (path.exists() and path.read_text().strip()):
        assert process.poll() is None, f"process exited with {process.returncode}"
        assert time.monotonic() < deadline, f"{path} not written in {timeout}s"
        time.sleep(0.2)


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# ---- Gym's spinup + ng_collect_rollouts through Gym's agents ----------------------------------------------

ROLLOUT_ENVS = ("mcqa", "workplace_assistant", "code", "equivalence_llm_judge")
JUDGE_TABLE = "default: \"The two answers differ.\\n\\n[[A!=B]] they are not equivalent\"\n"


def _example_rows(env: str, agent: str, count: int) -> list[dict[str, Any]]:
    """The environment's shortest example rows as Gym's collector takes them: the row fields only,
    routed to ``agent``. The tiny policy reads 2048 tokens (bytes): a workplace row offers only
    the tools its ground truth calls (still a valid row of that environment)."""
    rows = []
    for line in (REPO / "environments" / env / "data" / "example.jsonl").read_text().splitlines():
        example = json.loads(line)
        expected = example.get("_expected", {})
        if expected.get("status", 200) != 200 or expected.get("failure_class"):
            continue  # rows the environment refuses or cannot score: the dedicated bad row covers that
        row = {k: v for k, v in example.items() if not k.startswith("_") and k != "response"}
        row["agent_ref"] = {"type": "responses_api_agents", "name": agent}
        called = {call.get("name") for call in row.get("ground_truth") or [] if isinstance(call, dict)}
        if called:
            params = row["responses_create_params"]
            params["tools"] = [t for t in params.get("tools", []) if t.get("name") in called]
        rows.append(row)
    rows.sort(key=lambda r: len(json.dumps(r["responses_create_params"])))
    return rows[:count]


def _prebuilt_gym_venvs(venv_dir: Path, python: Path, config: dict[str, Any]) -> None:
    """Gym's own servers (agents, environment servers, the model server) run in venvs this test
    prebuilds as links to the Gym venv (what a container prefetches), so nothing is installed at
    spinup: ``uv_venv_dir`` + ``skip_venv_if_present``, as NeMo-RL's super_launch.sh runs."""
    gym_venv = python.parent.parent
    for instance in config.values():
        if not isinstance(instance, dict):
            continue
        for server_type, impls in instance.items():
            for impl in impls:
                if impl == "verigym_remote":
                    continue
                link = venv_dir / server_type / impl / ".venv"
                if not link.exists():
                    link.parent.mkdir(parents=True, exist_ok=True)
                    link.symlink_to(gym_venv, target_is_directory=True)


def _model_instance(gym_root: Path, base_url: str, model: str) -> dict[str, Any]:
    """A second Gym model server: this Gym's own ``vllm_model`` config, pointed at ``base_url``."""
    shipped = yaml.safe_load((gym_root / "responses_api_models" / "vllm_model" / "configs" / "vllm_model.yaml")
                             .read_text())["policy_model"]
    inner = shipped["responses_api_models"]["vllm_model"]
    inner.update(base_url=base_url, api_key="dummy_key", model=model)
    if "uses_reasoning_parser" in inner:  # the scripted replies carry no reasoning
        inner["uses_reasoning_parser"] = False
    return shipped


def _start(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})


def _url_from_log(log: Path, process: subprocess.Popen, marker: str, timeout: float = 300) -> str:
    deadline = time.monotonic() + timeout
    while True:
        for line in log.read_text(errors="replace").splitlines():
            if marker in line:
                return line.split(marker, 1)[1].split()[0]
        assert process.poll() is None, log.read_text(errors="replace")[-3000:]
        assert time.monotonic() < deadline, f"no {marker!r} in {log} after {timeout}s"
        time.sleep(0.2)


def test_gym_spins_up_the_fleet_config_and_collects_rollouts_through_its_agents(gym, tmp_path):
    from trainer.env_catalog import installed
    from trainer.fleet import Fleet

    version, python = gym
    gym_root = site_packages(python)
    assert gym_version(gym_root) == version_tuple(version)
    logs = tmp_path / "logs"
    logs.mkdir()
    (tmp_path / "judge.yaml").write_text(JUDGE_TABLE)
    judge = _start([sys.executable, "-m", "servers.scripted_judge", "--table", str(tmp_path / "judge.yaml"),
                    "--port", "0"], logs / "judge.log")
    model_ready = tmp_path / "model.json"
    model = _start([sys.executable, "-m", "servers.cli", "model", "serve", "tiny", "--port", "0",
                    "--max-tokens", "24", "--ready-file", str(model_ready)], logs / "model.log")
    catalog = installed()
    envs = [fleet_env(name, catalog.described[name], tuple(catalog.described[name]["agent_names"][:1]))
            for name in ROLLOUT_ENVS]
    rows = []
    for env in envs:
        rows += _example_rows(env.name, env.agent_names[0], 2)
    # The session env's rows go to a scripted policy that calls the row's ground-truth tools (the
    # tiny model calls none): the calls reach verigym through Gym's own agent, with its cookies.
    tool_rows = [r for r in rows if r["agent_ref"]["name"] == envs[1].agent_names[0]]
    # The judged env's rows get a fixed answer from it too: the tiny model samples (temperature 1,
    # a fresh seed per request) and about one sample in a hundred is empty (end of text first, or
    # only blank lines, as its greedy answer is), which is scored 0 with no judge call.
    judged_rows = [r for r in rows if r["agent_ref"]["name"] == envs[3].agent_names[0]]
    (tmp_path / "policy.json").write_text(json.dumps([
        {"contains": r["responses_create_params"]["input"][-1]["content"], "calls": r["ground_truth"], "answer": "Done."}
        for r in tool_rows] + [
        {"contains": r["responses_create_params"]["input"][-1]["content"], "calls": [],
         "answer": "It is \\boxed{the moon}."} for r in judged_rows]))
    policy = _start([sys.executable, str(Path(__file__).with_name("scripted_policy.py")), "--table",
                     str(tmp_path / "policy.json")], logs / "policy.log")
    processes = [judge, model, policy]
    try:
        judge_url = _url_from_log(logs / "judge.log", judge, "scripted judge on ")
        policy_url = _url_from_log(logs / "policy.log", policy, "scripted policy on ")
        overrides = {"equivalence_llm_judge": {"judges": {"judge": {"base_url": judge_url, "model": "scripted-judge"}}}}
        with Fleet(list(ROLLOUT_ENVS), overrides=overrides, log_dir=logs) as fleet:
            config = for_gym_version(fill_addresses(render_template(envs), fleet.urls), version_tuple(version))
            venv_dir = tmp_path / "venvs"
            settings, notes = install_stand_in(gym_root, version_tuple(version), GYM_ROOT,
                                               {"uv_venv_dir": str(venv_dir)})
            if version_tuple(version) >= (0, 3):
                assert settings == {"skip_venv_if_present": True}, notes
            else:  # Gym 0.2 builds every server's venv with uv at start, its own as well as ours
                assert settings == {} and any("no skip_venv_if_present" in n for n in notes)
                if shutil.which("uv") is None:
                    pytest.skip("NeMo-Gym 0.2 builds every server's venv with uv when it starts: uv is not on PATH")
            config.update(settings, uv_venv_dir=str(venv_dir))
            config["scripted_policy"] = _model_instance(gym_root, policy_url, "scripted-policy")
            for scripted in (envs[1], envs[3]):
                config[scripted.agent_names[0]]["responses_api_agents"]["simple_agent"]["model_server"]["name"] = \
                    "scripted_policy"
            _prebuilt_gym_venvs(venv_dir, python, config)
            (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(config))

            # A row Gym's own server scores and verigym cannot (code with no expected outputs: every
            # program would pass): it must end as a masked sample and the collection go on.
            bad = json.loads(json.dumps(next(r for r in rows if r["agent_ref"]["name"] == envs[2].agent_names[0])))
            bad["verifier_metadata"]["unit_tests"]["outputs"] = []
            rows.append(bad)
            (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            _wait_for(model_ready, model)
            tiny = json.loads(model_ready.read_text())
            out = run_driver(python, "run", str(tmp_path / "fleet.yaml"), str(tmp_path / "rows.jsonl"),
                             str(tmp_path / "rollouts.jsonl"), *(["--strict"] if version_tuple(version) >= (0, 7) else []),
                             cwd=tmp_path, timeout=840,
                             env={"POLICY_BASE_URL": tiny["base_url"], "POLICY_MODEL": tiny["model"],
                                  "NEMO_GYM_EXTRA_ROOTS": str(GYM_ROOT)})
    finally:
        for process in processes:
            _stop(process)
    assert out["returncode"] == 0, out["stderr_tail"] + out["stdout_tail"]
    results = out["results"] + out["failures"]
    assert len(results) == len(rows), (len(results), len(rows), out["stderr_tail"])
    by_agent: dict[str, list[dict[str, Any]]] = {}
    for result in results:
        by_agent.setdefault(result["agent_ref"]["name"], []).append(result)
    assert set(by_agent) == {env.agent_names[0] for env in envs}
    masked = [r for r in results if r.get("mask_sample") or (r.get("instance_config") or {}).get("mask_sample")]
    invalid = [r for r in masked if r.get("failure_kind") == "verigym:invalid_row"]
    assert len(invalid) == 1 and invalid[0]["verifier_metadata"]["unit_tests"]["outputs"] == [], \
        [(r["agent_ref"]["name"], r.get("failure_kind"), r.get("failure_reason")) for r in masked]
    assert invalid[0]["instance_config"]["mask_sample"] is True and "outputs" in invalid[0]["failure_reason"]
    scored = [r for r in results if r not in masked]
    assert len(scored) == len(rows) - 1 and all(isinstance(r["reward"], float) for r in scored), \
        [(r["agent_ref"]["name"], r.get("failure_kind"), r.get("failure_reason")) for r in masked]
    if version_tuple(version) >= (0, 7):
        # a result with mask_sample (Gym 0.7 leaves it out of its quality metrics, as coverage)
        assert not out["failures"] and invalid[0] in out["results"], out["failures"]
    else:
        # Gym 0.4-0.6 move a row with _ng_failure_class to their failures file, out of the metrics
        # (0.3 has none: it stays a result, masked for NeMo-RL by instance_config); terminal: a
        # resumed collection does not send it again
        assert out["failures"] in ([], invalid) and invalid[0]["_ng_failure_terminal"] is True
        assert (out["failures"] == invalid) is (version_tuple(version) >= (0, 4))
    sessions = [r for r in scored if r["agent_ref"]["name"] == envs[1].agent_names[0]]
    # every ground-truth call went through Gym's agent to the session's tools: the state matches
    assert len(sessions) == len(tool_rows) and all(r["state_source"] == "session" for r in sessions)
    assert [(r["reward"], r["model_tool_calls"]) for r in sessions] == [(1.0, len(r["ground_truth"])) for r in sessions]
    judged = [r for r in scored if r["agent_ref"]["name"] == envs[3].agent_names[0]]
    assert judged and all(r["judge_evaluations"][0]["verdict_label"] == "[[A!=B]]" for r in judged)
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps({"verify": [{k: v for k, v in r.items() if k in r} for r in results]}))
    checked = run_driver(python, "models", str(replies), cwd=tmp_path)
    assert checked["checked"]["BaseVerifyResponse"] == len(results)
