"""Blend specs: every shipped blend loads; typos are errors naming the closest key."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from trainer.blends import BlendError, available, load_blend
from trainer.env_catalog import CatalogError, EnvCatalog, installed


def test_all_shipped_blends_load():
    names = set(available())
    assert {"rlvr1", "rlvr2", "rlvr3", "swe1", "swe2", "rlhf", "tiny"} <= names
    for name in names:
        blend = load_blend(name)
        assert blend.name == name and blend.sources
    for name in ("rlvr1", "rlvr2", "rlvr3"):
        b = load_blend(name)
        assert b.placeholders.resolve and b.split.val_holdout == 100
        assert b.sources[0].hub.repo == "nvidia/Nemotron-3-Super-RL-Training-Blends"
        assert b.sources[0].hub.file == f"{name}.jsonl"
    for name in ("swe1", "swe2", "rlhf"):
        assert not load_blend(name).placeholders.resolve


def test_tiny_is_offline():
    tiny = load_blend("tiny")
    assert all(s.hub is None for s in tiny.sources)
    assert any(s.generate and s.generate.env == "reasoning_gym" for s in tiny.sources)


def test_agent_routing():
    b = load_blend("rlvr1").routes()  # the one routing rule (trainer.rollout.task.Routes)
    assert b.env_for({"agent_ref": {"name": "math_with_judge_simple_agent"}}) == "math"
    assert b.env_for({"agent_ref": {"name": "mcqa_simple_agent"}}) == "mcqa"
    assert b.env_for({"agent_ref": {"name": "code"}}) == "code"  # an env name routes to itself
    assert b.env_for({}) is None
    assert b.env_for({"agent_ref": {"name": "instruction_following_simple_agent"}}) == "instruction_following"
    # the swe_pivot agents go to the one-step swe_pivot grader, not the container-based swe
    assert b.env_for({"agent_ref": {"name": "swe_pivot_simple_agent"}}) == "swe_pivot"
    assert b.env_for({"agent_ref": {"name": "swe_pivot_tool_simulation_agent"}}) == "swe_pivot"


def test_routes_come_from_what_environments_declare():
    """Every agent name routes to the environment that lists it in agent_names (envs info, a
    child process: the trainer imports no environment), and a blend's agent_map wins."""
    catalog = installed()
    routes = catalog.routes()
    for env, info in catalog.described.items():
        assert "error" not in info, (env, info)
        assert routes[env] == env
        for agent in info["agent_names"]:
            assert routes[agent] == env
    probe = ("import sys; from trainer.blends import load_blend; from trainer.data_prep import RowValidator; "
             "v = RowValidator(load_blend('tiny')); assert v.route({'agent_ref': {'name': 'math_simple_agent'}}) == 'math'; "
             "assert v.check({'agent_ref': {'name': 'math_simple_agent'}, 'responses_create_params': {'input': 'x'}}) "
             "is not None; print(sorted(m for m in sys.modules if m.startswith('environments')))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"  # routing and validation imported no environment
    blend = load_blend("rlhf")
    for agent, env in blend.agent_map.items():
        assert blend.routes(routes).env_for({"agent_ref": {"name": agent}}) == env


def test_two_environments_claiming_one_agent_name_is_an_error():
    catalog = EnvCatalog({"a": {"agent_names": ["x_agent"]}, "b": {"agent_names": ["x_agent"]}})
    with pytest.raises(CatalogError, match="'x_agent' is claimed by environments 'a' and 'b'"):
        catalog.routes()


@pytest.mark.parametrize("spec, expect", [
    ({"sources": [{"path": "x.jsonl"}], "val_holdout": 3}, "Did you mean 'split.val_holdout'"),
    ({"sources": [{"path": "x.jsonl"}], "split": {"val_holdot": 3}}, "Did you mean 'val_holdout'"),
    ({"sources": [{"pth": "x.jsonl"}]}, "Did you mean 'path'"),
    ({"sources": [{"path": "x.jsonl", "hub": {"repo": "a", "file": "b"}}]}, "exactly one of hub/path/generate"),
])
def test_bad_specs_name_the_closest_key(tmp_path, spec, expect):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(BlendError) as err:
        load_blend(str(path))
    assert expect in str(err.value)


def test_unknown_blend_suggests():
    with pytest.raises(BlendError, match="Did you mean tiny"):
        load_blend("tinny")
