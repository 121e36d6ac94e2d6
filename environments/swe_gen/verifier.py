"""``swe_gen``: SWE patch generation and reproduction-test generation (NeMo-Gym ``swerl_gen``
rows, unchanged), graded in containers of the instance image.

* ``mode: eval`` -- the answer's SEARCH/REPLACE edits over ``metadata.relevant_file_contents``
  become a patch (``edits.py``). In a fresh sandbox: the patch is applied (``git apply``, else
  ``patch --fuzz``) before anything of the model runs, then the instance's ``setup_script``
  (it restores the test files and applies the test patch, so a patch that edits the tests
  gains nothing) and ``test_script`` run; the log's FAIL_TO_PASS / PASS_TO_PASS statuses
  decide (swe's grading and log parsers). RESOLVED_FULL = 1.0, RESOLVED_PARTIAL (some
  FAIL_TO_PASS pass, every PASS_TO_PASS passes) = ``partial_reward`` (NeMo-Gym: 0.2), else 0.
* ``mode: repro-gen`` -- the answer's last ``python`` block is a test that must exit 2 while
  the issue exists and 0 once fixed. Two fresh sandboxes: ``regression_script`` then the test
  (before), and the gold ``instance.patch`` + ``regression_script`` then the test (after).
  Reward 1.0 iff the exit codes are 2 then 0. Exit codes come from the sandbox, not from the
  log, so a test cannot print its way to a reward.

Image: ``metadata.image`` (SIF path under apptainer; a container reference otherwise, and a
SWE-Gym SIF name ``owner_name.sif`` maps to the Docker Hub image ``owner/name``). Infrastructure
problems carry a failure class (image missing / sandbox failure -> ``sandbox_error``; a setup,
regression or test script past its limit -> ``timeout``; a gold patch that does not apply ->
``verifier_error``); an unusable answer scores 0.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shlex
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from environments.swe_grading.grading import GRADE_ENV, GradeInputs, apply_script, grade_in_sandbox
from environments.swe_grading.images import ImageUnavailable
from environments.swe_grading.instances import InstanceSandboxes, SweContainerConfig
from environments.swe_grading.logparse import PASSING, json_test_list
from sandboxes import ResourceVerdict, SandboxError
from sandboxes.base import Sandbox
from servers.environment import Environment, Verdict
from servers.wire import FailureClass, ResponseObject, RowModel

from .edits import EditError, patch_from_answer, repro_test_from_answer
from .repro import exit_status, run_crossover

RESOLUTION_REWARD = {"RESOLVED_FULL": 1.0, "RESOLVED_NO": 0.0}


class SweGenInstance(BaseModel):
    model_config = ConfigDict(extra="allow")

    instance_id: str = Field(..., min_length=1)
    repo: str = ""
    base_commit: str = ""
    patch: str = Field("", description="The gold patch (repro-gen: applied for the 'after' run).")
    test_patch: str = ""
    setup_script: str = Field("", description="eval: run after the model's patch is applied, before test_script.")
    test_script: str = Field("", description="eval: runs the tests; its log holds the statuses.")
    regression_script: str = Field("", description="repro-gen: prepares the repository before the test runs.")
    FAIL_TO_PASS: list[str] = Field(default_factory=list)
    PASS_TO_PASS: list[str] = Field(default_factory=list)

    _lists = field_validator("FAIL_TO_PASS", "PASS_TO_PASS", mode="before")(json_test_list)


class SweGenMetadata(BaseModel):
    model_config = ConfigDict(extra="allow")

    relevant_file_contents: dict[str, str] = Field(default_factory=dict, description="path -> content (a JSON string in NeMo-Gym rows).")
    remove_repo_name: bool = False
    image: str | None = Field(None, description="SIF path (apptainer) or container image reference.")

    @field_validator("relevant_file_contents", mode="before")
    @classmethod
    def _json_object(cls, value: Any) -> Any:
        return json.loads(value) if isinstance(value, str) and value.strip() else (value or {})


class SweGenRow(RowModel):
    instance: SweGenInstance
    metadata: SweGenMetadata = Field(default_factory=SweGenMetadata)
    mode: Literal["eval", "repro-gen"] = "eval"
    dataset_name: str | None = None
    dataset_split: str | None = None
    partial_similarity: bool | None = None

    @model_validator(mode="after")
    def _what_the_mode_needs(self) -> "SweGenRow":
        need = {"eval": ("setup_script", "test_script"), "repro-gen": ("patch", "regression_script")}[self.mode]
        missing = [f"instance.{key}" for key in need if not getattr(self.instance, key).strip()]
        if self.mode == "eval" and not self.metadata.relevant_file_contents:
            missing.append("metadata.relevant_file_contents")
        if missing:
            raise ValueError(f"mode {self.mode!r} needs {', '.join(missing)}")
        return self


class SweGenConfig(SweContainerConfig):
    image_template: str = Field("{sif_docker_ref}", description="Container image of a row whose metadata.image is a SIF "
                                "path or missing. Fields: instance_id, sif_docker_ref (SWE-Gym 'owner_name.sif' -> 'owner/name').")
    relaxed_formatting: bool = Field(False, description="eval: accept edits outside <solution>...</solution> (NeMo-Gym relaxed_formatting).")
    partial_reward: float = Field(0.2, ge=0, le=1, description="eval: reward of RESOLVED_PARTIAL (NeMo-Gym: 0.2).")
    repro_timeout_s: float = Field(300.0, gt=0, description="repro-gen: limit of one run of the model's test; past it the test failed.")
    repro_python: str = Field("$(command -v python || command -v python3)", description="repro-gen: interpreter command (shell).")
    repro_guard: bool = Field(True, description="repro-gen: cross over (sham then gold state in one container, gold then "
                              "sham in the other; .git unreadable during the runs) so that only the bug decides the exit "
                              "codes (repro.py). false = NeMo-Gym parity: one run on the base tree, one after the gold patch.")


def sif_docker_ref(image: str | None) -> str:
    """SWE-Gym SIF file names are their Docker Hub image with '/' as '_': xingyaoww_sweb.eval... -> xingyaoww/sweb.eval..."""
    stem = os.path.basename(image or "").removesuffix(".sif")
    owner, _, rest = stem.partition("_")
    return f"{owner}/{rest}" if rest else stem


class SweGenEnvironment(InstanceSandboxes, Environment):
    name = "swe_gen"
    domain = "coding"
    summary = "SWE patch generation (SEARCH/REPLACE -> patch, FAIL_TO_PASS/PASS_TO_PASS) and reproduction-test generation (exit 2 before the gold patch, 0 after), graded in instance containers"
    needs = ("container",)
    Row = SweGenRow
    Config = SweGenConfig
    agent_names = ("swerl_gen_simple_agent",)

    @property
    def cfg(self) -> SweGenConfig:
        return self.config  # type: ignore[return-value]

    def image_for(self, row: SweGenRow) -> str:
        image = row.metadata.image
        if self.cfg.sandbox_backend == "apptainer" or (image and not image.endswith(".sif")):
            if not image:
                raise ImageUnavailable("the row has no metadata.image (a SIF path under apptainer)")
            return image
        ref = self.cfg.image_template.format(instance_id=row.instance.instance_id,
                                             sif_docker_ref=sif_docker_ref(image) if image else "")
        if not ref:
            raise ImageUnavailable("the row has no metadata.image and image_template names no image for it")
        return ref

    async def ensure_image(self, row: SweGenRow, *, pull: bool | None = None) -> tuple[str, str]:
        """(image reference, 'present' | 'pulled' | 'built'); raises ImageUnavailable."""
        image = self.image_for(row)
        docker_ref = self.cfg.image_template.format(instance_id=row.instance.instance_id,  # apptainer pulls from it
                                                    sif_docker_ref=sif_docker_ref(image))
        return image, await self.ensure_image_ref(image, pull=pull, docker_ref=docker_ref)

    def _limits(self, image: str):  # type: ignore[no-untyped-def]
        return self.sandbox_spec(image, self.cfg.repo_dir).limits

    @asynccontextmanager
    async def _sandbox(self, row: SweGenRow) -> AsyncIterator[tuple[str, Sandbox, str]]:
        """(image, a fresh sandbox of it, the repository path in it): from the image's warm pool
        (reset before reuse) when warm_pool_size > 0, else created and destroyed here.
        Raises ImageUnavailable / SandboxError."""
        image, _ = await self.ensure_image(row)
        spec = self.sandbox_spec(image, self.cfg.repo_dir)
        pool = self.pool_for(image, spec)
        if pool is not None:
            async with pool.acquire() as sandbox:
                yield image, sandbox, await self.prime(sandbox, self.cfg.repo_dir)
            return
        sandbox = await self.create_sandbox(spec)
        try:
            yield image, sandbox, await self.prime(sandbox, self.cfg.repo_dir)
        finally:
            await sandbox.destroy()

    async def verify(self, row: SweGenRow, response: ResponseObject, session: Any | None) -> Verdict:
        text = response.last_message_text or response.output_text
        extras: dict[str, Any] = {"instance_id": row.instance.instance_id, "mode": row.mode}
        if not text.strip():
            return Verdict(0.0, extras={**extras, "reason": "empty answer"})
        try:
            if row.mode == "eval":
                patch = patch_from_answer(text, row.metadata.relevant_file_contents, relaxed=self.cfg.relaxed_formatting,
                                          remove_repo_name=row.metadata.remove_repo_name)
            else:
                test, blocks = repro_test_from_answer(text)
        except EditError as exc:
            return Verdict(0.0, extras={**extras, "reason": f"unusable answer: {exc}"})
        try:
            if row.mode == "eval":
                return await self.grade_patch(row, patch, extras)
            return await self.grade_repro(row, test, f"reproduce_bug_{blocks}.py", extras)
        except ImageUnavailable as exc:
            return Verdict.failure(FailureClass.SANDBOX_ERROR, str(exc), **extras)
        except SandboxError as exc:
            return Verdict.failure(FailureClass.SANDBOX_ERROR, f"{row.instance.instance_id}: {exc}", **extras)

    # ---- patch generation --------------------------------------------------------------
    async def grade_patch(self, row: SweGenRow, patch: str, extras: dict[str, Any]) -> Verdict:
        cfg, inst = self.cfg, row.instance
        extras.update(model_patch=patch, patch_applied=False)
        started = time.monotonic()
        async with self._sandbox(row) as (image, sandbox, repo):
            # The row's setup runs before the patch (as in NeMo-Gym): nothing the patch changed
            # (setup.py, a module it imports) runs while packages are installed.
            inputs = GradeInputs(repo_dir=repo, base_commit=inst.base_commit or "HEAD", model_patch=patch, test_patch="",
                                 test_files=[], test_command=inst.test_script, fail_to_pass=inst.FAIL_TO_PASS,
                                 pass_to_pass=inst.PASS_TO_PASS, setup=inst.setup_script,
                                 protect=cfg.protect_test_infrastructure, channel=self.uses_channel(inst.repo),
                                 scratch=self.grade_scratch)
            outcome = await grade_in_sandbox(sandbox, inputs, apply_timeout_s=cfg.apply_timeout_s,
                                             test_timeout_s=cfg.test_timeout_s, limits=self._limits(image))
        extras.update(image=image, patch_applied=outcome.patch_applied, apply_method=outcome.apply_method,
                      grade_s=round(time.monotonic() - started, 3), **outcome.integrity_extras())
        if not outcome.patch_applied and outcome.test_verdict and "setup_s" in outcome.timings:
            return Verdict.failure(FailureClass.TIMEOUT if outcome.timed_out else FailureClass.SANDBOX_ERROR,
                                   f"setup_script: {outcome.test_verdict}", **extras)
        if not outcome.patch_applied:
            if outcome.test_verdict:
                return Verdict.failure(FailureClass.TIMEOUT, f"applying the patch: {outcome.test_verdict}", **extras)
            extras.update(resolution="RESOLVED_NO", reason="the patch does not apply (git apply and patch --fuzz failed)",
                          apply_log=outcome.apply_log[-cfg.log_tail_chars:])
            return Verdict(0.0, extras=extras)
        extras.update(log_tail=outcome.test_log[-cfg.log_tail_chars:] if cfg.log_tail_chars else "",
                      test_exit_code=outcome.test_exit_code)
        if outcome.timed_out:
            return Verdict.failure(FailureClass.TIMEOUT, f"test_script ran past test_timeout_s={cfg.test_timeout_s}",
                                   **extras)
        if outcome.resolution is None:
            return Verdict.failure(FailureClass.SANDBOX_ERROR, f"the test run ended with {outcome.test_verdict}", **extras)
        res = outcome.resolution
        passed = res.counts["fail_to_pass_passed"]
        partial = (not res.resolved and res.trusted and 0 < passed < len(res.fail_to_pass)
                   and all(s in PASSING for s in res.pass_to_pass.values()))
        resolution = "RESOLVED_FULL" if res.resolved else "RESOLVED_PARTIAL" if partial else "RESOLVED_NO"
        extras.update(resolution=resolution, resolved=res.resolved, reason=res.reason, **res.counts,
                      tests_status={"FAIL_TO_PASS": res.fail_to_pass, "PASS_TO_PASS": res.pass_to_pass},
                      verification_result={"status": "done", "resolution": resolution})
        reward = cfg.partial_reward if partial else RESOLUTION_REWARD[resolution]
        return Verdict(reward, extras=extras)

    # ---- reproduction tests --------------------------------------------------------------
    async def _run_repro(self, row: SweGenRow, test: str, filename: str, *, with_gold: bool) -> dict[str, Any]:
        """NeMo-Gym parity (repro_guard off): one run in a fresh sandbox, on the base tree or after the
        gold patch. {"exit_code", "verdict", "output"} or {"failure": (class, detail)}."""
        cfg = self.cfg
        async with self._sandbox(row) as (image, sandbox, repo):
            limits = self._limits(image)
            if with_gold:
                gold = GradeInputs(repo_dir=repo, base_commit="", model_patch=row.instance.patch, test_patch="",
                                   test_files=[], test_command="", fail_to_pass=[], pass_to_pass=[], protect=False,
                                   channel=False, scratch=self.grade_scratch)
                applied = await sandbox.exec(["bash", "-s"], stdin=apply_script(gold), timeout=cfg.apply_timeout_s,
                                             limits=limits, env=GRADE_ENV)
                if applied.verdict is not ResourceVerdict.OK or applied.exit_code != 0:
                    return {"failure": (FailureClass.VERIFIER_ERROR, "the row's gold patch (instance.patch) does not "
                                        f"apply: {(applied.text() + applied.text('stderr'))[-400:]}")}
            failure = await self._regression(row, sandbox, limits)
            if failure:
                return {"failure": failure}
            await sandbox.upload({filename: test})
            exit_code, verdict, output = await exit_status(sandbox, ["bash", "-c", self._test_command(repo, filename)],
                                                           timeout=cfg.repro_timeout_s, limits=limits, env=GRADE_ENV)
        return {"exit_code": exit_code, "verdict": verdict, "output": self._tail(output)}

    def _test_command(self, repo: str, filename: str) -> str:
        return f"{self.cfg.pre_test_command}\ncd {shlex.quote(repo)} && exec {self.cfg.repro_python} {shlex.quote(filename)}"

    def _tail(self, text: str) -> str:
        return text[-self.cfg.log_tail_chars:] if self.cfg.log_tail_chars else ""

    async def _regression(self, row: SweGenRow, sandbox: Sandbox, limits: Any) -> tuple[FailureClass, str] | None:
        prepared = await sandbox.exec(["bash", "-c", row.instance.regression_script], timeout=self.cfg.test_timeout_s,
                                      limits=limits, env=GRADE_ENV)
        if prepared.verdict is ResourceVerdict.OK:
            return None
        return (FailureClass.TIMEOUT if prepared.verdict is ResourceVerdict.TIMEOUT else FailureClass.SANDBOX_ERROR,
                f"regression_script: {prepared.verdict.value}")

    async def _run_crossover(self, row: SweGenRow, test: str, filename: str, order: tuple[str, str]) -> dict[str, Any]:
        """repro_guard: one container, the test in order[0]'s state then order[1]'s (repro.py)."""
        cfg = self.cfg
        async with self._sandbox(row) as (image, sandbox, repo):
            limits = self._limits(image)
            failure = await self._regression(row, sandbox, limits)
            if failure:
                return {"failure": failure}
            await sandbox.upload({filename: test})
            runs = await run_crossover(sandbox, repo, row.instance.patch, secrets.token_hex(8), order,
                                       self._test_command(repo, filename), apply_timeout_s=cfg.apply_timeout_s,
                                       repro_timeout_s=cfg.repro_timeout_s, limits=limits, env=GRADE_ENV)
        if "failure" in runs:
            return {"failure": (FailureClass.VERIFIER_ERROR, f"the row's gold patch (instance.patch): {runs['failure']}")}
        runs["outputs"] = [self._tail(o) for o in runs["outputs"]]
        return runs

    async def grade_repro(self, row: SweGenRow, test: str, filename: str, extras: dict[str, Any]) -> Verdict:
        extras.update(repro_test=test, repro_file=filename, repro_guard=self.cfg.repro_guard)
        started = time.monotonic()
        if self.cfg.repro_guard:
            a, b = await asyncio.gather(self._run_crossover(row, test, filename, ("sham", "gold")),
                                        self._run_crossover(row, test, filename, ("gold", "sham")))
            for phase in (a, b):
                if "failure" in phase:
                    return Verdict.failure(*phase["failure"], **extras)
            # before = the sham state (the bug present), after = the gold state
            before = {"codes": [a["codes"][0], b["codes"][1]], "verdicts": [a["verdicts"][0], b["verdicts"][1]],
                      "outputs": [a["outputs"][0], b["outputs"][1]]}
            after = {"codes": [a["codes"][1], b["codes"][0]], "verdicts": [a["verdicts"][1], b["verdicts"][0]],
                     "outputs": [a["outputs"][1], b["outputs"][0]]}
        else:
            one, two = await asyncio.gather(self._run_repro(row, test, filename, with_gold=False),
                                            self._run_repro(row, test, filename, with_gold=True))
            for phase in (one, two):
                if "failure" in phase:
                    failure_class, detail = phase["failure"]
                    return Verdict.failure(failure_class, detail, **extras)
            before = {"codes": [one["exit_code"]], "verdicts": [one["verdict"]], "outputs": [one["output"]]}
            after = {"codes": [two["exit_code"]], "verdicts": [two["verdict"]], "outputs": [two["output"]]}
        extras["grade_s"] = round(time.monotonic() - started, 3)
        extras.update(return_codes_before_patch=before["codes"], return_codes_after_patch=after["codes"],
                      verdict_before=before["verdicts"], verdict_after=after["verdicts"],
                      output_before=before["outputs"][0], output_after=after["outputs"][0],
                      verification_result={"status": "done", "return_codes_before_patch": before["codes"],
                                           "return_codes_after_patch": after["codes"]})
        if all(c == 2 for c in before["codes"]) and all(c == 0 for c in after["codes"]):
            extras["reason"] = "the test reproduces the issue (exit 2) and passes with the gold patch (exit 0)"
            return Verdict(1.0, extras=extras)
        extras["reason"] = (f"exit codes {before['codes']} before / {after['codes']} after the gold patch; "
                            "needed 2 then 0 in every run (None: the test was stopped, see verdict_before/after)")
        return Verdict(0.0, extras=extras)
