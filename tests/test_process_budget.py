"""The per-user process limit as a user meets it (servers/process_budget.py): RLIMIT_NPROC counts
every thread of the uid and is not enforced for root. Run as root (CI) the checks are off; run
as a user they measure for real (tests/thread_budget.py skips Ray tests with this line)."""

from __future__ import annotations

import os
import threading

from servers import process_budget


def test_threads_of_this_uid_count_this_process_threads():
    before = process_budget.threads_of_uid()
    stop = threading.Event()
    workers = [threading.Thread(target=stop.wait) for _ in range(5)]
    for t in workers:
        t.start()
    try:
        assert process_budget.threads_of_uid() >= before + 5 - 2  # other processes of the uid may end meanwhile
    finally:
        stop.set()
        for t in workers:
            t.join()


def test_a_short_limit_is_one_line_naming_it_and_what_runs():
    limit = process_budget.enforced_limit()
    line = process_budget.shortfall(10**9, "a local run")
    if limit is None:
        assert os.geteuid() == 0 or limit is None
        assert line is None  # root, or no limit: the kernel counts nothing against it
    else:
        assert line.startswith(f"a local run needs about 1000000000 threads, but RLIMIT_NPROC is {limit} and counts "
                               f"every thread of uid {os.getuid()} (") and "raise it (ulimit -u" in line
    assert process_budget.shortfall(0, "nothing") is None
