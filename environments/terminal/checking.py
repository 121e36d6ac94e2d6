"""What the terminal check runs with: the workspace made ready for the check files, and the
prelude that gives the check an environment the workspace cannot shadow (README: "The check's
environment"). The sandbox-side guard is ``check_guard.py``."""

from __future__ import annotations

import inspect
import os
import posixpath
import secrets
import shlex

from . import check_guard


def clear_paths_script(paths: list[str]) -> str:
    """Shell that makes room for the check files whatever the model left at their paths.

    The model owns the workspace: it may have put a directory, a symlink (pointing anywhere)
    a FIFO or a file where a check file or one of its parent directories goes, or taken the
    write bit away. Uploading over that fails, and a failure there must not turn the rollout into
    a masked infrastructure error (a way to dodge a zero), so those entries are removed first.
    """
    lines = ["chmod u+rwx . 2>/dev/null"]
    for path in paths:
        prefix = ""
        for part in posixpath.dirname(posixpath.normpath(path)).split("/"):
            if not part or part == ".":
                continue
            prefix = posixpath.join(prefix, part)
            q = shlex.quote(prefix)
            lines.append(f"if [ -L {q} ] || {{ [ -e {q} ] && [ ! -d {q} ]; }}; then rm -f {q}; fi; "
                         f"[ -d {q} ] && chmod u+rwx {q}")
        q = shlex.quote(posixpath.normpath(path))
        lines.append(f"if [ -L {q} ] || [ -d {q} ]; then chmod -R u+rwx {q} 2>/dev/null; rm -rf {q}; "
                     f"elif [ -e {q} ] && [ ! -f {q} ]; then rm -f {q}; fi")  # a FIFO or socket
    return "\n".join(lines) + "\ntrue\n"


PRELUDE_FAILED = "verigym-check-prelude-failed"
GUARD_SOURCE = inspect.getsource(check_guard) + "\ninstall(os.environ['VERIGYM_WORKSPACE'])\n"
_GIT_DISARMED = ("GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_COUNT=2 GIT_CONFIG_KEY_0=core.fsmonitor "
                 "GIT_CONFIG_VALUE_0=false GIT_CONFIG_KEY_1=core.hooksPath GIT_CONFIG_VALUE_1=/dev/null")


def write_check_site(folder: str) -> None:
    """The check's helper folder on the host (bound read-only into process sandboxes):
    ``sitecustomize.py`` (the guard) and an empty ``home``."""
    os.makedirs(os.path.join(folder, "home"), mode=0o755, exist_ok=True)
    with open(os.path.join(folder, "sitecustomize.py"), "w") as fh:
        fh.write(GUARD_SOURCE)
    for path in (folder, os.path.join(folder, "home"), os.path.join(folder, "sitecustomize.py")):
        os.chmod(path, 0o755 if os.path.isdir(path) else 0o644)


def check_prelude(workdir: str, site: str | None) -> str:
    """Shell that runs ``$1`` (the row's check command) with an environment the workspace
    cannot shadow: HOME outside the workspace (no user site-packages, dotfiles or git config
    of the model's), Python's bytecode cache moved out of the workspace (a planted
    ``__pycache__`` is never read), the git config the model could have written disarmed
    (fsmonitor, hooks), and ``check_guard`` as ``sitecustomize``: installed modules before
    same-named files in the workspace. PATH stays the sandbox's (the workspace is not on it).

    ``site``: a read-only folder already holding the guard (``write_check_site``; the process
    backend binds it); else the guard is written to a fresh folder under ``/tmp``, which no
    process of the model can reach any more (they are ended first)."""
    q = shlex.quote
    fail = f"{{ echo {PRELUDE_FAILED} >&2; exit 125; }}"
    if site is not None:
        lines = [f"d={q(site)}", f'[ -f "$d/sitecustomize.py" ] || {fail}']
    else:
        tag = "VERIGYM_GUARD_" + secrets.token_hex(8)
        lines = [f'd=$(mktemp -d /tmp/verigym-check.XXXXXXXX) && mkdir "$d/home" || {fail}',
                 f"cat > \"$d/sitecustomize.py\" <<'{tag}' || {fail}", GUARD_SOURCE + tag]
    return "\n".join(lines + [
        f'export VERIGYM_WORKSPACE={q(workdir)} PYTHONPATH="$d" HOME="$d/home" PYTHONNOUSERSITE=1 '
        'PYTHONPYCACHEPREFIX="$d/pycache" ' + _GIT_DISARMED,
        f'cd -- "$VERIGYM_WORKSPACE" || {fail}',
        'exec /bin/sh -c "$1"',
    ]) + "\n"
