"""The warm pool: reuse only after a reset that leaves no files and no processes."""

from __future__ import annotations

import pytest

from sandboxes import SandboxSpec
from sandboxes.pool import SandboxPool
from tests.sandbox_processes import sandbox_pids

pytestmark = pytest.mark.bwrap


async def test_pool_reuses_only_clean_sandboxes(process_backend):
    pool = SandboxPool(process_backend, SandboxSpec(files={"given.txt": "spec"}), size=1, max_size=1)
    await pool.start()
    assert pool.idle == 1
    async with pool.acquire() as sb:
        first = sb
        r = await sb.exec("echo secret > leftover.txt; rm given.txt; (sleep 100 &); echo ok")
        assert r.ok
    async with pool.acquire() as sb:
        assert sb is first  # same warm sandbox, reset in between
        r = await sb.exec("ls -A")
        assert r.text().split() == ["given.txt"]
        assert not sandbox_pids(sb.uid)
    await pool.close()
    assert pool.total == 0


async def test_pool_grows_to_max_and_close_destroys(process_backend):
    pool = SandboxPool(process_backend, SandboxSpec(), size=1, max_size=2, stagger_s=0)
    await pool.start()
    async with pool.acquire() as a, pool.acquire() as b:
        assert a is not b and pool.total == 2
        assert (await a.exec("echo a")).text() == "a\n"
    await pool.close()
    assert pool.total == 0 and not a.host_workdir.exists()
