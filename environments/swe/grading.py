"""Grade one patch inside a fresh sandbox of the instance image (SWE-bench's eval script).

Two execs, on purpose:
1. *apply* (no model code runs): write the model patch and the test patch, ``git apply -v``
   the model patch, else ``patch --batch --fuzz=5 -p1`` (the harness's fallback); restore
   every file the test patch touches to the base commit (deleting ones new in it) and apply
   the test patch, so a model patch that edits those tests cannot make them pass. Its
   markers are trustworthy because nothing the model wrote has run yet.
2. *test*: the test command with a wall-clock limit. Its exit status comes from the sandbox
   (not from the log), which the anti-spoofing rule in ``logparse.resolve`` relies on.
"""

from __future__ import annotations

import secrets
import shlex
import time
from dataclasses import dataclass, field

from environments.swe.logparse import Resolution, parse_log, resolve
from sandboxes import Limits, ResourceVerdict, Sandbox

APPLY_MARK = "__verigym_apply__"
TESTPATCH_FAILED = 4
NOT_APPLIED = 3


@dataclass
class GradeInputs:
    repo_dir: str
    base_commit: str
    model_patch: str
    test_patch: str
    test_files: list[str]
    test_command: str
    fail_to_pass: list[str]
    pass_to_pass: list[str]
    pre_test: str = ""  # e.g. activating the image's conda env


@dataclass
class GradeOutcome:
    patch_applied: bool
    apply_method: str | None
    apply_log: str
    test_patch_applied: bool = False
    test_exit_code: int | None = None
    test_verdict: str | None = None
    test_log: str = ""
    statuses: dict[str, str] = field(default_factory=dict)
    resolution: Resolution | None = None
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def timed_out(self) -> bool:
        return self.test_verdict == ResourceVerdict.TIMEOUT.value


def _heredoc(path: str, content: str, tag: str) -> str:
    # Quoted delimiter: the shell expands nothing inside; the random tag cannot occur in it.
    return f"cat > {shlex.quote(path)} <<'{tag}'\n{content}{'' if content.endswith(chr(10)) else chr(10)}{tag}\n"


def apply_script(inputs: GradeInputs) -> str:
    tag = "VERIGYM_EOF_" + secrets.token_hex(8)
    q = shlex.quote
    lines = ["set -u", f"cd {q(inputs.repo_dir)} || exit 2", "mkdir -p /tmp/verigym",
             _heredoc("/tmp/verigym/model.patch", inputs.model_patch, tag),
             _heredoc("/tmp/verigym/test.patch", inputs.test_patch, tag) if inputs.test_patch else ":",
             'applied=""',
             "if git apply --verbose /tmp/verigym/model.patch; then applied='git apply'",
             "elif patch --batch --fuzz=5 -p1 -i /tmp/verigym/model.patch; then applied='patch --fuzz'",
             "fi",
             f"printf '\\n{APPLY_MARK} %s\\n' \"$applied\"",
             f'[ -n "$applied" ] || exit {NOT_APPLIED}']
    for path in inputs.test_files:
        lines.append(f"if git cat-file -e {q(inputs.base_commit)}:{q(path)} 2>/dev/null; "
                     f"then git checkout -q {q(inputs.base_commit)} -- {q(path)}; else rm -rf -- {q(path)}; fi")
    if inputs.test_patch:
        lines.append(f"git apply --verbose /tmp/verigym/test.patch || exit {TESTPATCH_FAILED}")
    lines.append("exit 0")
    return "\n".join(lines) + "\n"


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


async def grade_in_sandbox(sandbox: Sandbox, inputs: GradeInputs, *, apply_timeout_s: float,
                           test_timeout_s: float, limits: Limits) -> GradeOutcome:
    """Apply + test in ``sandbox`` (which must be fresh). Raises SandboxError on infrastructure failure."""
    started = time.monotonic()
    env = {"HOME": "/tmp/verigym-home", "GIT_CONFIG_NOSYSTEM": "1", "PAGER": "cat"}
    applied = await sandbox.exec(["bash", "-s"], stdin=apply_script(inputs), timeout=apply_timeout_s,
                                 limits=limits, env=env)
    apply_log = _text(applied.stdout) + _text(applied.stderr)
    method = None
    for line in _text(applied.stdout).splitlines():
        if line.startswith(APPLY_MARK):
            method = line[len(APPLY_MARK):].strip() or None
    out = GradeOutcome(patch_applied=method is not None, apply_method=method, apply_log=apply_log)
    out.timings["apply_s"] = time.monotonic() - started
    if applied.verdict is not ResourceVerdict.OK:
        out.test_verdict = applied.verdict.value
        return out
    if method is None or applied.exit_code == TESTPATCH_FAILED:
        return out
    out.test_patch_applied = applied.exit_code == 0
    if not out.test_patch_applied:
        return out
    command = f"{inputs.pre_test}\n{inputs.test_command}" if inputs.pre_test else inputs.test_command
    tested = await sandbox.exec(["bash", "-c", command], timeout=test_timeout_s, limits=limits, env=env)
    out.timings["test_s"] = time.monotonic() - started - out.timings["apply_s"]
    out.test_exit_code, out.test_verdict = tested.exit_code, tested.verdict.value
    out.test_log = _text(tested.stdout) + ("\n" + _text(tested.stderr) if tested.stderr else "")
    if tested.verdict is ResourceVerdict.OK or tested.verdict is ResourceVerdict.OUTPUT_LIMIT:
        out.statuses = parse_log(out.test_log)
        out.resolution = resolve(out.statuses, inputs.fail_to_pass, inputs.pass_to_pass, tested.exit_code)
        if tested.verdict is ResourceVerdict.OUTPUT_LIMIT:
            out.resolution.resolved = False
            out.resolution.reason = "test output over the limit (log cut): " + out.resolution.reason
    return out
