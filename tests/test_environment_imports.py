"""Environments share code through library folders, never through each other's modules.

An environment folder (``environments/<name>/`` with a ``verifier.py``) may import its own
modules and library folders (``environments/<lib>/`` without a ``verifier.py``, e.g.
``agent_actions``, ``math_grading``); a library folder may import only library folders. So an
environment can be renamed, removed or rewritten without breaking another one, and what two
environments share is in one place that says so (docs/adding-an-environment.md).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENVIRONMENTS = ROOT / "environments"


def _folders() -> tuple[set[str], set[str]]:
    """(environment folders, library folders) under environments/."""
    folders = [p for p in ENVIRONMENTS.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))]
    envs = {p.name for p in folders if (p / "verifier.py").is_file()}
    libraries = {p.name for p in folders if (p / "__init__.py").is_file() and p.name not in envs}
    return envs, libraries


def _imported_folders(path: Path, root: Path = ENVIRONMENTS) -> set[str]:
    """The ``environments/<folder>`` each import of ``path`` (a file under ``root``) names,
    absolute or relative."""
    own = path.relative_to(root).parts  # (<folder>, ..., file.py)
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level:
            # level 1 is the file's own package; each further level goes one folder up
            package = ("environments", *own[:-1])[:max(len(own) + 1 - node.level, 0)]
            modules = [".".join([*package, *([node.module] if node.module else [])])]
            if not node.module and len(package) == 1:  # from .. import <folder>
                modules = [f"environments.{a.name}" for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            modules = [node.module or ""]
            if node.module == "environments":
                modules = [f"environments.{a.name}" for a in node.names]
        else:
            continue
        found |= {m.split(".")[1] for m in modules if m.startswith("environments.")}
    return found


def _offenders() -> dict[str, list[str]]:
    envs, libraries = _folders()
    out: dict[str, list[str]] = {}
    for folder in sorted(envs | libraries):
        allowed = libraries | {folder}
        for path in sorted((ENVIRONMENTS / folder).rglob("*.py")):
            if "images" in path.relative_to(ENVIRONMENTS / folder).parts:
                continue  # repositories baked into test images: code that runs inside them, not ours
            bad = sorted(_imported_folders(path) - allowed)
            if bad:
                out[str(path.relative_to(ROOT))] = bad
    return out


def test_environments_import_only_their_own_modules_and_library_folders():
    offenders = _offenders()
    assert not offenders, ("an environment imports another environment's module (move the shared code into a "
                           f"library folder, one without verifier.py): {offenders}")


def test_the_rule_sees_every_form_of_import(tmp_path):
    # The rule itself: absolute, "from environments import x" and relative imports all name a folder.
    env = tmp_path / "environments" / "alpha"
    (env / "data").mkdir(parents=True)
    sources = {"verifier.py": "from environments.beta.verifier import X\n",
               "a.py": "from environments import beta\nimport environments.gamma.scoring\n",
               "b.py": "from ..beta import verifier\nfrom .. import gamma\nfrom . import a\n",
               "data/c.py": "from ...beta.verifier import X\nfrom ..a import y\n"}
    for name, text in sources.items():
        (env / name).write_text(text)
    root = tmp_path / "environments"
    assert _imported_folders(env / "verifier.py", root) == {"beta"}
    assert _imported_folders(env / "a.py", root) == {"beta", "gamma"}
    assert _imported_folders(env / "b.py", root) == {"beta", "gamma", "alpha"}
    assert _imported_folders(env / "data/c.py", root) == {"beta", "alpha"}
