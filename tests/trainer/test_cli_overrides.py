"""`driver run` command lines: key=value overrides anywhere, anything else a clear error."""
import json

import pytest

from trainer.cli import parse_args
from trainer.config import load_config
from trainer.grpo.synthetic import arithmetic_rows


def test_overrides_are_accepted_after_flags_in_any_order():
    args = parse_args(["run", "grpo.max_num_steps=7", "--no-resume", "policy.generation.max_new_tokens=5",
                       "--dry-run", "-c", "tiny", "logger.log_dir=/tmp/x"])
    assert args.no_resume and args.dry_run and args.config == "tiny"
    assert args.overrides == ["grpo.max_num_steps=7", "policy.generation.max_new_tokens=5", "logger.log_dir=/tmp/x"]
    cfg = load_config(args.config, args.overrides)
    assert cfg.grpo.max_num_steps == 7 and cfg.policy.generation.max_new_tokens == 5


@pytest.mark.parametrize("argv, bad", [(["run", "--no-resume", "oops"], "oops"),
                                       (["run", "--no-resume", "--bogus", "a.b=1"], "--bogus"),
                                       (["blends", "a.b=1"], "a.b=1")])
def test_leftover_words_that_are_not_overrides_are_a_clear_error(argv, bad, capsys):
    with pytest.raises(SystemExit) as exc:
        parse_args(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"unrecognized arguments: {bad}" in err
    if argv[0] == "run":
        assert "key=value" in err


def test_dry_run_with_overrides_after_flags(tmp_path, capsys):
    from trainer.cli import main

    train = tmp_path / "train.jsonl"
    train.write_text("\n".join(json.dumps({**r, "env": "math"}) for r in arithmetic_rows(4, 0)) + "\n")
    rc = main(["run", "--dry-run", "--no-resume", f"data.train_data_path={train}", "data.blend=null",
               "grpo.max_num_steps=3", f"logger.log_dir={tmp_path / 'run'}"])
    out = capsys.readouterr().out
    assert rc == 0 and "max_num_steps: 3" in out and "steps: 3 (" in out



def test_a_dry_run_before_data_prep_plans_the_environments_the_blend_names(tmp_path, capsys):
    """Without prepared data the plan still says which environments the run starts: generate sources
    name theirs, local files are read and routed; a hub file not downloaded is said to be unknown."""
    from trainer.cli import main

    rc = main(["run", "--blend", "tiny", "--dry-run", "--data-dir", str(tmp_path / "none")])
    out = capsys.readouterr().out
    assert rc == 0 and "environments to start: math, reasoning_gym\n" in out and "epochs: once prepared" in out
    blend = tmp_path / "hub_only.yaml"  # a dataset no cache holds
    blend.write_text("description: a hub source only\nsources:\n  - hub: {repo: verigym-tests/not-a-dataset, "
                     "file: rows.jsonl}\n")
    rc = main(["run", "--blend", str(blend), "--dry-run", "--data-dir", str(tmp_path / "none2")])
    out = capsys.readouterr().out
    assert rc == 0 and "environments to start: none known before the data is prepared" in out
    assert "hf://verigym-tests/not-a-dataset/rows.jsonl not downloaded" in out
