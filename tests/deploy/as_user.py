"""Run a command as an unprivileged uid that can still reach this interpreter (tests only).

    unshare --mount --propagation private python tests/deploy/as_user.py UID HOME STAGE -- CMD...

A deployment test (issue 13) runs the servers as a non-root user with a HOME of its own.
The interpreter the tests run on may live where that user cannot look (pyenv under
``/root``, mode 0700). The host is not changed for it: inside the private mount namespace
``unshare`` made, every folder on the way to the install that others cannot traverse is
covered by a tmpfs (mode 0755) that holds only the path to the install, bound back from
its real location (through mount points made in STAGE, an empty folder the caller removes).
Then ``setpriv`` drops to UID (its own group, no supplementary groups,
no capabilities) with HOME and USER set, and executes CMD.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import sysconfig


def _blocking_ancestor(path: str) -> str | None:
    """The shallowest folder above ``path`` that others may not traverse, if any."""
    parts = path.strip("/").split("/")
    for i in range(1, len(parts)):
        folder = "/" + "/".join(parts[:i])
        if not os.stat(folder).st_mode & stat.S_IXOTH:
            return folder
    return None


def _expose(paths: list[str], stage_root: str) -> None:
    covered: dict[str, list[str]] = {}
    paths = [p for p in paths if not any(p != q and p.startswith(q.rstrip("/") + "/") for q in paths)]
    for path in paths:
        top = _blocking_ancestor(path)
        if top is not None:
            covered.setdefault(top, []).append(path)
    for i, (top, inside) in enumerate(covered.items()):
        stages = []
        for j, path in enumerate(inside):
            stage = os.path.join(stage_root, f"{i}-{j}")
            os.mkdir(stage)
            subprocess.run(["mount", "--bind", path, stage], check=True)
            stages.append((stage, path))
        subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", top], check=True)
        for stage, path in stages:
            os.makedirs(path, mode=0o755, exist_ok=True)
            subprocess.run(["mount", "--bind", stage, path], check=True)


def main(argv: list[str]) -> int:
    uid, home, stage_root = int(argv[0]), argv[1], argv[2]
    cmd = argv[argv.index("--") + 1:]
    # The interpreter's folders and the working directory (the repository under test).
    installs = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sysconfig.get_config_var("LIBDIR") or "",
                                              os.getcwd()) if p}
    _expose(sorted(installs), stage_root)
    env = {**os.environ, "HOME": home, "USER": f"uid{uid}", "LOGNAME": f"uid{uid}"}
    os.execvpe("setpriv", ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                           "--inh-caps=-all", "--bounding-set=-all", "--", *cmd], env)
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
