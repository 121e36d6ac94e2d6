"""swe_gen without containers: SEARCH/REPLACE edits -> a patch real ``git apply`` takes,
reproduction-test extraction, row validation, image names."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError

from environments.swe_gen.edits import EditError, apply_edits, git_diff, parse_edits, patch_from_answer, repro_test_from_answer
from environments.swe_gen.verifier import SweGenConfig, SweGenEnvironment, SweGenRow, sif_docker_ref

ENV_DIR = Path(__file__).resolve().parents[2] / "environments/swe_gen"
FILES = {"pkg/a.py": "def f():\n    return 1\n\n\ndef g():\n    return 2", "pkg/b.py": "X = 1\n"}


def block(path: str, search: str, replace: str) -> str:
    return f"```python\n### {path}\n<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n```\n"


def test_edits_become_a_patch_git_applies(tmp_path):
    answer = ("<think>maybe ```python\n### pkg/b.py\n<<<<<<< SEARCH\nX = 1\n=======\nX = 9\n>>>>>>> REPLACE\n```</think>"
              "<solution>\n" + block("pkg/a.py", "    return 2", "    return 3") + block("pkg/a.py", "def f():", "def f(x=0):")
              + block("pkg/new.py", "", "NEW = True") + "</solution>")
    patch = patch_from_answer(answer, FILES)
    assert "pkg/b.py" not in patch  # the edit inside the thinking does not count
    repo = tmp_path / "repo"
    for path, content in FILES.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(content)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    (tmp_path / "p.diff").write_text(patch)
    subprocess.run(["git", "apply", "--verbose", str(tmp_path / "p.diff")], cwd=repo, check=True, capture_output=True)
    assert (repo / "pkg/a.py").read_text() == "def f(x=0):\n    return 1\n\n\ndef g():\n    return 3"
    assert (repo / "pkg/new.py").read_text() == "NEW = True\n"
    stripped = git_diff({"repo/x.py": "a\n"}, {"repo/x.py": "b\n"}, remove_repo_name=True)
    assert stripped.startswith("diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n")


def test_unusable_answers_say_why():
    with pytest.raises(EditError, match="no <solution>"):
        patch_from_answer(block("pkg/a.py", "    return 2", "    return 3"), FILES)
    assert patch_from_answer(block("pkg/a.py", "    return 2", "    return 3"), FILES, relaxed=True)
    with pytest.raises(EditError, match="SEARCH block not found"):
        apply_edits(FILES, parse_edits(block("pkg/a.py", "return 2", "return 3")))  # not at a line start
    with pytest.raises(EditError, match="equals its REPLACE"):
        apply_edits(FILES, parse_edits(block("pkg/a.py", "X", "X")))
    with pytest.raises(EditError, match="not among the files"):
        apply_edits(FILES, parse_edits(block("other.py", "x = 1", "x = 2")))
    with pytest.raises(EditError, match="no SEARCH/REPLACE edit"):
        patch_from_answer("<solution>just prose</solution>", FILES)
    assert repro_test_from_answer("```python\na\n```\ntext\n```python\nimport sys\nsys.exit(2)\n```") == \
        ("import sys\nsys.exit(2)", 2)
    with pytest.raises(EditError, match="no ```python block"):
        repro_test_from_answer("<think>```python\nx\n```</think> no test")


def test_rows_and_images():
    rows = [json.loads(line) for line in (ENV_DIR / "data/nemo_gym_rows.jsonl").read_text().splitlines()]
    hydra, conan = (SweGenRow.model_validate(r) for r in rows)  # NeMo-Gym rows, unchanged
    assert hydra.mode == "eval" and "hydra/compose.py" in hydra.metadata.relevant_file_contents
    assert conan.mode == "repro-gen" and conan.instance.FAIL_TO_PASS  # JSON-string list parsed
    broken = json.loads(json.dumps(rows[1]))
    broken["instance"]["regression_script"] = ""
    with pytest.raises(ValidationError, match="instance.regression_script"):
        SweGenRow.model_validate(broken)
    assert sif_docker_ref("/imgs/xingyaoww_sweb.eval.x86_64.dask_s_dask-9378.sif") == "xingyaoww/sweb.eval.x86_64.dask_s_dask-9378"
    env = SweGenEnvironment(SweGenConfig())
    assert env.image_for(conan) == "xingyaoww/sweb.eval.x86_64.conan-io_s_conan-10960"
    apptainer = SweGenEnvironment(SweGenConfig(sandbox_backend="apptainer"))
    assert apptainer.image_for(conan) == conan.metadata.image
