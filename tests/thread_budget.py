"""Skip a test that starts Ray when a user's RLIMIT_NPROC, which counts every thread of the uid
(and is not enforced for root), leaves too few threads for it (servers/process_budget.py): under
`prlimit --nproc=512` the test runner, its servers and a Ray cluster already use most of them."""

from __future__ import annotations

import pytest

from servers.process_budget import shortfall

RAY_RUN_THREADS = 400  # trainer/run_command.LOCAL_RUN_THREADS: a local tiny run measured 340-360


def skip_if_short_of_threads(what: str, needed: int = RAY_RUN_THREADS) -> None:
    short = shortfall(needed, what)
    if short:
        pytest.skip(short)
