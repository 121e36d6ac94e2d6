"""Row and config of the ``swe`` environment (SWE-bench rows, unchanged, are valid rows)."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import AliasChoices, Field, field_validator

from environments.swe.patches import files_in_patch
from sandboxes.env_support import SandboxLimitsConfig
from servers.environment import EnvConfig
from servers.wire import RowModel


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

    @field_validator("FAIL_TO_PASS", "PASS_TO_PASS", mode="before")
    @classmethod
    def _json_list(cls, value: Any) -> Any:
        # SWE-bench on the Hub stores these lists as JSON strings.
        if isinstance(value, str):
            parsed = json.loads(value) if value.strip() else []
            if not isinstance(parsed, list):
                raise ValueError("must be a JSON list of test names")
            return parsed
        return value

    @property
    def test_files(self) -> list[str]:
        return files_in_patch(self.test_patch) if self.test_patch else []


class SweConfig(SandboxLimitsConfig, EnvConfig):
    sandbox_backend: Literal["container", "apptainer"] = Field("container", description="sandboxes.open_backend name.")
    sandbox_env: dict[str, str] = Field(default_factory=dict, description="Environment variables of every sandbox (e.g. PYTHONDONTWRITEBYTECODE).")
    image_template: str = Field("swebench/sweb.eval.x86_64.{instance_id_1776}:latest",
                                description="Container image of a row without 'image'. Fields: instance_id, instance_id_1776, repo, repo_slug, version, image_prefix.")
    image_prefix: str = Field("", description="Value of {image_prefix} in the templates.")
    registries: list[str] = Field(["docker.io"], description="Registries tried in order for references without one.")
    pull_missing_images: bool = Field(False, description="Pull a missing image at verify/seed time (else: sandbox_error; use `envs prepare`).")
    local_images: dict[str, str] = Field({"verigym-swe-tiny:latest": "images/tiny/build.sh"},
                                         description="Images built from a local script (path relative to this folder) instead of pulled.")
    build_local_images: bool = Field(True, description="Build local_images on first use when missing.")
    min_free_disk_gb: float = Field(20.0, ge=0, description="Refuse to pull when the image store has less free disk.")
    pull_timeout_s: float = Field(1800.0, gt=0, description="Limit of one image pull.")
    build_timeout_s: float = Field(900.0, gt=0, description="Limit of one local image build.")
    sif_template: str = Field("{sif_dir}/{instance_id}.sif", description="apptainer: SIF path of a row without 'image'.")
    sif_dir: str = Field("/var/cache/verigym/sif", description="Value of {sif_dir}.")
    apptainer_binary: str = Field("apptainer", description="apptainer (or singularity) binary for `pull`.")
    repo_dir: str = Field("/testbed", description="Repository path inside the image (SWE-bench: /testbed).")
    pre_test_command: str = Field(
        "if [ -f /opt/miniconda3/bin/activate ]; then . /opt/miniconda3/bin/activate && conda activate testbed; fi",
        description="Shell run before the test command (SWE-bench images: activate the conda env).")
    default_test_command: str = Field("pytest --no-header -rA --tb=no -p no:cacheprovider",
                                      description="Test command of repos not in test_commands; the test files are appended.")
    test_commands: dict[str, str] = Field(
        {"django/django": "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1",
         "sympy/sympy": "PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose"},
        description="Per-repo test commands (SWE-bench specs); the test files (django: modules) are appended.")
    apply_timeout_s: float = Field(120.0, gt=0, description="Limit of applying the patches.")
    test_timeout_s: float = Field(1800.0, gt=0, description="Limit of the test command (SWE-bench default 1800 s).")
    memory_mb: int = Field(8192, ge=256, description="Memory limit of a sandbox.")
    max_processes: int = Field(512, ge=16, description="Processes at once in a sandbox.")
    max_output_bytes: int = Field(16 << 20, ge=1 << 16, description="Test log captured per stream; past it the run is cut.")
    warm_pool_size: int = Field(0, ge=0, description="Grading containers kept started per image (0: start one per grade).")
    warm_pool_images: int = Field(4, ge=1, description="Images with a warm pool at once (least recently used dropped).")
    submit_tools: list[str] = Field(["submit", "finish", "submit_patch"], description="Function calls whose 'patch' argument is the answer.")
    command_timeout_s: float = Field(60.0, gt=0, description="Default limit of an agent `exec`.")
    max_command_timeout_s: float = Field(600.0, gt=0, description="Largest timeout_s an agent may ask for.")
    max_tool_output_chars: int = Field(10000, ge=100, description="Characters of output returned to the agent per stream.")
    log_tail_chars: int = Field(4000, ge=0, description="Characters of the test log in the reply.")
