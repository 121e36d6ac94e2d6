"""Job-time placement of verigym's Gym stand-in (trainer/nemo_rl/gym_install.py) for each Gym
NeMo-RL's containers ship, and the config form per Gym version. Fake Gym roots here (a
``nemo_gym/package_info.py`` is all the job reads); tests/gym/ runs the real Gyms."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from trainer.nemo_rl.gym_config import (GYM_ROOT, FleetEnv, environment_server_name, fill_addresses, fleet_env,
                                        for_gym_version, main as gym_config_main, render_template)
from trainer.nemo_rl.gym_install import GymInstallError, gym_version, install_stand_in

STAND_IN_APP = GYM_ROOT / "resources_servers" / "verigym_remote" / "app.py"


def fake_gym(root: Path, version: str, pre: str = "") -> Path:
    major, minor, patch = version.split(".")
    (root / "nemo_gym").mkdir(parents=True)
    (root / "nemo_gym" / "package_info.py").write_text(
        f'MAJOR = {major}\nMINOR = {minor}\nPATCH = {patch}\nPRE_RELEASE = "{pre}"\n')
    return root


def test_gym_version_is_read_without_importing_gym(tmp_path):
    assert gym_version(fake_gym(tmp_path / "g", "0.2.0", "rc0")) == (0, 2, 0)
    with pytest.raises(GymInstallError, match="folder holding the nemo_gym package"):
        gym_version(tmp_path / "nowhere")


@pytest.mark.parametrize("version, copied, skip_settings", [
    ("0.3.0", True, {"skip_venv_if_present": True}),  # NeMo-RL v0.6.0: install root only, uv_venv_dir = it
    ("0.4.0", True, {"skip_venv_if_present": True, "uv_venv_dir": None}),  # v0.7.0: cwd default made explicit
    ("0.7.0", False, {"skip_venv_if_present": True, "uv_venv_dir": None}),  # NEMO_GYM_EXTRA_ROOTS
])
def test_the_stand_in_goes_where_each_gym_looks_with_a_venv_it_uses_as_is(tmp_path, monkeypatch, version, copied,
                                                                         skip_settings):
    root = fake_gym(tmp_path / "gym", version)
    source = tmp_path / "repo_gym_root"  # a copy: the venv may land in the stand-in's own folder
    shutil.copytree(GYM_ROOT, source, ignore=shutil.ignore_patterns("__pycache__", ".venv"))
    monkeypatch.setenv("NEMO_GYM_EXTRA_ROOTS", str(source))
    monkeypatch.delenv("NEMO_GYM_VENV_DIR", raising=False)
    settings, notes = install_stand_in(root, gym_version(root), source, {})
    expected = {k: (str(root) if v is None else v) for k, v in skip_settings.items()}
    assert settings == expected
    folder = root / "resources_servers" / "verigym_remote"
    assert (folder / "app.py").exists() is copied
    # uv_venv_dir is Gym's install root: Gym looks for the venv in the folder it found the server in
    venv = (folder if copied else source / "resources_servers" / "verigym_remote") / ".venv"
    assert (venv / "bin" / "python").exists() and (venv / "bin" / "activate").exists()
    # the venv Gym will run the stand-in with has the standard library and nothing else it needs
    done = subprocess.run([str(venv / "bin" / "python"), "-c", "import urllib.request, json; print('ok')"],
                          capture_output=True, text=True)
    assert done.stdout.strip() == "ok"
    assert any("verigym_remote venv" in n for n in notes)


def test_a_configured_venv_dir_is_where_the_venv_goes_and_the_configs_choices_stand(tmp_path, monkeypatch):
    root = fake_gym(tmp_path / "gym", "0.4.0")
    monkeypatch.setenv("PERSISTENT_CACHE", str(tmp_path / "cache"))
    settings, notes = install_stand_in(root, (0, 4, 0), GYM_ROOT,
                                       {"uv_venv_dir": "${oc.env:PERSISTENT_CACHE}/gym_venvs",
                                        "skip_venv_if_present": False})
    assert settings == {}  # the NeMo-RL config's own values win; nothing to add
    assert (tmp_path / "cache" / "gym_venvs" / "resources_servers" / "verigym_remote" / ".venv" / "bin" / "python").exists()
    assert any("reinstall the stand-in's venv from the package index" in n for n in notes)
    monkeypatch.setenv("NEMO_GYM_VENV_DIR", str(tmp_path / "opt_gym_venvs"))  # NeMo-RL v0.7.0's container
    settings, _ = install_stand_in(root, (0, 4, 0), GYM_ROOT, {})
    assert settings == {"skip_venv_if_present": True}
    assert (tmp_path / "opt_gym_venvs" / "resources_servers" / "verigym_remote" / ".venv" / "bin" / "python").exists()


def test_gym_02_gets_the_folder_and_a_note_that_it_builds_venvs_itself(tmp_path):
    root = fake_gym(tmp_path / "gym", "0.2.0", "rc0")
    settings, notes = install_stand_in(root, (0, 2, 0), GYM_ROOT, {})
    assert settings == {} and (root / "resources_servers" / "verigym_remote" / "app.py").exists()
    assert any("no skip_venv_if_present" in n for n in notes)


def test_an_unwritable_gym_root_is_one_line_naming_the_fix(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root writes through any mode: the unwritable folder cannot be made")
    root = fake_gym(tmp_path / "gym", "0.3.0")
    root.chmod(0o555)
    try:
        with pytest.raises(GymInstallError, match="writable container"):
            install_stand_in(root, (0, 3, 0), GYM_ROOT, {})
    finally:
        root.chmod(0o755)


def test_the_job_step_writes_the_form_and_settings_for_its_gym(tmp_path, monkeypatch):
    monkeypatch.setenv("NEMO_GYM_EXTRA_ROOTS", str(GYM_ROOT))  # the venv goes under uv_venv_dir (tmp)
    monkeypatch.delenv("NEMO_GYM_VENV_DIR", raising=False)
    template = tmp_path / "t.yaml"
    template.write_text(yaml.safe_dump(render_template([FleetEnv("mcqa", "knowledge", ("mcqa_simple_agent",))])))
    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps({"mcqa": ["http://10.0.0.7:4100"]}))
    grpo = tmp_path / "grpo.yaml"
    grpo.write_text(yaml.safe_dump({"env": {"nemo_gym": {"uv_venv_dir": str(tmp_path / "venvs")}}}))
    for version, has_env_servers in (("0.4.0", False), ("0.7.0", True)):
        root = fake_gym(tmp_path / version, version)
        out = tmp_path / f"{version}.yaml"
        assert gym_config_main(["--template", str(template), "--fleet", str(fleet), "--output", str(out),
                                "--gym-root", str(root), "--grpo", str(grpo)]) == 0
        written = yaml.safe_load(out.read_text())
        assert ("mcqa_environment_server" in written) is has_env_servers
        assert written["mcqa"]["resources_servers"]["verigym_remote"]["host"] == "10.0.0.7"
        assert written["skip_venv_if_present"] is True and "uv_venv_dir" not in written
    assert gym_config_main(["--template", str(template), "--fleet", str(fleet), "--output", str(tmp_path / "x"),
                            "--gym-root", str(tmp_path / "nowhere")]) == 2


def test_agent_settings_come_from_the_environment_then_the_blend():
    info = {"domain": "math", "max_steps": 3}
    env = fleet_env("math_python", info, ("math_with_code_simple_agent", "other_agent"),
                    {"math_python": {"max_steps": 5}, "other_agent": {"max_steps": 2}})
    assert env.agent_settings == {"math_with_code_simple_agent": {"max_steps": 5}, "other_agent": {"max_steps": 2}}
    assert fleet_env("math_python", info, ("a",)).agent_settings == {"a": {"max_steps": 3}}
    config = render_template([env])
    assert config["other_agent"]["responses_api_agents"]["simple_agent"]["max_steps"] == 2
    server = config[environment_server_name("math_with_code_simple_agent")]["environment_servers"]
    assert server["single_agent_turn_legacy"]["agent_server"]["name"] == "math_with_code_simple_agent"
    assert set(for_gym_version(config, (0, 4, 0))) == {"math_python", "math_with_code_simple_agent", "other_agent"}


def test_the_blend_rejects_an_unknown_agent_setting(tmp_path):
    from trainer.blends import BlendError, load_blend

    blend = tmp_path / "b.yaml"
    blend.write_text("name: b\nsources: [{path: rows.jsonl}]\nagent_settings: {math: {max_step: 3}}\n")
    with pytest.raises(BlendError, match="max_step"):
        load_blend(str(blend))


OMEGACONF_DUMP = """\
config_paths:
- /x/vllm_model.yaml
policy_model:
  responses_api_models:
    vllm_model:
      entrypoint: app.py
      chat_template_kwargs: null
mcqa_simple_agent:
  responses_api_agents:
    simple_agent:
      entrypoint: app.py
      resources_server:
        type: resources_servers
        name: mcqa
mcqa:
  resources_servers:
    verigym_remote:
      entrypoint: app.py
      domain: knowledge
      host: '::1'
      port: 41002
      verigym_env: mcqa
      health_poll_s: 0.2
      health_failures_to_exit: 3
math:
  resources_servers:
    verigym_remote:
      host: 10.0.0.5
      port: 41001
"""


def test_the_stand_in_reads_its_own_instance_from_gyms_config_dump():
    sys.path.insert(0, str(STAND_IN_APP.parent))
    try:
        import app as stand_in  # noqa: PLC0415 - the stand-in is a script Gym runs from its folder
    finally:
        sys.path.remove(str(STAND_IN_APP.parent))
    settings = stand_in.instance_settings(OMEGACONF_DUMP, "mcqa")
    assert settings["host"] == "::1" and settings["port"] == "41002" and settings["health_poll_s"] == "0.2"
    assert stand_in.health_url(settings) == "http://[::1]:41002/health"
    assert stand_in.health_url(stand_in.instance_settings(OMEGACONF_DUMP, "math")) == "http://10.0.0.5:41001/health"
    with pytest.raises(KeyError):
        stand_in.instance_settings(OMEGACONF_DUMP, "code")
    unfilled = OMEGACONF_DUMP.replace("host: 10.0.0.5", "host: null")
    with pytest.raises(ValueError, match="fill the fleet's addresses"):
        stand_in.health_url(stand_in.instance_settings(unfilled, "math"))


def test_filled_template_round_trips_through_the_filler(tmp_path):
    template = render_template([FleetEnv("code", "coding", ("code_gen_simple_agent",))])
    filled = fill_addresses(template, {"code": "http://h:9"})
    assert filled["code"]["resources_servers"]["verigym_remote"]["port"] == 9
    assert filled["code_gen_environment_server"]["environment_servers"]["single_agent_turn_legacy"][
        "resources_tool_transports"] == ["direct_http"]


def test_the_plans_fleet_config_carries_declared_agent_settings(tmp_path):
    """swe_pivot declares one model turn (NeMo-Gym's swe_pivot config): its agents get max_steps 1;
    an environment that declares none leaves the agent's default."""
    from trainer.blends import load_blend
    from trainer.nemo_rl.backend import build_plan

    plan = build_plan("rlvr_test", [f"logger.log_dir={tmp_path / 'run'}"], load_blend("rlvr2"), tmp_path / "data")
    agents = {k: v["responses_api_agents"]["simple_agent"] for k, v in plan.gym_template.items()
              if "responses_api_agents" in v}
    assert agents["swe_pivot_simple_agent"]["max_steps"] == 1
    assert "max_steps" not in agents["math_with_judge_simple_agent"]


def test_gym_02_gets_other_for_the_rlhf_domain_it_does_not_know():
    config = render_template([FleetEnv("genrm", "rlhf", ("genrm_simple_agent",))])
    assert for_gym_version(config, (0, 2, 0))["genrm"]["resources_servers"]["verigym_remote"]["domain"] == "other"
    assert for_gym_version(config, (0, 3, 0))["genrm"]["resources_servers"]["verigym_remote"]["domain"] == "rlhf"
    assert config["genrm"]["resources_servers"]["verigym_remote"]["domain"] == "rlhf"  # the template is unchanged
