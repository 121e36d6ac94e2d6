"""Row and config of the ``swe`` environment (SWE-bench rows, unchanged, are valid rows)."""

from __future__ import annotations

import json
from typing import Any

from pydantic import AliasChoices, Field, field_validator

from environments.swe.instances import SweContainerConfig
from environments.swe.patches import files_in_patch
from servers.wire import RowModel


def json_test_list(value: Any) -> Any:
    """A test list given as a JSON string (SWE-bench on the Hub stores them so) -> the list."""
    if isinstance(value, str):
        parsed = json.loads(value) if value.strip() else []
        if not isinstance(parsed, list):
            raise ValueError("must be a JSON list of test names")
        return parsed
    return value


class SweRow(RowModel):
    instance_id: str = Field(..., min_length=1)
    repo: str = Field("", description="owner/name; selects the default test command.")
    base_commit: str = Field(..., min_length=4, description="Commit the image's repository is checked out at.")
    test_patch: str = Field("", description="The tests' patch, applied over the model's patch at grading.")
    FAIL_TO_PASS: list[str] = Field(default_factory=list, description="Tests that must pass (JSON string or list).")
    PASS_TO_PASS: list[str] = Field(default_factory=list, description="Tests that must keep passing.")
    version: str | None = None
    image: str | None = Field(None, validation_alias=AliasChoices("image", "docker_image", "image_name"),
                              description="Explicit image (container ref or SIF path); default: the config template.")
    test_command: str | None = Field(None, validation_alias=AliasChoices("test_command", "test_cmd"),
                                     description="Full test command; default: per-repo command + test files.")
    repo_dir: str | None = Field(None, description="Repository path in the image; default from config.")

    _json_list = field_validator("FAIL_TO_PASS", "PASS_TO_PASS", mode="before")(json_test_list)

    @property
    def test_files(self) -> list[str]:
        return files_in_patch(self.test_patch) if self.test_patch else []


class SweConfig(SweContainerConfig):
    """swe's keys on top of the instance-image keys it shares with swe_gen (instances.py)."""

    image_template: str = Field("swebench/sweb.eval.x86_64.{instance_id_1776}:latest",
                                description="Container image of a row without 'image'. Fields: instance_id, instance_id_1776, repo, repo_slug, version, image_prefix.")
    image_prefix: str = Field("", description="Value of {image_prefix} in the templates.")
    sif_template: str = Field("{sif_dir}/{instance_id}.sif", description="apptainer: SIF path of a row without 'image'.")
    sif_dir: str = Field("/var/cache/verigym/sif", description="Value of {sif_dir}.")
    default_test_command: str = Field("pytest --no-header -rA --tb=no -p no:cacheprovider",
                                      description="Test command of repos not in test_commands; the test files are appended.")
    test_commands: dict[str, str] = Field(
        {"django/django": "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1",
         "sympy/sympy": "PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose"},
        description="Per-repo test commands (SWE-bench specs); the test files (django: modules) are appended.")
    submit_tools: list[str] = Field(["submit", "finish", "submit_patch"], description="Function calls whose 'patch' argument is the answer.")
    command_timeout_s: float = Field(60.0, gt=0, description="Default limit of an agent `exec`.")
    max_command_timeout_s: float = Field(600.0, gt=0, description="Largest timeout_s an agent may ask for.")
    max_tool_output_chars: int = Field(10000, ge=100, description="Characters of output returned to the agent per stream.")
    prune_session_history: bool = Field(True, description="Agent sessions: keep only the base commit in the session's "
                                        "repository (no refs, remotes, reflogs or objects after it), so the fix's future "
                                        "commits cannot be read (NeMo-Gym: apply_anti_cheating, on by default).")
