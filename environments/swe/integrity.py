"""Test infrastructure a patch cannot change, for SWE grading (``swe``, ``swe_gen``).

Which files a patch really changed is read from the tree after applying it, not from the
patch text (``git apply`` and ``patch --fuzz`` each read names their own way: quoted names,
context diffs, renames): every file whose status changed after a marker was touched, plus the
files the patch deleted. Of those, in the container's shell (``guard_script``):

* **protected** files are put back as they were before the patch: test code (any path with a
  ``test``/``tests``/``testing``/``e2e`` component, ``test_*.py``, ``*_test.py``, ``*_tests.py``,
  ``conftest.py``), test-runner configuration (``pytest.ini``, ``.pytest.ini``, ``tox.ini``,
  ``setup.cfg``, ``pyproject.toml``), interpreter start-up hooks (``sitecustomize.py``,
  ``usercustomize.py``, ``*.pth``), installed-package metadata that declares pytest plugins
  (``*.egg-info/``, ``*.dist-info/``, ``*.egg/``), and files that replace source at import
  (``__pycache__/``, ``*.pyc``, ``*.pyo``, extension modules ``*.so``/``*.pyd``/``*.dylib``).
  SWE-bench's own split puts every test file in the test patch, so a fix never needs these.
* **shadowing** files are removed: a new module or package named like one of the standard
  library's or the test tools' (``unittest.py``, ``pytest/``, ``json.py``) in a folder that is
  not a package, where it would be imported in their place.

"As they were": the copy saved just before the patch (what the row's own setup left, e.g. a
test patch applied by swe_gen's ``setup_script``), else the committed file, else nothing.
"""

from __future__ import annotations

import shlex
import sys

TEST_COMPONENTS = ("test", "tests", "testing", "e2e")
PROTECTED_NAMES = ("conftest.py", "pytest.ini", ".pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml",
                   "sitecustomize.py", "usercustomize.py")
PROTECTED_NAME_GLOBS = ("test_*.py", "*_test.py", "*_tests.py", "*.pth", "*.pyc", "*.pyo", "*.so", "*.pyd", "*.dylib")
PROTECTED_COMPONENT_GLOBS = ("__pycache__", "*.egg-info", "*.dist-info", "*.egg")
# Top-level names a new module must not take outside a package: the standard library's and the
# test tools'. sys.stdlib_module_names (3.10+) is the standard library of the grader's Python;
# the container's may differ by a few names.
TOOL_MODULES = ("pytest", "_pytest", "pluggy", "py", "unittest2", "nose", "nose2", "mock", "hypothesis", "xdist",
                "pytest_cov", "coverage", "setuptools", "pkg_resources", "_distutils_hack", "pip",
                "verigym_harness")
SHADOW_NAMES = tuple(sorted(set(getattr(sys, "stdlib_module_names", ())) | set(TOOL_MODULES)))

RESTORED_MARK = "__verigym_restored__"
REMOVED_MARK = "__verigym_removed__"


def is_protected(path: str) -> bool:
    """The Python twin of ``vg_protected`` in ``guard_script`` (host-side decisions, tests)."""
    from fnmatch import fnmatchcase
    parts = path.split("/")
    if any(p in TEST_COMPONENTS for p in parts):
        return True
    if any(fnmatchcase(p, g) for p in parts[:-1] for g in PROTECTED_COMPONENT_GLOBS) or "__pycache__" in parts:
        return True
    name = parts[-1]
    return name in PROTECTED_NAMES or any(fnmatchcase(name, g) for g in PROTECTED_NAME_GLOBS + PROTECTED_COMPONENT_GLOBS)


def _case(patterns: tuple[str, ...]) -> str:
    # shell case patterns: a leading "." or other characters are literal except * ? [
    return "|".join(p if any(c in p for c in "*?[") else shlex.quote(p) for p in patterns)


def stash_script(stash: str) -> str:
    """Before the patch: save what differs from the commit (the row's setup's own changes), so a
    protected file the patch touches can be put back as the setup left it."""
    s = shlex.quote(stash)
    return (f"mkdir -p {s} && {{ git diff --name-only -z HEAD; git ls-files -z --others --exclude-standard; }} "
            f"| xargs -0 -r cp -a --parents -t {s} -- 2>/dev/null; true")


def guard_script(stash: str, mark: str, base: str) -> str:
    """After the patch: restore protected files, remove shadowing ones (see the module doc).
    ``mark``: a file touched just before the patch was applied; ``base``: the commit to restore
    committed files from."""
    s, m, b = shlex.quote(stash), shlex.quote(mark), shlex.quote(base)
    components = " | ".join(f"*/{c}/*" for c in TEST_COMPONENTS) + " | */__pycache__/* | " + " | ".join(
        f"*/{g}/*" for g in PROTECTED_COMPONENT_GLOBS if g != "__pycache__")
    names = _case(PROTECTED_NAMES + PROTECTED_NAME_GLOBS)
    shadow = _case(SHADOW_NAMES)
    return f"""
vg_protected() {{
  case "/$1/" in {components}) return 0;; esac
  case "${{1##*/}}" in {names}) return 0;; esac
  return 1
}}
vg_shadows() {{
  local rest="$1" parent=. comp name
  while :; do
    comp=${{rest%%/*}}
    case "$comp" in *.py) name=${{comp%.py}};; *.*) name=${{comp%%.*}};; *) name=$comp;; esac
    case "$name" in {shadow}) [ -f "$parent/__init__.py" ] || return 0;; esac
    [ "$rest" = "$comp" ] && return 1
    parent="$parent/$comp"; rest=${{rest#*/}}
  done
}}
vg_restore() {{
  rm -rf -- "$1"
  if [ -e {s}/"$1" ] || [ -L {s}/"$1" ]; then mkdir -p -- "$(dirname -- "$1")" && cp -a -- {s}/"$1" "$1"
  elif git cat-file -e {b}:"$1" 2>/dev/null; then git checkout -q {b} -- "$1"
  fi
  printf '%s %q\\n' {RESTORED_MARK} "$1"
}}
{{ find . -path ./.git -prune -o ! -type d -cnewer {m} -print0; git ls-files -z --deleted; }} |
while IFS= read -r -d '' p; do
  p=${{p#./}}
  if vg_protected "$p"; then vg_restore "$p"
  elif ! [ -e {s}/"$p" ] && ! git cat-file -e {b}:"$p" 2>/dev/null && vg_shadows "$p"; then
    rm -rf -- "$p"; printf '%s %q\\n' {REMOVED_MARK} "$p"
  fi
done
"""


def changed_paths(log: str) -> tuple[list[str], list[str]]:
    """(restored, removed) as the guard reported them (shell-quoted names, unquoted here)."""
    restored, removed = [], []
    for line in log.splitlines():
        for mark, into in ((RESTORED_MARK, restored), (REMOVED_MARK, removed)):
            if line.startswith(mark + " "):
                try:
                    into.append(" ".join(shlex.split(line[len(mark) + 1:])) or line[len(mark) + 1:])
                except ValueError:
                    into.append(line[len(mark) + 1:])
    return restored, removed
