"""Installed modules before workspace files, for a Python checker run in a workspace the model
controlled (terminal's check).

``python3 check.py`` puts the script's folder first on ``sys.path`` (``python3 -c`` / ``-m``:
the working directory), so a ``json.py`` or ``unittest/`` the model left in ``/workspace``
would be imported in place of the standard library's by the checker. Run as the check's
``sitecustomize`` (written fresh outside the workspace for every check; see ``check_prelude``),
:func:`install` puts a finder first on ``sys.meta_path`` that resolves every top-level name
from the paths the interpreter had before any script folder was added (standard library,
site-packages), leaving out any inside the workspace. A name found there is taken from there;
any other name (the model's ``solution.py``, a check file's helper) is found as usual.
Submodules resolve through their package, so they follow it.

This file runs inside the sandbox with the sandbox's Python: standard library only.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from importlib.machinery import PathFinder


def install(workspace: str) -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    top = os.path.realpath(workspace).rstrip("/") + "/"

    def trusted(entry: str) -> bool:
        if not entry:
            return False
        real = os.path.realpath(entry)
        return real != here and not (real + "/").startswith(top)

    paths = [entry for entry in sys.path if trusted(entry)]

    class InstalledFirst:
        @classmethod
        def find_spec(cls, name: str, path: object = None, target: object = None) -> object:
            if path is not None:  # a submodule: found through its (already resolved) package
                return None
            return PathFinder.find_spec(name, paths)

        @classmethod
        def invalidate_caches(cls) -> None:
            PathFinder.invalidate_caches()

    sys.meta_path.insert(0, InstalledFirst)
    # The interpreter's own sitecustomize (if any) still runs: this one took its name.
    spec = PathFinder.find_spec("sitecustomize", paths)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
