"""Whether the container tests can run here: they drive root's Podman (scripts/ci_podman.sh
serves its Docker API on a root-owned socket; the test images are built with mmdebstrap into a
root cache; leftovers are checked with `podman ps`). As another user they skip, saying so — the
same suite as CI, where they run as root."""

from __future__ import annotations

import os
import shutil

import pytest


def skip_unless_root_podman(what: str) -> None:
    if shutil.which("podman") is None:
        pytest.skip("podman not installed (apt-get install podman runc)")
    if os.geteuid() != 0:
        pytest.skip(f"{what} drive root's Podman (its Docker API socket from scripts/ci_podman.sh, test images "
                    f"built as root, `podman ps`), and uid {os.geteuid()} is not root: they run as root (CI does)")
