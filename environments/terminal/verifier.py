"""``terminal``: solve a small task with shell commands in a per-rollout sandbox.

``/seed_session`` creates the sandbox, writes ``setup_files`` and runs ``setup_commands``;
``POST /exec`` runs one shell command there, in one shell kept for the session (cwd,
variables and background jobs persist; see the README); ``/verify`` first ends every process
of the session, then uploads ``check_files`` (so the model cannot have planted or edited them)
and runs ``check_command`` over the session's workspace with an environment the workspace
cannot shadow (``check_prelude``): exit status 0 = reward 1. Where the session could change
the sandbox's system files (a container), the check runs in a fresh sandbox of the row's setup
with the session's workspace copied in (``check_sandbox``).
"""

from __future__ import annotations

import asyncio
import base64
import posixpath
import secrets
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from sandboxes import Limits, ResourceVerdict, SandboxError, SandboxPathError, SandboxSpec
from sandboxes.base import Sandbox, SandboxProcess
from sandboxes.env_support import CanaryFailed, SandboxedEnvironment, SandboxLimitsConfig
from servers.environment import EnvConfig, Environment, SessionError, ToolError, Verdict, tool
from servers.wire import FailureClass, ResponseObject, RowModel, response_from_text

from .checking import PRELUDE_FAILED, check_prelude, clear_paths_script, write_check_site


class TerminalRow(RowModel):
    setup_files: dict[str, str] = Field(default_factory=dict, description="Workspace files created before the episode.")
    setup_commands: list[str] = Field(default_factory=list, description="Shell commands run (in order) before the episode.")
    check_command: str = Field(..., min_length=1, description="Shell command run at verify; exit 0 = solved.")
    check_files: dict[str, str] = Field(default_factory=dict, description="Files written just before the check (hidden from the model).")
    task_id: str = Field("", description="Identifier (diagnostics only).")

    @field_validator("setup_files", "check_files")
    @classmethod
    def _workspace_relative(cls, files: dict[str, str]) -> dict[str, str]:
        for path in files:
            parts = path.split("/")
            if not path or path.startswith("/") or "\0" in path or ".." in parts or posixpath.normpath(path) in (".", ""):
                raise ValueError(f"file path {path!r} must be relative to the workspace, without '..'")
        return files


class TerminalConfig(SandboxLimitsConfig, EnvConfig):  # memory_mb, max_processes, max_output_bytes: the defaults
    command_timeout_s: float = Field(30.0, gt=0, description="Default wall-clock limit of one /exec command.")
    max_command_timeout_s: float = Field(120.0, gt=0, description="Largest timeout_s a call may ask for.")
    setup_timeout_s: float = Field(60.0, gt=0, description="Limit of each setup command.")
    check_timeout_s: float = Field(60.0, gt=0, description="Limit of the check command.")
    max_output_chars: int = Field(10000, ge=100, description="Characters of each stream returned to the model.")
    persistent_shell: bool = Field(True, description="One shell per session (cwd, variables, background jobs persist) "
                                   "where the backend supports it; false = a fresh sh -c per command.")
    check_sandbox: Literal["auto", "session", "fresh"] = Field(
        "auto", description="Where the check runs: session = the session's sandbox; fresh = a new sandbox of the row's "
        "setup with the session's workspace copied in; auto = fresh where the session could change the sandbox's "
        "system files (container backend), else session.")
    max_workspace_mb: int = Field(512, ge=1, description="check_sandbox fresh: the largest workspace copied into the "
                                  "check's sandbox; a larger one scores 0.")


class ExecArgs(BaseModel):
    # 32 Ki characters stays under Linux's 128 KiB limit on one exec argument in any encoding.
    command: str = Field(..., min_length=1, max_length=32768, pattern=r"^[^\x00]*$",
                         description="A shell command (run by /bin/sh -c in /workspace).")
    timeout_s: float | None = Field(None, gt=0, description="Wall-clock limit; default from config.")


@dataclass
class Session:
    sandbox: Sandbox
    commands: int = 0
    shell: SandboxProcess | None = None   # the persistent shell, started by the first command
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


# The persistent shell reads one request per line: a random per-call marker and the command
# in base64 (so any command fits one line). A command that does not parse is reported like
# `sh -c` reports it instead of being eval'ed: a syntax error inside eval would end the shell.
# Commands get /dev/null as stdin so they cannot read the request channel. After each
# command the marker and the status go to stdout, the marker to stderr.
SHELL_DRIVER = """
while IFS=' ' read -r __vg_mark __vg_code; do
  __vg_cmd=$(printf '%s' "$__vg_code" | base64 -d)
  if sh -n -c "$__vg_cmd"; then
    eval "$__vg_cmd" </dev/null
    __vg_status=$?
  else
    __vg_status=2
  fi
  printf '\\n%s %d\\n' "$__vg_mark" "$__vg_status"
  printf '\\n%s\\n' "$__vg_mark" >&2
done
"""
_MARKER_GRACE_S = 5.0
WORKDIR = "/workspace"


def _tail(data: bytes, limit: int) -> tuple[str, bool]:
    text = data.decode("utf-8", "replace")
    return (text, False) if len(text) <= limit else ("[... cut ...]\n" + text[-limit:], True)


class TerminalEnv(SandboxedEnvironment, Environment):
    name = "terminal"
    agent_names = ("terminal_simple_agent", "terminus_simple_agent",)  # NeMo-Gym agent_ref.name values routed here
    domain = "agent"
    summary = "Shell tasks in a per-rollout sandbox: tool /exec, reward = the row's check command exits 0."
    needs = ("sandbox",)
    Row = TerminalRow
    Config = TerminalConfig
    stateful = True

    _check_site: str | None = None  # host folder of the check's guard (process backend)

    def _limits(self, wall_s: float) -> Limits:
        return self.config.limits(wall_s)

    def sandbox_backend_options(self) -> dict[str, Any]:
        options = super().sandbox_backend_options()
        if self.config.sandbox_backend == "process":
            # The process backend's /tmp is not writable by the sandbox uid: the check's guard
            # comes from a host folder every sandbox of this backend sees read-only.
            self._check_site = tempfile.mkdtemp(prefix="verigym-terminal-check-")
            write_check_site(self._check_site)
            options["extra_ro_binds"] = [*options.get("extra_ro_binds", ()), self._check_site]
        return options

    async def close(self) -> None:
        try:
            await super().close()
        finally:
            if self._check_site is not None:
                shutil.rmtree(self._check_site, ignore_errors=True)

    def sandbox_run_limits(self) -> Limits:
        return self._limits(self.config.command_timeout_s)

    async def sandbox_canary(self) -> str:
        """A session, one /exec command and the check: what every rollout goes through."""
        row = {"responses_create_params": {"input": [{"role": "user", "content": "start-up canary"}]},
               "setup_files": {"in.txt": "6 7\n"}, "check_command": "test \"$(cat out.txt)\" = 42"}
        session = await self.seed_session(row)
        try:
            await self.exec(session, ExecArgs(command="set -- $(cat in.txt); echo $(($1 * $2)) > out.txt"))
            verdict = await self.verify(TerminalRow.model_validate(row),
                                        ResponseObject.model_validate(response_from_text("done")), session)
        finally:
            await self.close_session(session)
        if verdict.failure_class is not None or verdict.reward != 1.0:
            raise CanaryFailed(f"a solved task scored {verdict.reward} ({verdict.failure_detail or verdict.extras})")
        return "a shell command and the check ran in a session sandbox"

    async def _prepared(self, row: TerminalRow) -> Sandbox:
        """A sandbox with the row's setup done. SessionError = the row's setup is broken."""
        try:
            sandbox = await self.backend.create(SandboxSpec(files=dict(row.setup_files), workdir=WORKDIR))
        except SandboxPathError as exc:  # e.g. both "a" and "a/b" in setup_files
            raise SessionError(f"setup files cannot be written: {exc}") from exc
        try:
            for command in row.setup_commands:
                result = await sandbox.exec(command, timeout=self.config.setup_timeout_s,
                                            limits=self._limits(self.config.setup_timeout_s))
                if not result.ok:
                    raise SessionError(f"setup command {command!r} failed ({result.verdict.value}, exit "
                                       f"{result.exit_code}): {result.text('stderr')[-500:]}")
        except BaseException:
            await sandbox.destroy()
            raise
        return sandbox

    async def seed_session(self, row: dict[str, Any]) -> Session:
        try:
            parsed = TerminalRow.model_validate(row)
        except ValueError as exc:
            raise SessionError(f"row is not a terminal task: {exc}") from exc
        return Session(await self._prepared(parsed))

    async def close_session(self, state: Session | None) -> None:
        if state is not None:
            if state.shell is not None:
                await state.shell.kill()
            await state.sandbox.destroy()  # kills anything else it runs, too

    @tool("Run a shell command in the task's workspace (/workspace). Returns exit code and output.")
    async def exec(self, session: Session, args: ExecArgs) -> dict[str, Any]:
        cfg = self.config
        timeout = min(args.timeout_s or cfg.command_timeout_s, cfg.max_command_timeout_s)
        async with session.lock:
            session.commands += 1
            if cfg.persistent_shell and session.sandbox.supports_processes:
                return await self._exec_in_shell(session, args.command, timeout)
            return await self._exec_fresh(session, args.command, timeout)

    async def _exec_in_shell(self, session: Session, command: str, timeout: float) -> dict[str, Any]:
        cfg = self.config
        try:
            shell = session.shell
            if shell is None or shell.returncode is not None:
                if shell is not None:
                    await shell.kill()
                # Per-process limits as for the longest command; each command's wall clock is
                # the read deadline below.
                shell = session.shell = await session.sandbox.start_process(
                    ["/bin/sh", "-c", SHELL_DRIVER], limits=self._limits(cfg.max_command_timeout_s))
            marker = f"[verigym-shell-{secrets.token_hex(8)}]"  # no spaces: read splits on them
            shell.take("stdout")
            shell.take("stderr")
            request = f"{marker} {base64.b64encode(command.encode()).decode()}\n".encode()
            try:
                await shell.write_stdin(request)
            except SandboxError:
                pass  # the shell ended meanwhile: reported as such below
            out = await shell.read_until(f"\n{marker} ".encode(), timeout=timeout, max_bytes=cfg.max_output_bytes)
            status: int | None = None
            err_data: bytes
            if out.found:
                line = await shell.read_until(b"\n", timeout=_MARKER_GRACE_S)
                err = await shell.read_until(f"\n{marker}\n".encode(), timeout=_MARKER_GRACE_S, stream="stderr",
                                             max_bytes=cfg.max_output_bytes)
                stdout_data = out.data[:-len(marker) - 2]
                err_data = err.data[:-len(marker) - 2] if err.found else err.data
                status = int(line.data) if line.data.strip().isdigit() else None
            else:
                stdout_data, err_data = out.data, shell.take("stderr")
                ended = await shell.wait(_MARKER_GRACE_S) if out.reason == "eof" else None
                await shell.kill()
                session.shell = None
        except SandboxError as exc:
            raise ToolError(f"the sandbox failed (not your command): {exc}") from exc
        stdout, out_cut = _tail(stdout_data, cfg.max_output_chars)
        stderr, err_cut = _tail(err_data, cfg.max_output_chars)
        reply: dict[str, Any] = {"exit_code": status, "stdout": stdout, "stderr": stderr,
                                 "stdout_truncated": out_cut or out.reason == "max_bytes",
                                 "stderr_truncated": err_cut, "timed_out": out.reason == "timeout"}
        if out.found:
            return reply
        if out.reason == "eof":
            # `exit`, `set -e` + a failure, a killed shell: the command ran and ended the shell.
            reply["exit_code"] = ended
            reply["note"] = "the shell exited; the next command starts a new shell in /workspace"
            return reply
        reply["killed"] = ResourceVerdict.TIMEOUT.value if out.reason == "timeout" else ResourceVerdict.OUTPUT_LIMIT.value
        reply["note"] = ("the command was stopped and the shell restarted: the next command starts in /workspace "
                         "with a fresh environment (files persist)")
        return reply

    async def _exec_fresh(self, session: Session, command: str, timeout: float) -> dict[str, Any]:
        cfg = self.config
        try:
            result = await session.sandbox.exec(command, timeout=timeout, limits=self._limits(timeout))
        except SandboxError as exc:
            raise ToolError(f"the sandbox failed (not your command): {exc}") from exc
        stdout, out_cut = _tail(result.stdout, cfg.max_output_chars)
        stderr, err_cut = _tail(result.stderr, cfg.max_output_chars)
        reply: dict[str, Any] = {"exit_code": result.exit_code, "stdout": stdout, "stderr": stderr,
                                 "stdout_truncated": out_cut or result.stdout_truncated,
                                 "stderr_truncated": err_cut or result.stderr_truncated,
                                 "timed_out": result.verdict is ResourceVerdict.TIMEOUT}
        if result.verdict is not ResourceVerdict.OK:
            reply["killed"] = result.verdict.value
        return reply

    def _fresh_check(self, sandbox: Sandbox) -> bool:
        mode = self.config.check_sandbox
        return mode == "fresh" or (mode == "auto" and sandbox.system_writable)

    async def _end_session(self, session: Session) -> None:
        """Nothing of the model may still run when the checker is written and run: a background
        job could rewrite it, or the files it reads, after the upload."""
        if session.shell is not None:
            await session.shell.kill()
            session.shell = None
        await session.sandbox.end_processes()

    async def _copy_of(self, row: TerminalRow, session: Session) -> Sandbox:
        """A fresh sandbox of the row's setup whose workspace is the session's (check_sandbox
        fresh): the image's interpreter and tools, whatever the session did to its own.
        SandboxPathError: the workspace is over max_workspace_mb (the model's doing)."""
        archive = await session.sandbox.archive_workspace(max_bytes=self.config.max_workspace_mb << 20)
        fresh = await self._prepared(row)
        try:
            await fresh.extract_workspace(archive)
        except BaseException:
            await fresh.destroy()
            raise
        return fresh

    async def verify(self, row: TerminalRow, response: ResponseObject, session: Session | None) -> Verdict:
        cfg = self.config
        commands_run = session.commands if session else 0
        sandbox: Sandbox | None = None
        fresh = session is None
        try:
            if session is None:  # no tool call was made: the task is checked in a fresh setup
                sandbox = await self._prepared(row)
            else:
                async with session.lock:
                    await self._end_session(session)
                sandbox = session.sandbox
                if self._fresh_check(sandbox):
                    sandbox, fresh = await self._copy_of(row, session), True
                if row.check_files:
                    await sandbox.exec(clear_paths_script(list(row.check_files)), timeout=cfg.check_timeout_s,
                                       limits=self._limits(cfg.check_timeout_s))
            if row.check_files:
                await sandbox.upload(dict(row.check_files))
            result = await sandbox.exec(["/bin/sh", "-c", check_prelude(WORKDIR, self._check_site), "sh",
                                         row.check_command],
                                        timeout=cfg.check_timeout_s, limits=self._limits(cfg.check_timeout_s))
        except SessionError as exc:
            return Verdict.failure(FailureClass.VERIFIER_ERROR, str(exc))
        except SandboxPathError as exc:
            if session is None:  # only the row's own setup ran: its files and check files collide
                return Verdict.failure(FailureClass.VERIFIER_ERROR, f"check files cannot be written: {exc}")
            # What the model left in the workspace blocks a check file, or is too large to copy:
            # the task is not solved.
            return Verdict(0.0, extras={"check_error": str(exc), "commands_run": commands_run})
        except SandboxError as exc:
            return Verdict.failure(FailureClass.SANDBOX_ERROR, f"{type(exc).__name__}: {exc}")
        finally:
            if sandbox is not None and fresh:
                await sandbox.destroy()
        output = result.text("stdout") + result.text("stderr")
        extras = {"check_exit_code": result.exit_code, "check_verdict": result.verdict.value,
                  "check_output": output[-2000:], "commands_run": commands_run,
                  "check_sandbox": "fresh" if fresh else "session"}
        if result.exit_code == 125 and PRELUDE_FAILED in result.text("stderr") and (fresh or not sandbox.system_writable):
            # The model never ran where the prelude failed (a fresh sandbox, or the process
            # backend's private /tmp): the check could not be prepared.
            return Verdict.failure(FailureClass.SANDBOX_ERROR, "the check's environment could not be prepared", **extras)
        if result.verdict is ResourceVerdict.TIMEOUT:
            # The model may have left the workspace in a state that hangs the check: its fault.
            return Verdict(0.0, extras=extras)
        return Verdict(1.0 if result.ok else 0.0, extras=extras)
