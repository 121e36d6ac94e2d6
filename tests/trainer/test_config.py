import pytest

from trainer.config import ConfigError, apply_overrides, build_config, load_config


def test_defaults_and_named_config():
    cfg = load_config("tiny", ["grpo.num_generations_per_prompt=4", "loss_fn.ratio_clip_c=3"])
    assert cfg.grpo.num_generations_per_prompt == 4 and cfg.loss_fn.ratio_clip_c == 3.0
    assert cfg.data.blend == "tiny"


def test_misspelled_key_names_the_closest():
    with pytest.raises(ConfigError, match="grpo.num_generations_per_prompt"):
        load_config("tiny", ["grpo.num_generation_per_prompt=4"])
    with pytest.raises(ConfigError, match="grpo.async_grpo.max_trajectory_age_steps"):
        build_config({"grpo": {"async_grpo": {"max_trajectory_age_step": 2}}})
    with pytest.raises(ConfigError, match="loss_fn"):
        build_config({"los_fn": {}})


def test_type_and_cross_field_validation():
    with pytest.raises(ConfigError, match="num_prompts_per_step"):
        build_config({"grpo": {"num_prompts_per_step": "many"}})
    with pytest.raises(ConfigError, match="ratio_min"):
        build_config({"loss_fn": {"truncated_importance_sampling_type": "icepop"}})
    with pytest.raises(ConfigError, match="train_global_batch_size"):
        build_config({"grpo": {"num_prompts_per_step": 2, "num_generations_per_prompt": 4},
                      "policy": {"train_global_batch_size": 4}, "loss_fn": {"force_on_policy_ratio": True}})


def test_sync_baseline_is_age_zero():
    cfg = build_config(apply_overrides({}, ["grpo.async_grpo.enabled=false", "cluster.ray_address=null"]))
    assert cfg.max_age == 0 and not cfg.in_flight_updates and cfg.cluster.ray_address is None
