"""Job time: put verigym's stand-in server (``gym_root/resources_servers/verigym_remote``) where
the job's NeMo-Gym looks for it, with a venv that Gym uses as it is, so starting it needs no
package index.

Where each Gym looks for a server folder and its venv (read from the Gym sources NeMo-RL's
containers pin: 0.2.0rc0 in NeMo-RL v0.5.0, 0.3.0rc0 in v0.6.0, 0.4.0 in v0.7.0; 0.5.1 on its
main; 0.7.0 on the package index):

* folder: Gym >= 0.5 searches ``NEMO_GYM_EXTRA_ROOTS`` first (the job exports it); Gym 0.4
  searches the working directory, then its install root; Gym <= 0.3 only its install root
  (``PARENT_DIR``, the folder holding the ``nemo_gym`` package). Below 0.5 the folder is copied
  into the install root.
* venv: ``<uv_venv_dir>/resources_servers/verigym_remote/.venv``, or the folder's own ``.venv``
  when ``uv_venv_dir`` is the install root (Gym 0.3's default; Gym >= 0.4 defaults to its
  working directory, which the job does not know, so the config names the install root). With
  ``skip_venv_if_present`` (Gym >= 0.3) an existing venv is used as it is; the stand-in needs
  only the standard library, so ``python -m venv`` makes it here. Gym 0.2 has no such switch:
  it runs ``uv venv`` + ``uv pip install`` for every server it starts, its own included, which
  needs a package index (or a warm uv cache and ``UV_OFFLINE=1``).
"""

from __future__ import annotations

import os
import re
import shutil
import venv
from pathlib import Path
from typing import Any, Mapping

STAND_IN = Path("resources_servers") / "verigym_remote"
EXTRA_ROOTS_VAR = "NEMO_GYM_EXTRA_ROOTS"
NEMO_RL_VENV_DIR_VAR = "NEMO_GYM_VENV_DIR"  # NeMo-RL >= 0.7 passes it to Gym as uv_venv_dir
FIRST_EXTRA_ROOTS = (0, 5)
FIRST_SKIP_VENV = (0, 3)
FIRST_WORKING_DIR_VENVS = (0, 4)
_VERSION_LINE = re.compile(r"^(MAJOR|MINOR|PATCH)\s*=\s*(\d+)\s*$", re.MULTILINE)
_OC_ENV = re.compile(r"\$\{oc\.env:([A-Za-z_][A-Za-z0-9_]*)(?:,([^}]*))?\}")


class GymInstallError(RuntimeError):
    pass


def gym_version(gym_root: Path) -> tuple[int, int, int]:
    """The version of the Gym whose ``nemo_gym`` package lies in ``gym_root``
    (``nemo_gym/package_info.py``: ``MAJOR``, ``MINOR``, ``PATCH``), read without importing it."""
    info = gym_root / "nemo_gym" / "package_info.py"
    try:
        parts = dict(_VERSION_LINE.findall(info.read_text()))
    except OSError as exc:
        raise GymInstallError(f"{info}: cannot read NeMo-Gym's version ({exc.strerror}); --gym-root must be the "
                              "folder holding the nemo_gym package (a Gym checkout or site-packages)") from None
    if set(parts) != {"MAJOR", "MINOR", "PATCH"}:
        raise GymInstallError(f"{info}: no MAJOR/MINOR/PATCH lines; is this NeMo-Gym?")
    return int(parts["MAJOR"]), int(parts["MINOR"]), int(parts["PATCH"])


def _resolve_env(value: Any) -> Any:
    """``${oc.env:NAME}`` / ``${oc.env:NAME,default}`` in a config value, as OmegaConf resolves it."""
    if not isinstance(value, str):
        return value

    def sub(match: re.Match[str]) -> str:
        found = os.environ.get(match.group(1), match.group(2))
        if found is None:
            raise GymInstallError(f"{value!r}: environment variable {match.group(1)} is not set")
        return found
    return _OC_ENV.sub(sub, value)


def stand_in_folder(gym_root: Path, version: tuple[int, ...], source_root: Path) -> Path:
    """Where this Gym will find the stand-in, copying it there when Gym cannot find it otherwise."""
    source = source_root / STAND_IN
    roots = [Path(p).resolve() for p in os.environ.get(EXTRA_ROOTS_VAR, "").split(os.pathsep) if p]
    if tuple(version[:2]) >= FIRST_EXTRA_ROOTS and source_root.resolve() in roots:
        return source
    target = gym_root / STAND_IN
    try:
        if target.resolve() != source.resolve():
            shutil.rmtree(target / "__pycache__", ignore_errors=True)
            shutil.copytree(source, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", ".venv"))
    except OSError as exc:
        raise GymInstallError(f"cannot copy the verigym_remote server into {target} ({exc}): NeMo-Gym "
                              f"{'.'.join(map(str, version))} looks for servers only there; run the job in a "
                              f"writable container, or copy {source} there when building the image") from None
    return target


def install_stand_in(gym_root: Path, version: tuple[int, ...], source_root: Path,
                     nemo_gym_config: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Place the stand-in and its venv for this Gym. Returns the global settings the fleet config
    must carry for Gym to use that venv (``skip_venv_if_present``, ``uv_venv_dir``; a value the
    NeMo-RL config sets itself is left to it) and notes for the job's log."""
    folder = stand_in_folder(gym_root, version, source_root)
    notes = [f"NeMo-Gym {'.'.join(map(str, version))}: verigym_remote from {folder}"]
    if tuple(version[:2]) < FIRST_SKIP_VENV:
        notes.append("this Gym builds every server's venv with uv when it starts (it has no skip_venv_if_present): "
                     "the job needs the package index, or a warm uv cache and UV_OFFLINE=1, as for Gym's own servers")
        return {}, notes
    settings: dict[str, Any] = {}
    venv_root = _resolve_env(nemo_gym_config.get("uv_venv_dir")) or os.environ.get(NEMO_RL_VENV_DIR_VAR)
    if not venv_root:
        venv_root = str(gym_root)
        if tuple(version[:2]) >= FIRST_WORKING_DIR_VENVS:
            settings["uv_venv_dir"] = venv_root  # Gym's default (its working directory) is not known here
    root = Path(venv_root)
    path = (root / STAND_IN / ".venv") if root.resolve() != gym_root.resolve() else folder / ".venv"
    if not (path / "bin" / "python").exists():
        try:
            venv.EnvBuilder(with_pip=False, symlinks=True).create(path)
        except OSError as exc:
            raise GymInstallError(f"cannot create the verigym_remote venv {path} ({exc}); set "
                                  "env.nemo_gym.uv_venv_dir to a writable folder") from None
    skip = nemo_gym_config.get("skip_venv_if_present")
    if skip is None:
        settings["skip_venv_if_present"] = True
    elif not _resolve_env(skip) or str(_resolve_env(skip)).lower() == "false":
        notes.append("env.nemo_gym.skip_venv_if_present is false: Gym will reinstall the stand-in's venv from the "
                     "package index at start")
    notes.append(f"verigym_remote venv: {path} (standard library only)")
    return settings, notes
