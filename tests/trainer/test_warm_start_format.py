"""The warm start's answer format comes from the preset/blend, never from trainer code."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from trainer.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[2]


def test_the_tiny_preset_gives_the_format_its_environments_parse():
    assert load_config("tiny").policy.warm_start.answer_template.format(answer="42") == "\\boxed{42}"


@pytest.mark.parametrize("override, says", [
    ("policy.warm_start.answer_template=null", "answer_template is not set"),
    ("policy.warm_start.answer_template=ANSWER", "no '{answer}' placeholder"),
])
def test_a_warm_start_without_a_usable_format_is_refused(override, says):
    with pytest.raises(ConfigError, match=says):
        load_config("tiny", [override])


def _code_strings(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in docstrings]


def test_no_trainer_code_hard_codes_an_environments_answer_format():
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "trainer").rglob("*.py") if "gym_root" not in p.parts
                 and any("boxed{" in s and "answer_template" not in s for s in _code_strings(p))]
    assert not offenders, offenders
