"""Running a reproduction test so that it can pass only for the bug, not for the tree's state.

NeMo-Gym runs the test once on the base tree (must exit 2) and once after the gold patch (must
exit 0). A test can tell those two trees apart without touching the bug: the gold patch makes
the working tree dirty (``git diff --quiet``), gives the patched files new modification times
and inodes, leaves the grade's own files behind; a test that exits at random is right one time
in four. With ``repro_guard`` (default) the two containers cross over:

* container A: the **sham** state, then the **gold** state; container B: gold, then sham.
  The test must exit 2, 0 in A and 0, 2 in B (``return_codes_before_patch`` = [A1, B2],
  ``return_codes_after_patch`` = [A2, B1]). Any signal that follows the order of runs or the
  container (a counter file, time, process ids, the hostname, chance) gets one of them wrong.
* the **sham** state is the base tree with the same files changed as by the gold patch, in a
  way that changes no behaviour: each Python file the gold patch modifies gets a trailing
  comment, every other one is rewritten unchanged, files the gold patch adds exist empty. In
  both states those files are new files (new inode and times); no state is a clean tree.
* ``.git`` is unreadable while the test runs (``chmod 000``; the container's root has no
  capability to override it), so neither ``git diff`` nor reading ``.git`` tells the states
  apart; the grade's own files live there too and no ``/tmp`` trace of the grade remains.
* bytecode is not written (``PYTHONDONTWRITEBYTECODE``), so a second run never loads a first
  run's cache of a file that changed within the same second.

Not closed (``README``): a test that reads the source text of the patched files and looks for
the buggy line itself, or for a file the gold patch deletes; a test whose ``chmod`` gives
``.git`` back to itself and then compares files against it.
"""

from __future__ import annotations

import shlex
from typing import Any

from environments.swe_grading.patches import files_in_patch
from sandboxes import Limits, LostOutputError, ResourceVerdict, Sandbox

SHAM_COMMENT = "# verigym: behaviour unchanged"
LOST_OUTPUT = "(this run's output was lost on its way from the container; its exit code was kept)"


async def exit_status(sandbox: Sandbox, argv: list[str], **kwargs: Any) -> tuple[int | None, str, str]:
    """(exit code or None when stopped, verdict, output) of one run whose grade needs only its exit
    code: output lost on the way (LostOutputError) leaves the code, which the container engine still knows."""
    try:
        ran = await sandbox.exec(argv, **kwargs)
    except LostOutputError as exc:
        if exc.exit_code is None:
            raise
        return exc.exit_code, ResourceVerdict.OK.value, LOST_OUTPUT
    code = ran.exit_code if ran.verdict is ResourceVerdict.OK else None
    return code, ran.verdict.value, ran.text() + ran.text("stderr")


def states_script(repo: str, gold_patch: str, tag: str) -> str:
    """Bash functions ``vg_prepare`` (save the gold patch's files as they are), ``vg_state sham|gold``
    and ``vg_hide``/``vg_show`` (``.git``); the saved copies live inside ``.git``."""
    q = shlex.quote
    store = f".git/verigym-{tag}"
    files = " ".join(q(f) for f in files_in_patch(gold_patch))
    eof = f"VERIGYM_GOLD_{tag}"
    return f"""set -u
cd {q(repo)} || exit 2
S={q(store)}
FILES=({files})
vg_show() {{ chmod 755 .git; }}
vg_hide() {{ chmod 000 .git; }}
vg_prepare() {{
  mkdir -p "$S/orig"
  cat > "$S/gold.patch" <<'{eof}'
{gold_patch}{'' if gold_patch.endswith(chr(10)) else chr(10)}{eof}
  for f in "${{FILES[@]}}"; do
    if [ -e "$f" ]; then cp -a --parents -- "$f" "$S/orig/"; fi
  done
}}
vg_base() {{
  for f in "${{FILES[@]}}"; do
    rm -f -- "$f"
    if [ -e "$S/orig/$f" ]; then cp -a -- "$S/orig/$f" "$f"; fi
  done
}}
vg_state() {{
  vg_base
  if [ "$1" = gold ]; then
    git apply "$S/gold.patch" || patch --batch --fuzz=5 -p1 -i "$S/gold.patch" || return 3
    return 0
  fi
  for f in "${{FILES[@]}}"; do
    if [ -e "$S/orig/$f" ]; then
      case "$f" in
        *.py) {{ cat -- "$S/orig/$f"; printf '\\n{SHAM_COMMENT}\\n'; }} > "$f.vg-new";;
        *) cat -- "$S/orig/$f" > "$f.vg-new";;
      esac
      chmod --reference="$S/orig/$f" -- "$f.vg-new" && mv -f -- "$f.vg-new" "$f"
    else
      mkdir -p -- "$(dirname -- "$f")" && : > "$f"
    fi
  done
}}
"""


async def run_crossover(sandbox: Sandbox, repo: str, gold_patch: str, tag: str, order: tuple[str, str],
                        test_command: str, *, apply_timeout_s: float, repro_timeout_s: float, limits: Limits,
                        env: dict[str, str]) -> dict[str, Any]:
    """In one container (regression_script already run, the test file written): the test in
    ``order[0]`` state, then in ``order[1]``. {"codes": [c1, c2], "verdicts": [...], "outputs": [...]}
    or {"failure": detail} when a state cannot be set (the gold patch does not apply)."""
    script = states_script(repo, gold_patch, tag)
    runs: dict[str, list[Any]] = {"codes": [], "verdicts": [], "outputs": []}
    for i, state in enumerate(order):
        step = ("vg_prepare\n" if i == 0 else "vg_show\n") + f"vg_state {state} || exit 3\nvg_hide\n"
        code, verdict, output = await exit_status(sandbox, ["bash", "-c", script + step], timeout=apply_timeout_s,
                                                  limits=limits, env=env)
        if code != 0:
            return {"failure": f"setting the {state} state failed (exit {code}, {verdict}): {output[-400:]}"}
        code, verdict, output = await exit_status(sandbox, ["bash", "-c", test_command], timeout=repro_timeout_s,
                                                  limits=limits, env={**env, "PYTHONDONTWRITEBYTECODE": "1"})
        runs["codes"].append(code)
        runs["verdicts"].append(verdict)
        runs["outputs"].append(output)
    return runs
