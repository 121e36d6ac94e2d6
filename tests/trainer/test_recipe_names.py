"""The Nemotron recipe's spellings (issue 29): its config names (`nemotron super3 rl rlvr -c rlvr2`,
`-c test`, `-c small`) map to a stage preset + blend, said in the plan; its README keys named
differently here (`grpo.num_iterations`, `grpo.learning_rate`) are errors naming the key here,
not a near spelling that means something else (`grpo.num_generations_per_prompt`).

Names and keys as in NVIDIA-NeMo/Nemotron: src/nemotron/recipes/super3/stage2_rl/stage1_rlvr/config/
{default,rlvr2,rlvr3,small,test}.yaml, docs/nemotron/super3/rl/index.md (`-c rlvr1`), and
src/nemotron/recipes/nano3/stage2_rl/README.md (`grpo.num_iterations=200`, `grpo.learning_rate=5e-7`).
"""

from __future__ import annotations

import pytest

from trainer.cli import main
from trainer.recipe_names import recipe_config


@pytest.mark.parametrize(("name", "blend", "preset", "blend_used"), [
    ("rlvr1", None, "rlvr", "rlvr1"), ("rlvr2", None, "rlvr", "rlvr2"), ("rlvr3", "rlvr3", "rlvr", "rlvr3"),
    ("test", None, "rlvr_test", "rlvr1"), ("small", None, "rlvr_small", "rlvr1"),
    ("small", "swe1", "swe1_small", "swe1"), ("test", "rlhf", "rlhf_test", "rlhf"), ("test", "rlvr2", "rlvr_test", "rlvr2"),
])
def test_recipe_config_names_map_to_a_preset_and_a_blend(name, blend, preset, blend_used):
    recipe = recipe_config(name, blend)
    assert (recipe.preset, recipe.blend) == (preset, blend_used)


def test_names_that_are_not_the_recipes_are_left_alone():
    assert recipe_config("rlvr", None) is None and recipe_config("tiny", None) is None


def test_a_contradicting_blend_says_what_to_type():
    with pytest.raises(ValueError, match="-c rlvr2 .* means -c rlvr --blend rlvr2, but --blend rlvr3 was given: "
                                         "use -c rlvr --blend rlvr3"):
        recipe_config("rlvr2", "rlvr3")


def test_dry_run_with_a_recipe_name_says_the_preset_and_blend_first(tmp_path, capsys):
    rc = main(["run", "-c", "rlvr2", "--backend", "nemo-rl", "--dry-run", "policy.model_name=/ckpt/sft",
               f"logger.log_dir={tmp_path / 'run'}", "--data-dir", str(tmp_path / "D")])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert out.splitlines()[0] == ("config: -c rlvr2 is the Nemotron recipe's name; here it is the stage preset -c rlvr "
                                   "with --blend rlvr2")
    assert "num_prompts_per_step: 256" in (tmp_path / "run" / "nemo_rl" / "grpo.yaml").read_text()


def test_a_stage_preset_without_a_blend_trains_on_its_stage_blend(tmp_path, capsys):
    rc = main(["run", "-c", "swe1", "--backend", "nemo-rl", "--dry-run", "policy.model_name=/ckpt/sft",
               f"logger.log_dir={tmp_path / 'run'}", "--data-dir", str(tmp_path / "D")])
    out = capsys.readouterr().out
    assert rc == 0 and out.splitlines()[0] == ("config: -c swe1 trains on --blend swe1 (the stage's blend; --blend "
                                               "picks another)")


@pytest.mark.parametrize(("override", "says"), [
    ("grpo.num_iterations=200", "'grpo.num_iterations' (the Nemotron recipe's key) is grpo.max_num_steps in the "
                                "built-in engine"),
    ("grpo.learning_rate=5e-7", "'grpo.learning_rate' (the Nemotron recipe's key) is policy.optimizer.kwargs.lr in "
                                "the built-in engine"),
    ("policy.megatron_cfg.optimizer.lr=5e-7", "is policy.optimizer.kwargs.lr in the built-in engine"),
])
def test_recipe_keys_on_the_built_in_engine_name_the_key_here(override, says, capsys):
    assert main(["run", "--dry-run", override]) == 2
    err = capsys.readouterr().err
    assert says in err and "did you mean" not in err and "num_generations_per_prompt" not in err


@pytest.mark.parametrize(("override", "says"), [
    ("grpo.num_iterations=200", "is grpo.max_num_steps in NeMo-RL's config"),
    ("grpo.learning_rate=5e-7", "is policy.megatron_cfg.optimizer.lr (the recipe keeps "
                                "policy.megatron_cfg.optimizer.min_lr equal to it) in NeMo-RL's config"),
    ("data.train_jsonl_fpath=/d/train.jsonl", "is data.train.data_path"),
])
def test_recipe_keys_on_the_nemo_rl_backend_name_the_key_there(override, says, tmp_path, capsys):
    assert main(["run", "-c", "rlvr2", "--backend", "nemo-rl", "--dry-run", override,
                 f"logger.log_dir={tmp_path / 'run'}", "--data-dir", str(tmp_path / "D")]) == 2
    err = capsys.readouterr().err
    assert says in err and "did you mean" not in err
