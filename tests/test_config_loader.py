"""servers/config_loader.py: the one reading of YAML files and key=value overrides that `envs` and
`driver` share, and the one closest-key hint."""

from __future__ import annotations

import pytest

from servers import registry
from servers.config_loader import (ConfigError, apply_overrides, deep_merge, did_you_mean, load_yaml_with_defaults,
                                   parse_overrides, parse_value, read_yaml_mapping)
from trainer.config import load_config


@pytest.mark.parametrize("text, value", [
    ("none", None), ("None", None), ("NONE", None), ("null", None), ("~", None), ("", None),
    ("''", ""), ("'none'", "none"), ("1e-6", 1e-6), ("-2.5E3", -2500.0), ("3", 3), ("0.5", 0.5),
    ("true", True), ("[a, 1]", ["a", 1]), ("{k: v}", {"k": "v"}), ("text", "text"), ("nonempty", "nonempty"),
])
def test_a_value_reads_as_yaml_with_none_as_null_and_exponents_as_floats(text, value):
    assert parse_value(text) == value and type(parse_value(text)) is type(value)


def test_overrides_nest_replace_a_scalar_parent_and_leave_the_input_alone():
    base = {"a": {"b": 1, "keep": [1]}, "s": 3}
    out = apply_overrides(base, ["a.b=2", "s.t=x", "new.deep.key=none"])
    assert out == {"a": {"b": 2, "keep": [1]}, "s": {"t": "x"}, "new": {"deep": {"key": None}}}
    assert base == {"a": {"b": 1, "keep": [1]}, "s": 3}
    assert parse_overrides(["x=1", "y.z=a=b"]) == {"x": 1, "y": {"z": "a=b"}}


@pytest.mark.parametrize("pairs, says", [
    (["novalue"], "override 'novalue' is not key=value"),
    (["x=[1, 2"], "override 'x=[1, 2': value '[1, 2' is not valid YAML"),
])
def test_a_bad_override_is_one_line_that_says_what_to_do(pairs, says):
    with pytest.raises(ConfigError) as err:
        parse_overrides(pairs)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_deep_merge_copies_nested_mappings():
    over = {"a": {"b": {"c": 1}}}
    merged = deep_merge({"a": {"x": 0}}, over)
    merged["a"]["b"]["c"] = 2
    assert merged == {"a": {"x": 0, "b": {"c": 2}}} and over == {"a": {"b": {"c": 1}}}


def test_yaml_files(tmp_path):
    (tmp_path / "base.yaml").write_text("a: {b: 1, c: 2}\nd: 1\n")
    (tmp_path / "run.yaml").write_text("defaults: base.yaml\na: {b: 5}\n")
    (tmp_path / "empty.yaml").write_text("")
    (tmp_path / "list.yaml").write_text("- 1\n")
    (tmp_path / "broken.yaml").write_text("a: [1,\nb: 2\n")
    assert load_yaml_with_defaults(tmp_path / "run.yaml") == {"a": {"b": 5, "c": 2}, "d": 1}
    assert read_yaml_mapping(tmp_path / "empty.yaml") == {}
    with pytest.raises(ConfigError, match=r"list.yaml: expected a mapping of config keys .*got a list$"):
        read_yaml_mapping(tmp_path / "list.yaml")
    with pytest.raises(ConfigError, match=r"broken.yaml: not valid YAML \(line \d+\): .*; fix the file$") as err:
        read_yaml_mapping(tmp_path / "broken.yaml")
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="cannot read config file"):
        read_yaml_mapping(tmp_path / "missing.yaml")


def test_did_you_mean_is_one_wording():
    assert did_you_mean("lr", ["lr_max", "batch"], cutoff=0.5) == "did you mean 'lr_max'?"
    assert did_you_mean("tiny_tool", ["tiny_tools", "tiny"], n=2, quote=False, capital=True) == \
        "Did you mean tiny_tools, tiny?"
    assert did_you_mean("val_holdot", ["val_holdout"], prefix="split.") == "did you mean 'split.val_holdout'?"
    assert did_you_mean("zzz", ["lr_max"]) == ""


def test_envs_and_driver_read_none_alike():
    # envs: an optional environment key cleared with x=none (it was the text "none" before the shared loader)
    entry = registry.get("equivalence_llm_judge")
    config = registry.load_config(entry, entry.load_class(), overrides=parse_overrides(["response_extract_regex=none"]))
    assert config.response_extract_regex is None
    # driver: the same spelling clears an optional run key
    assert load_config(None, ["cluster.ray_address=none", "grpo.max_val_samples=None"]).cluster.ray_address is None
    # a key that takes no null says so by name
    with pytest.raises(registry.ConfigError, match="verify_timeout_s"):
        registry.load_config(registry.get("math"), registry.get("math").load_class(),
                             overrides=parse_overrides(["verify_timeout_s=none"]))
