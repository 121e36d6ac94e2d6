"""Which Python the process backend exposes inside its sandboxes, and which host folders
that interpreter needs.

The interpreter is the server's own (``sys.executable``: its venv's site-packages
included) unless the backend is given ``python=PATH``. Wherever it lives — a venv under
``/tmp`` or ``$HOME``, conda, a pyenv build, a shared filesystem, a container's ``/opt`` —
the sandbox binds what it needs read-only **at the real (symlink-resolved) path**, so the
absolute paths baked into an install keep working inside: a venv's ``bin/python3``
symlink and ``pyvenv.cfg`` ``home``, pyenv's ``RUNPATH`` to its ``libpython``, conda's
prefix. What it needs:

* the prefixes (``sys.prefix``, ``sys.base_prefix``, ``sys.exec_prefix``), resolved;
* the folders of the shared libraries the interpreter has mapped (``/proc/self/maps``)
  that are not under the system folders the sandbox already has (``/usr``, ``/lib*``):
  a ``libpython`` or ``libffi`` that lives beside the install.

The executable is named by its resolved *folder* plus its own name, never the final
symlink's target: a venv's ``bin/python3`` must be started by that path so that Python
finds ``pyvenv.cfg`` next to it.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from typing import Iterable, Sequence

# What the sandbox already has from the host (sandboxes/bwrap.py binds these whole).
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")

# Run by the interpreter named in ``python=PATH`` to describe itself (stdlib only).
PROBE_SOURCE = """
import json, os, sys
libs = set()
with open('/proc/self/maps') as maps:
    for line in maps:
        path = line.split()[-1] if len(line.split()) >= 6 else ''
        if path.startswith('/') and '.so' in os.path.basename(path):
            libs.add(os.path.dirname(path))
print(json.dumps({'executable': sys.executable, 'version': sys.version.split()[0],
                  'prefixes': [sys.prefix, sys.base_prefix, sys.exec_prefix], 'lib_dirs': sorted(libs)}))
"""


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def _mapped_library_dirs() -> list[str]:
    dirs: set[str] = set()
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                parts = line.split()
                if len(parts) >= 6 and parts[-1].startswith("/") and ".so" in os.path.basename(parts[-1]):
                    dirs.add(os.path.dirname(parts[-1]))
    except OSError:
        pass
    return sorted(dirs)


@dataclass(frozen=True)
class PythonInstall:
    executable: str          # the path to start inside the sandbox (resolved folder + name)
    roots: tuple[str, ...]   # host folders bound read-only at the same path, outside SYSTEM_DIRS
    version: str = ""
    lib_dirs: tuple[str, ...] = field(default=(), compare=False)  # the library folders among roots

    @classmethod
    def current(cls) -> "PythonInstall":
        """The interpreter this server runs on."""
        return cls.of(sys.executable, (sys.prefix, sys.base_prefix, sys.exec_prefix), _mapped_library_dirs(),
                      sys.version.split()[0])

    @classmethod
    def from_probe(cls, output: str) -> "PythonInstall":
        """From what :data:`PROBE_SOURCE` printed."""
        facts = json.loads(output)
        return cls.of(facts["executable"], facts["prefixes"], facts.get("lib_dirs", ()), facts.get("version", ""))

    @classmethod
    def of(cls, executable: str, prefixes: Sequence[str], lib_dirs: Iterable[str] = (),
           version: str = "") -> "PythonInstall":
        exe = os.path.join(os.path.realpath(os.path.dirname(executable)), os.path.basename(executable))
        roots: list[str] = []
        for path in prefixes:
            _add_root(roots, os.path.realpath(path))
        extra = []
        for path in lib_dirs:
            real = os.path.realpath(path)
            if _add_root(roots, real):
                extra.append(real)
        return cls(executable=exe, roots=tuple(roots), version=version, lib_dirs=tuple(extra))

    @property
    def bin_dir(self) -> str:
        return os.path.dirname(self.executable)

    def describe(self) -> dict[str, object]:
        return {"executable": self.executable, "version": self.version, "bound_read_only": list(self.roots)}


def _add_root(roots: list[str], real: str) -> bool:
    """Add ``real`` unless the sandbox has it already (a system folder, or inside a root);
    drop roots inside it. The host's ``/`` is never bound."""
    if real == "/" or any(_under(real, top) for top in SYSTEM_DIRS) or any(_under(real, r) for r in roots):
        return False
    roots[:] = [r for r in roots if not _under(r, real)]
    roots.append(real)
    return True


def probe_command(python: str) -> list[str]:
    # Not -S: in a venv, site is what sets sys.prefix to the venv (pyvenv.cfg).
    return [python, "-I", "-c", PROBE_SOURCE]
