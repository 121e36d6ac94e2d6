"""swe: SWE-bench-style grading of a repository patch, and agent sessions that produce one.

Grading mode: the patch comes from a ``submit`` call or diff text in the final message; a
FRESH sandbox of the instance image applies it and runs the tests (``grading.py``).
Agent mode: ``/seed_session`` keeps the row; the first tool call starts a session sandbox of
the instance image (lazily, so rows graded without tools never start one); tools ``exec``,
``read_file``, ``write_file``, ``str_replace``, ``submit``; ``/verify`` grades the submitted
patch, else the session's ``git diff`` against the base commit, in a fresh sandbox. The
session sandbox is destroyed on verify and on expiry (``close_session``).

Infrastructure problems carry a failure class: image missing / container start failure ->
``sandbox_error``; test command past ``test_timeout_s`` -> ``timeout``; a row whose test
patch does not apply -> ``verifier_error``.
"""

from __future__ import annotations

import shlex
import time
from typing import Any

from pydantic import ValidationError

from environments.swe import agent
from environments.swe.grading import GradeInputs, grade_in_sandbox
from environments.swe.images import ImageUnavailable, template_vars
from environments.swe.instances import InstanceSandboxes
from environments.swe.models import SweConfig, SweRow
from environments.swe.patches import extract_patch, normalize_patch
from sandboxes import SandboxError, SandboxSpec
from sandboxes.base import Sandbox
from servers.environment import Environment, SessionError, ToolError, Verdict, tool
from servers.wire import FailureClass, ResponseObject


def command_for_tests(row: SweRow, cfg: SweConfig) -> str:
    files = [f for f in row.test_files if f.endswith(".py")]
    if row.test_command:
        return row.test_command.replace("{test_files}", " ".join(shlex.quote(f) for f in files))
    if row.repo == "django/django":  # runtests.py takes dotted modules relative to tests/
        files = [f[:-3].removeprefix("tests/").replace("/", ".") for f in files]
    base = cfg.test_commands.get(row.repo, cfg.default_test_command)
    return " ".join([base, *(shlex.quote(f) for f in files)])


class SweEnvironment(InstanceSandboxes, Environment):
    name = "swe"
    agent_names = ("swebench_openhands_agent", "swe_agent",)  # NeMo-Gym agent_ref.name values routed here
    domain = "coding"
    summary = "Repository patch graded SWE-bench style in a fresh container (git apply, test patch, FAIL_TO_PASS/PASS_TO_PASS); agent sessions with exec/edit tools"
    needs = ("container",)
    Row = SweRow
    Config = SweConfig
    stateful = True

    @property
    def cfg(self) -> SweConfig:
        return self.config  # type: ignore[return-value]

    # ---- images and sandboxes (instances.py does the work) ---------------------------------
    def image_for(self, row: SweRow) -> str:
        cfg = self.cfg
        if row.image:
            return row.image
        fields = template_vars(row, cfg.image_prefix, cfg.sif_dir)
        return (cfg.sif_template if cfg.sandbox_backend == "apptainer" else cfg.image_template).format(**fields)

    async def ensure_image(self, row: SweRow, *, pull: bool | None = None) -> tuple[str, str]:
        """(image reference, 'present' | 'pulled' | 'built'); raises ImageUnavailable."""
        ref = self.image_for(row)
        docker_ref = None
        if self.cfg.sandbox_backend == "apptainer":
            docker_ref = self.cfg.image_template.format(**template_vars(row, self.cfg.image_prefix, self.cfg.sif_dir))
        return ref, await self.ensure_image_ref(ref, pull=pull, docker_ref=docker_ref)

    def _spec(self, image: str, row: SweRow) -> SandboxSpec:
        return self.sandbox_spec(image, row.repo_dir or self.cfg.repo_dir)

    # ---- grading -----------------------------------------------------------------------
    async def grade(self, row: SweRow, patch: str, source: str) -> Verdict:
        cfg = self.cfg
        extras: dict[str, Any] = {"instance_id": row.instance_id, "model_patch": patch, "patch_source": source,
                                  "resolved": False, "patch_applied": False, "evaluation_completed": False}
        t0 = time.monotonic()
        try:
            image, _ = await self.ensure_image(row)
        except ImageUnavailable as exc:
            return Verdict.failure(FailureClass.SANDBOX_ERROR, str(exc), **extras)
        extras["image"] = image
        timings: dict[str, float] = {"image_s": time.monotonic() - t0}
        inputs = GradeInputs(repo_dir="", base_commit=row.base_commit, model_patch=patch, test_patch=row.test_patch,
                             test_files=row.test_files, test_command=command_for_tests(row, cfg),
                             fail_to_pass=row.FAIL_TO_PASS, pass_to_pass=row.PASS_TO_PASS,
                             pre_test=cfg.pre_test_command, protect=cfg.protect_test_infrastructure,
                             channel=self.uses_channel(row.repo), scratch=self.grade_scratch)
        kw = dict(apply_timeout_s=cfg.apply_timeout_s, test_timeout_s=cfg.test_timeout_s,
                  limits=self._spec(image, row).limits)
        try:
            t1 = time.monotonic()
            pool = self.pool_for(image, self._spec(image, row))
            if pool is not None:
                async with pool.acquire() as sandbox:
                    timings["start_s"] = time.monotonic() - t1
                    inputs.repo_dir = await self.prime(sandbox, row.repo_dir or cfg.repo_dir)
                    outcome = await grade_in_sandbox(sandbox, inputs, **kw)
                    t2 = time.monotonic()
                timings["teardown_s"] = time.monotonic() - t2  # reset runs in the background
            else:
                sandbox = await self.create_sandbox(self._spec(image, row))
                timings["start_s"] = time.monotonic() - t1
                try:
                    inputs.repo_dir = await self.prime(sandbox, row.repo_dir or cfg.repo_dir)
                    outcome = await grade_in_sandbox(sandbox, inputs, **kw)
                finally:
                    t2 = time.monotonic()
                    await sandbox.destroy()
                    timings["teardown_s"] = time.monotonic() - t2
        except SandboxError as exc:
            return Verdict.failure(FailureClass.SANDBOX_ERROR, f"{image}: {exc}", **extras)
        timings.update(outcome.timings)
        timings["total_s"] = time.monotonic() - t0
        extras.update(patch_applied=outcome.patch_applied, apply_method=outcome.apply_method, timings=timings,
                      **outcome.integrity_extras())
        if not outcome.patch_applied:
            if outcome.test_verdict:  # the apply step itself hit a limit: not the patch's fault
                return Verdict.failure(FailureClass.TIMEOUT, f"applying the patch: {outcome.test_verdict}", **extras)
            extras.update(evaluation_completed=True, reason="the patch does not apply (git apply and patch --fuzz failed)",
                          apply_log=outcome.apply_log[-cfg.log_tail_chars:])
            return Verdict(0.0, extras=extras)
        if not outcome.test_patch_applied and outcome.test_verdict is None:
            return Verdict.failure(FailureClass.VERIFIER_ERROR, "the row's test_patch does not apply at base_commit "
                                   f"(wrong image or base_commit?): {outcome.apply_log[-600:]}", **extras)
        extras["log_tail"] = outcome.test_log[-cfg.log_tail_chars:] if cfg.log_tail_chars else ""
        extras["test_exit_code"] = outcome.test_exit_code
        if outcome.timed_out:
            return Verdict.failure(FailureClass.TIMEOUT, f"the test command ran past test_timeout_s={cfg.test_timeout_s}", **extras)
        if outcome.resolution is None:
            return Verdict.failure(FailureClass.SANDBOX_ERROR, f"the test run ended with {outcome.test_verdict}", **extras)
        res = outcome.resolution
        extras.update(resolved=res.resolved, evaluation_completed=True, reason=res.reason, **res.counts,
                      tests_status={"FAIL_TO_PASS": res.fail_to_pass, "PASS_TO_PASS": res.pass_to_pass})
        return Verdict(1.0 if res.resolved else 0.0, extras=extras)

    async def verify(self, row: SweRow, response: ResponseObject, session: agent.SweSession | None) -> Verdict:
        patch, source = extract_patch(response, tuple(self.cfg.submit_tools))
        if session is not None and (session.submitted_patch or session.sandbox is not None):
            try:
                patch, source = await agent.final_patch(session, self.cfg)
            except SandboxError as exc:
                return Verdict.failure(FailureClass.SANDBOX_ERROR, f"reading the session diff: {exc}",
                                       instance_id=row.instance_id, resolved=False)
        if not patch or not patch.strip():
            return Verdict(0.0, extras={"instance_id": row.instance_id, "resolved": False, "patch_applied": False,
                                        "evaluation_completed": False, "patch_source": source,
                                        "reason": "no patch: no submit call with a patch, no diff in the final message, no changes in the session"})
        return await self.grade(row, normalize_patch(patch), source)

    # ---- sessions and tools ------------------------------------------------------------
    async def seed_session(self, row: dict[str, Any]) -> agent.SweSession:
        try:
            parsed = SweRow.model_validate(row)
        except ValidationError as exc:
            raise SessionError(f"not a swe row: {exc.errors()[:3]}") from exc
        return agent.SweSession(row=parsed)

    async def close_session(self, state: agent.SweSession) -> None:
        await state.close()

    async def _sandbox(self, session: agent.SweSession | None) -> tuple[Sandbox, str]:
        if session is None:
            raise ToolError("this tool needs a session: call /seed_session first")
        async with session.lock:
            if session.closed:
                raise ToolError("the session is closed")
            if session.sandbox is None:
                try:
                    image, _ = await self.ensure_image(session.row)
                    session.sandbox = await self.create_sandbox(self._spec(image, session.row))
                    session.repo_dir = await self.prime(session.sandbox, session.row.repo_dir or self.cfg.repo_dir)
                    if self.cfg.prune_session_history:
                        await agent.prune_history(session.sandbox, session.repo_dir, self.cfg)
                except (ImageUnavailable, SandboxError) as exc:
                    raise ToolError(f"the session container could not start: {exc}") from exc
        return session.sandbox, session.repo_dir

    @tool("Run a bash command in the repository (working directory: the repo root). Returns exit code, stdout, stderr.")
    async def exec(self, session: agent.SweSession | None, args: agent.ExecArgs) -> dict[str, Any]:
        sandbox, repo = await self._sandbox(session)
        return await agent.run_command(sandbox, args, self.cfg)

    @tool("Read a text file (path relative to the repo root or absolute); optional 1-based line range.")
    async def read_file(self, session: agent.SweSession | None, args: agent.ReadArgs) -> dict[str, Any]:
        sandbox, repo = await self._sandbox(session)
        return await agent.read_file(sandbox, repo, args, self.cfg)

    @tool("Create or overwrite a file with the given content.")
    async def write_file(self, session: agent.SweSession | None, args: agent.WriteArgs) -> dict[str, Any]:
        sandbox, repo = await self._sandbox(session)
        return await agent.write_file(sandbox, repo, args.path, args.content)

    @tool("Replace the one occurrence of old_str in a file with new_str (fails if old_str occurs 0 or 2+ times).")
    async def str_replace(self, session: agent.SweSession | None, args: agent.StrReplaceArgs) -> dict[str, Any]:
        sandbox, repo = await self._sandbox(session)
        return await agent.str_replace(sandbox, repo, args)

    @tool("Finish: submit a patch (unified diff), or omit it to submit the current changes of the repository.")
    async def submit(self, session: agent.SweSession | None, args: agent.SubmitArgs) -> dict[str, Any]:
        if session is None:
            raise ToolError("submit needs a session: call /seed_session first")
        session.submitted = True
        session.submitted_patch = args.patch if args.patch and args.patch.strip() else None
        return {"submitted": True, "source": "patch" if session.submitted_patch else "git diff"}
