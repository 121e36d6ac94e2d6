"""Grade one patch inside a fresh sandbox of the instance image (SWE-bench's eval script).

Up to three execs, on purpose:
0. *setup* (swe_gen only): the row's own ``setup_script`` (installs, test files, test patch),
   before the patch, so nothing the patch changed (``setup.py``, a module it imports) runs while
   packages are installed.
1. *apply* (no model code runs): write the model patch and the test patch; save what the setup
   changed; ``git apply -v`` the model patch, else ``patch --batch --fuzz=5 -p1`` (the
   harness's fallback); put back test infrastructure the patch changed and remove modules that
   would shadow the standard library or the test tools (``integrity.py``; ``protect``); restore
   every file the test patch touches to the base commit (deleting ones new in it) and apply the
   test patch, so a model patch that edits those tests cannot make them pass; write the result
   harness (``harness/``) to a fresh folder outside the repository. Its markers are trustworthy
   because nothing the model wrote has run yet, and they carry a per-grade random tag.
2. *test*: the test command with a wall-clock limit, the harness loaded (``channel``). Its
   exit status comes from the sandbox (not from the log); the statuses come from the harness's
   result channel (``results.py``), or, with ``channel`` off, from the log (``logparse.py``).
"""

from __future__ import annotations

import secrets
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from environments.swe import integrity
from environments.swe.logparse import Resolution, parse_log, resolve
from environments.swe.results import read_channel
from sandboxes import Limits, ResourceVerdict, Sandbox, SandboxError

TESTPATCH_FAILED = 4
NOT_APPLIED = 3
HARNESS_FILES = {name: (Path(__file__).parent / "harness" / name).read_text()
                 for name in ("verigym_harness.py", "sitecustomize.py")}
# The environment of every grading exec: git and pagers that read no user config.
GRADE_ENV = {"HOME": "/tmp/verigym-home", "GIT_CONFIG_NOSYSTEM": "1", "PAGER": "cat"}


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
    pre_test: str = ""   # e.g. activating the image's conda env
    setup: str = ""      # swe_gen: the row's setup_script, run before the patch
    protect: bool = True  # restore test infrastructure the patch changed (integrity.py)
    channel: bool = True  # statuses from the harness's result channel, not from the log
    scratch: str = "/tmp"  # where the grade's own files go (outside the repository)
    tag: str = field(default_factory=lambda: secrets.token_hex(8))

    @property
    def work(self) -> str:
        return f"{self.scratch}/verigym-{self.tag}"

    @property
    def harness_dir(self) -> str:
        return f"{self.scratch}/verigym-harness-{self.tag}"

    @property
    def apply_mark(self) -> str:
        return f"__verigym_apply_{self.tag}__"


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
    restored: list[str] = field(default_factory=list)  # protected files the patch changed, put back
    removed: list[str] = field(default_factory=list)   # shadowing modules the patch added, removed
    xfail_refused: list[str] = field(default_factory=list)
    result_source: str = "log"
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def timed_out(self) -> bool:
        return self.test_verdict == ResourceVerdict.TIMEOUT.value

    def integrity_extras(self) -> dict[str, Any]:
        """What the grade did about the patch's reach into the test run (reply fields)."""
        extras: dict[str, Any] = {"result_source": self.result_source}
        for key, value in (("restored_paths", self.restored), ("removed_paths", self.removed),
                           ("xfail_refused", self.xfail_refused)):
            if value:
                extras[key] = value
        return extras


def _heredoc(path: str, content: str, tag: str) -> str:
    # Quoted delimiter: the shell expands nothing inside; the random tag cannot occur in it.
    return f"cat > {shlex.quote(path)} <<'{tag}'\n{content}{'' if content.endswith(chr(10)) else chr(10)}{tag}\n"


def apply_script(inputs: GradeInputs) -> str:
    eof = "VERIGYM_EOF_" + secrets.token_hex(8)
    q = shlex.quote
    work, base = inputs.work, inputs.base_commit or "HEAD"
    lines = ["set -u", f"cd {q(inputs.repo_dir)} || exit 2", f"mkdir -p {q(work)}",
             _heredoc(f"{work}/model.patch", inputs.model_patch, eof),
             _heredoc(f"{work}/test.patch", inputs.test_patch, eof) if inputs.test_patch else ":"]
    if inputs.protect:
        # File times tick with the kernel's coarse clock (a few ms): without the pause, a file
        # the patch writes in the mark's own tick would not count as newer than the mark.
        lines += [integrity.stash_script(f"{work}/stash"), f"touch {q(work)}/mark && sleep 0.02"]
    lines += ['applied=""',
              f"if git apply --verbose {q(work)}/model.patch; then applied='git apply'",
              f"elif patch --batch --fuzz=5 -p1 -i {q(work)}/model.patch; then applied='patch --fuzz'",
              "fi",
              f"printf '\\n{inputs.apply_mark} %s\\n' \"$applied\"",
              f'[ -n "$applied" ] || {{ rm -rf {q(work)}; exit {NOT_APPLIED}; }}']
    if inputs.protect:
        lines.append(integrity.guard_script(f"{work}/stash", f"{work}/mark", base))
    for path in inputs.test_files:
        lines.append(f"if git cat-file -e {q(inputs.base_commit)}:{q(path)} 2>/dev/null; "
                     f"then git checkout -q {q(inputs.base_commit)} -- {q(path)}; else rm -rf -- {q(path)}; fi")
    if inputs.test_patch:
        lines.append(f"git apply --verbose {q(work)}/test.patch || {{ rm -rf {q(work)}; exit {TESTPATCH_FAILED}; }}")
    lines.append(f"rm -rf {q(work)}")  # nothing of the grade's own files is left for the tests to see
    if inputs.channel:
        lines.append(f"mkdir -p {q(inputs.harness_dir)}")
        lines += [_heredoc(f"{inputs.harness_dir}/{name}", text, eof) for name, text in HARNESS_FILES.items()]
    lines.append("exit 0")
    return "\n".join(lines) + "\n"


def test_script(inputs: GradeInputs, nonce: str) -> str:
    """The test exec: ``pre_test``, the harness's environment, the test command."""
    parts = [inputs.pre_test] if inputs.pre_test else []
    if inputs.channel:
        h, q = inputs.harness_dir, shlex.quote
        parts.append(f'export PYTHONPATH={q(h)}"${{PYTHONPATH:+:$PYTHONPATH}}" '
                     f'PYTEST_PLUGINS=verigym_harness"${{PYTEST_PLUGINS:+,$PYTEST_PLUGINS}}" '
                     f"VERIGYM_CHANNEL={q(h + '/results')} VERIGYM_NONCE={q(nonce)} "
                     f"VERIGYM_REPO={q(inputs.repo_dir)} PYTHONNOUSERSITE=1")
    parts.append(inputs.test_command)
    return "\n".join(parts)


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


async def grade_in_sandbox(sandbox: Sandbox, inputs: GradeInputs, *, apply_timeout_s: float,
                           test_timeout_s: float, limits: Limits) -> GradeOutcome:
    """Setup + apply + test in ``sandbox`` (which must be fresh). Raises SandboxError on infrastructure failure."""
    started = time.monotonic()
    if inputs.setup:
        setup = await sandbox.exec(["bash", "-c", inputs.setup], timeout=test_timeout_s, limits=limits, env=GRADE_ENV)
        if setup.verdict is not ResourceVerdict.OK:
            out = GradeOutcome(patch_applied=False, apply_method=None, apply_log="", test_verdict=setup.verdict.value,
                               test_log=_text(setup.stdout) + _text(setup.stderr))
            out.timings["setup_s"] = time.monotonic() - started
            return out
    applied = await sandbox.exec(["bash", "-s"], stdin=apply_script(inputs), timeout=apply_timeout_s,
                                 limits=limits, env=GRADE_ENV)
    apply_log = _text(applied.stdout) + _text(applied.stderr)
    method = None
    for line in _text(applied.stdout).splitlines():
        if line.startswith(inputs.apply_mark):
            method = line[len(inputs.apply_mark):].strip() or None
    out = GradeOutcome(patch_applied=method is not None, apply_method=method, apply_log=apply_log)
    out.restored, out.removed = integrity.changed_paths(_text(applied.stdout))
    out.timings["apply_s"] = time.monotonic() - started
    if applied.verdict is not ResourceVerdict.OK:
        out.test_verdict = applied.verdict.value
        return out
    if method is None or applied.exit_code == TESTPATCH_FAILED:
        return out
    out.test_patch_applied = applied.exit_code == 0
    if not out.test_patch_applied:
        return out
    nonce = secrets.token_hex(16)
    tested = await sandbox.exec(["bash", "-c", test_script(inputs, nonce)], timeout=test_timeout_s, limits=limits,
                                env=GRADE_ENV)
    out.timings["test_s"] = time.monotonic() - started - out.timings["apply_s"]
    out.test_exit_code, out.test_verdict = tested.exit_code, tested.verdict.value
    out.test_log = _text(tested.stdout) + ("\n" + _text(tested.stderr) if tested.stderr else "")
    if tested.verdict is ResourceVerdict.OK or tested.verdict is ResourceVerdict.OUTPUT_LIMIT:
        if inputs.channel:
            out.resolution = await _from_channel(sandbox, inputs, nonce, tested.exit_code, out)
        else:
            out.statuses = parse_log(out.test_log)
            out.resolution = resolve(out.statuses, inputs.fail_to_pass, inputs.pass_to_pass, tested.exit_code)
        if tested.verdict is ResourceVerdict.OUTPUT_LIMIT:
            out.resolution.resolved = False
            out.resolution.reason = "test output over the limit (log cut): " + out.resolution.reason
    return out


async def _from_channel(sandbox: Sandbox, inputs: GradeInputs, nonce: str, exit_code: int | None,
                        out: GradeOutcome) -> Resolution:
    out.result_source = "harness"
    try:
        text = _text(await sandbox.download(f"{inputs.harness_dir}/results"))
    except FileNotFoundError:
        text = ""
    except SandboxError as exc:  # e.g. the code under test grew the file past the download cap
        if "larger than" not in str(exc) and "not a regular file" not in str(exc):
            raise
        return Resolution(False, reason=f"the result channel is unreadable ({exc})", trusted=False)
    reading = read_channel(text, nonce, integrity.is_protected)
    out.statuses, out.xfail_refused = reading.statuses, reading.xfail_refused
    if not reading.trusted:
        res = resolve({}, inputs.fail_to_pass, inputs.pass_to_pass, exit_code)
        res.reason, res.trusted = reading.reason, False
        return res
    res = resolve(reading.statuses, inputs.fail_to_pass, inputs.pass_to_pass, exit_code)
    if reading.xfail_refused and not res.resolved:
        res.reason += f" (xfail raised by the code under test counts as failed: {', '.join(reading.xfail_refused[:5])})"
    return res
