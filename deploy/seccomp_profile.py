"""Print a seccomp profile for the fleet container: the engine's default plus what bubblewrap needs.

The sandboxed environments (code, math_python, terminal) run model code under bubblewrap
inside the container, as the image's non-root user, in a fresh user namespace. A container
engine's default seccomp profile allows that only with CAP_SYS_ADMIN for a few calls
(Podman's: ``sethostname``; Docker's also ``mount``, ``umount2``, ``pivot_root``,
``unshare``, ``setns`` and namespace flags of ``clone``). This script takes the default
profile and allows exactly those calls unconditionally; every other rule stays as the engine
ships it. That is narrower than ``--security-opt seccomp=unconfined`` (which also works).

    python3 deploy/seccomp_profile.py > /etc/verigym/fleet-seccomp.json
    podman run --security-opt seccomp=/etc/verigym/fleet-seccomp.json \\
               --security-opt unmask=/proc/* ... verigym-fleet math code

``--input`` names another default profile (Docker's ``profiles/seccomp/default.json``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

PODMAN_DEFAULT = Path("/usr/share/containers/seccomp.json")
# What bubblewrap calls to build a sandbox in a new user namespace (mounts, pivot_root,
# the UTS name it sets, joining/creating namespaces).
BWRAP_SYSCALLS = ("clone", "clone3", "mount", "pivot_root", "sethostname", "setns", "umount2", "unshare")


def sandbox_profile(default: dict) -> dict:
    """``default`` with every rule about BWRAP_SYSCALLS replaced by one unconditional allow."""
    rules = []
    for rule in default.get("syscalls", []):
        names = [name for name in rule.get("names", []) if name not in BWRAP_SYSCALLS]
        if names:
            rules.append({**rule, "names": names})
    rules.append({"names": list(BWRAP_SYSCALLS), "action": "SCMP_ACT_ALLOW", "args": [],
                  "comment": "verigym fleet: bubblewrap sandboxes in a user namespace (deploy/seccomp_profile.py)"})
    return {**default, "syscalls": rules}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", type=Path, default=PODMAN_DEFAULT,
                        help=f"the engine's default seccomp profile (default {PODMAN_DEFAULT})")
    args = parser.parse_args(argv)
    if not args.input.is_file():
        print(f"no default seccomp profile at {args.input}; pass --input (Podman ships it in "
              "containers-common)", file=sys.stderr)
        return 2
    json.dump(sandbox_profile(json.loads(args.input.read_text())), sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
