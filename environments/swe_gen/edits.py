"""The model's answer in ``swe_gen``: SEARCH/REPLACE edits turned into a git patch, or a
reproduction test. Pure functions, NeMo-Gym ``swerl_gen`` semantics
(``eval/process_patch.py``):

* **patch** (mode ``eval``): the answer must hold ``<solution>...</solution>`` (after any
  thinking; ``relaxed_formatting`` also takes an answer without the tags); inside it, fenced
  blocks of the form ``### path`` / ``<<<<<<< SEARCH`` / ... / ``=======`` / ... /
  ``>>>>>>> REPLACE``. Each SEARCH must occur in the row's ``relevant_file_contents`` (at a
  line start) and differ from its REPLACE; edits of one file apply from the end backwards.
  The patch is a git diff of the edited files (``remove_repo_name``: paths lose their first
  component, as in SWE-bench Verified's file listings).
* **reproduction test** (mode ``repro-gen``): the last fenced ``python`` block.

An unusable answer raises :class:`EditError` with the reason; it scores 0 (the model's fault).
"""

from __future__ import annotations

import difflib
import re

from servers.judge.protocol import strip_think

SOLUTION = re.compile(r"<solution>(.*?)</solution>", re.DOTALL)
SEARCH_REPLACE = re.compile(r"```.*?\n### (.*)\s*<<<<<<< SEARCH\n([\s\S]*?)\n=======\n([\s\S]*?)\n>>>>>>> REPLACE\n*```")
PYTHON_BLOCK = re.compile(r"```python\n(.*?)\n```", re.DOTALL)


class EditError(ValueError):
    """The answer holds no usable edit / test; the message says why."""


def solution_text(text: str, *, relaxed: bool) -> str:
    text = strip_think(text)
    found = SOLUTION.findall(text)
    if found:
        return found[0].strip()
    if relaxed:
        return text
    raise EditError("no <solution>...</solution> block in the answer")


def parse_edits(text: str) -> dict[str, list[tuple[str, str]]]:
    """path -> [(search, replace)], in order, duplicates dropped."""
    edits: dict[str, list[tuple[str, str]]] = {}
    for path, search, replace in SEARCH_REPLACE.findall(text):
        pairs = edits.setdefault(path.strip(), [])
        if (search, replace) not in pairs:
            pairs.append((search, replace))
    return edits


def apply_edits(files: dict[str, str], edits: dict[str, list[tuple[str, str]]]) -> dict[str, str]:
    """New contents of the edited files. A file missing from ``files`` can only be created
    (one edit with an empty SEARCH)."""
    out: dict[str, str] = {}
    for path, pairs in edits.items():
        if path not in files:
            if len(pairs) == 1 and not pairs[0][0].strip():
                out[path] = pairs[0][1] + ("\n" if pairs[0][1] and not pairs[0][1].endswith("\n") else "")
                continue
            raise EditError(f"{path} is not among the files given to the model")
        content = "\n" + files[path]
        placed: list[tuple[int, str, str]] = []
        for search, replace in pairs:
            if search == replace:
                raise EditError(f"{path}: a SEARCH block equals its REPLACE block")
            at = content.find("\n" + search)
            if at < 0:
                raise EditError(f"{path}: SEARCH block not found: {search[:200]!r}")
            placed.append((at, search, replace))
        for at, search, replace in sorted(placed, reverse=True):  # from the end: earlier offsets stay valid
            content = content[:at] + "\n" + replace + content[at + 1 + len(search):]
        out[path] = content[1:]
    return out


def _diff_lines(lines: list[str]) -> list[str]:
    # difflib keeps a last line without newline as is; git wants the "\ No newline" marker.
    return [line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines]


def git_diff(files: dict[str, str], new: dict[str, str], *, remove_repo_name: bool = False) -> str:
    """A patch ``git apply`` takes: one ``diff --git`` section per changed file."""
    sections = []
    for path in sorted(new):
        name = path.split("/", 1)[1] if remove_repo_name and "/" in path else path
        old = files.get(path)
        body = list(difflib.unified_diff((old or "").splitlines(keepends=True), new[path].splitlines(keepends=True),
                                         fromfile=f"a/{name}" if old is not None else "/dev/null",
                                         tofile=f"b/{name}", n=3))
        if not body:
            continue
        header = f"diff --git a/{name} b/{name}\n" + ("new file mode 100644\n" if old is None else "")
        sections.append(header + "".join(_diff_lines(body[:2]) + _diff_lines(body[2:])))
    return "".join(sections)


def patch_from_answer(text: str, files: dict[str, str], *, relaxed: bool = False, remove_repo_name: bool = False) -> str:
    edits = parse_edits(solution_text(text, relaxed=relaxed))
    if not edits:
        raise EditError("no SEARCH/REPLACE edit in the solution")
    patch = git_diff(files, apply_edits(files, edits), remove_repo_name=remove_repo_name)
    if not patch:
        raise EditError("the edits change nothing")
    return patch


def repro_test_from_answer(text: str) -> tuple[str, int]:
    """(test code, number of python blocks): the last block is the test (NeMo-Gym names the
    file ``reproduce_bug_<number of blocks>.py``)."""
    blocks = PYTHON_BLOCK.findall(strip_think(text))
    if not blocks:
        raise EditError("no ```python block with a reproduction test in the answer")
    return blocks[-1], len(blocks)
