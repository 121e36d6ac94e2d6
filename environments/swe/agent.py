"""Agent-mode session state and the tools' work inside the session sandbox.

File tools go through ``exec`` (``cat``, stdin) rather than archive upload/download so they
work the same on every sandbox backend and for paths outside the workdir.
"""

from __future__ import annotations

import asyncio
import posixpath
import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from sandboxes import Limits, LostOutputError, ResourceVerdict, Sandbox
from servers.environment import ToolError

if TYPE_CHECKING:
    from environments.swe.models import SweConfig, SweRow

MAX_FILE_BYTES = 4 << 20
# Paths left out of the session diff: build/test artefacts, not the agent's answer.
DIFF_EXCLUDES = ("':(exclude,glob)**/__pycache__/**'", "':(exclude,glob)**/*.pyc'", "':(exclude).pytest_cache'")


@dataclass
class SweSession:
    row: "SweRow"
    sandbox: Sandbox | None = None
    repo_dir: str = ""
    submitted: bool = False
    submitted_patch: str | None = None
    closed: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def close(self) -> None:
        self.closed = True
        async with self.lock:  # a container still starting is destroyed once it is up
            sandbox, self.sandbox = self.sandbox, None
        if sandbox is not None:
            await sandbox.destroy()


class ExecArgs(BaseModel):
    command: str = Field(..., min_length=1, description="bash command line")
    timeout_s: float | None = Field(None, gt=0, description="wall-clock limit in seconds")


class ReadArgs(BaseModel):
    path: str = Field(..., min_length=1)
    start_line: int | None = Field(None, ge=1)
    end_line: int | None = Field(None, ge=1)


class WriteArgs(BaseModel):
    path: str = Field(..., min_length=1)
    content: str


class StrReplaceArgs(BaseModel):
    path: str = Field(..., min_length=1)
    old_str: str = Field(..., min_length=1)
    new_str: str = ""


class SubmitArgs(BaseModel):
    patch: str | None = Field(None, description="unified diff; omit to submit the repository's current changes")


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"[... {len(text) - limit} chars cut ...]\n" + text[-limit:]


def resolve_path(repo: str, path: str) -> str:
    return posixpath.normpath(path if path.startswith("/") else posixpath.join(repo, path))


def _limits(cfg: "SweConfig", wall_s: float) -> Limits:
    return Limits(wall_s=wall_s, cpu_s=wall_s, memory_mb=cfg.memory_mb, max_processes=cfg.max_processes,
                  max_file_mb=1024, max_open_files=1024, max_output_bytes=1 << 20)


async def run_command(sandbox: Sandbox, args: ExecArgs, cfg: "SweConfig") -> dict[str, Any]:
    timeout = min(args.timeout_s or cfg.command_timeout_s, cfg.max_command_timeout_s)
    result = await sandbox.exec(["bash", "-c", args.command], timeout=timeout, limits=_limits(cfg, timeout))
    out = {"exit_code": result.exit_code, "stdout": _clip(result.text(), cfg.max_tool_output_chars),
           "stderr": _clip(result.text("stderr"), cfg.max_tool_output_chars)}
    if result.verdict is not ResourceVerdict.OK:
        out["killed"] = result.verdict.value  # timeout, output_limit, memory_limit...
    return out


async def _cat(sandbox: Sandbox, path: str) -> str:
    try:
        result = await sandbox.exec(["cat", "--", path], timeout=30,
                                    limits=Limits(wall_s=30, max_output_bytes=MAX_FILE_BYTES))
    except LostOutputError:  # reading has no side effect: read again
        result = await sandbox.exec(["cat", "--", path], timeout=30,
                                    limits=Limits(wall_s=30, max_output_bytes=MAX_FILE_BYTES))
    if result.verdict is ResourceVerdict.OUTPUT_LIMIT:
        raise ToolError(f"{path} is larger than {MAX_FILE_BYTES} bytes")
    if result.exit_code != 0:
        raise ToolError(result.text("stderr").strip() or f"cannot read {path}")
    return result.text()


async def read_file(sandbox: Sandbox, repo: str, args: ReadArgs, cfg: "SweConfig") -> dict[str, Any]:
    path = resolve_path(repo, args.path)
    text = await _cat(sandbox, path)
    lines = text.splitlines(keepends=True)
    start = (args.start_line or 1) - 1
    end = args.end_line or len(lines)
    return {"path": path, "content": _clip("".join(lines[start:end]), cfg.max_tool_output_chars * 4),
            "total_lines": len(lines)}


async def write_file(sandbox: Sandbox, repo: str, path: str, content: str) -> dict[str, Any]:
    full = resolve_path(repo, path)
    script = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1"'
    result = await sandbox.exec(["sh", "-c", script, "sh", full], stdin=content.encode(), timeout=30,
                                limits=Limits(wall_s=30, max_file_mb=64))
    if result.exit_code != 0:
        raise ToolError(result.text("stderr").strip() or f"cannot write {full}")
    return {"path": full, "bytes": len(content.encode())}


async def str_replace(sandbox: Sandbox, repo: str, args: StrReplaceArgs) -> dict[str, Any]:
    full = resolve_path(repo, args.path)
    text = await _cat(sandbox, full)
    count = text.count(args.old_str)
    if count != 1:
        raise ToolError(f"old_str occurs {count} times in {full}; it must occur exactly once")
    await write_file(sandbox, repo, full, text.replace(args.old_str, args.new_str, 1))
    line = text[: text.index(args.old_str)].count("\n") + 1
    return {"path": full, "replaced_at_line": line}


# The session's repository keeps only the base commit: refs, remotes, stashes, reflogs and the
# objects only they reached (an image cloned with its history holds the fix's future commits,
# which an agent could read with `git log --all`; NeMo-Gym's swebench apply_anti_cheating).
PRUNE_HISTORY = """set -u
base=$(git rev-parse --verify -q HEAD) || exit 0
git update-ref refs/heads/verigym-base "$base" && git symbolic-ref HEAD refs/heads/verigym-base || exit 3
git for-each-ref --format='%(refname)' | while read -r ref; do
  [ "$ref" = refs/heads/verigym-base ] || git update-ref -d "$ref"
done
git remote | while read -r r; do git remote remove "$r"; done
rm -rf .git/logs .git/ORIG_HEAD .git/FETCH_HEAD .git/MERGE_HEAD .git/refs/original .git/shallow .git/info/grafts
git reflog expire --expire=now --expire-unreachable=now --all && git gc -q --prune=now || exit 3
"""


async def prune_history(sandbox: Sandbox, repo: str, cfg: "SweConfig") -> None:
    """Leave the session's repository nothing after the base commit (SandboxError if git fails)."""
    result = await sandbox.exec(["bash", "-c", f"cd {shlex.quote(repo)} && " + "{\n" + PRUNE_HISTORY + "}"],
                                timeout=cfg.apply_timeout_s, limits=_limits(cfg, cfg.apply_timeout_s),
                                env={"HOME": "/tmp/verigym-home", "GIT_CONFIG_NOSYSTEM": "1"})
    if not result.ok:
        from sandboxes import SandboxError  # noqa: PLC0415
        raise SandboxError(f"pruning the repository's history failed ({result.verdict.value}, exit {result.exit_code}): "
                           f"{result.text('stderr')[-300:]}")


async def final_patch(session: SweSession, cfg: "SweConfig") -> tuple[str, str]:
    """The submitted patch, else the repository's changes against the base commit."""
    if session.submitted_patch:
        return session.submitted_patch, "submit"
    if session.sandbox is None:
        return "", "none"
    base = shlex.quote(session.row.base_commit)
    # Intent-to-add makes new files show in the diff without staging the agent's edits.
    script = f"git add -A -N . && git diff --binary {base} -- . {' '.join(DIFF_EXCLUDES)}"
    async with session.lock:
        result = await session.sandbox.exec(["bash", "-c", script], timeout=cfg.apply_timeout_s,
                                            limits=Limits(wall_s=cfg.apply_timeout_s, max_output_bytes=64 << 20),
                                            env={"HOME": "/tmp/verigym-home", "PAGER": "cat"})
    if result.exit_code != 0:
        from sandboxes import SandboxError  # noqa: PLC0415
        raise SandboxError(f"git diff failed ({result.exit_code}): {result.text('stderr')[-300:]}")
    return result.text(), "session diff"
