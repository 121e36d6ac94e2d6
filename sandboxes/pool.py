"""A warm pool of sandboxes: created ahead of time, handed out one holder at a time, and
returned only after a ``reset()`` that leaves nothing of the previous run.

    pool = SandboxPool(open_backend("process"), SandboxSpec(), size=4)
    await pool.start()
    async with pool.acquire() as sb:
        result = await sb.exec(["python3", "main.py"])
    await pool.close()

Creation is staggered (``stagger_s`` between creations) so a cold start does not spawn a
burst of sandboxes at once (container backends especially). A sandbox whose reset fails is
destroyed and replaced, never handed out again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import AsyncIterator

from .base import Sandbox, SandboxBackend, SandboxError, SandboxSpec

log = logging.getLogger(__name__)


class SandboxPool:
    def __init__(self, backend: SandboxBackend, spec: SandboxSpec, *, size: int = 4,
                 max_size: int | None = None, stagger_s: float = 0.05) -> None:
        if size < 0 or (max_size is not None and max_size < size):
            raise ValueError("need 0 <= size <= max_size")
        self.backend, self.spec = backend, spec
        self.size = size
        self.max_size = max_size if max_size is not None else max(size, 1)
        self.stagger_s = stagger_s
        self._idle: asyncio.Queue[Sandbox] = asyncio.Queue()
        self._total = 0          # sandboxes alive or being created, idle or in use
        self._closed = False
        self._tasks: set[asyncio.Task] = set()

    @property
    def idle(self) -> int:
        return self._idle.qsize()

    @property
    def total(self) -> int:
        return self._total

    async def start(self, *, wait: bool = True) -> None:
        """Fill the pool to ``size``; with ``wait=False`` fill in the background."""
        task = asyncio.ensure_future(self._fill())
        self._track(task)
        if wait:
            await task

    async def _fill(self) -> None:
        for i in range(self.size - self._total):
            if self._closed:
                return
            if i:
                await asyncio.sleep(self.stagger_s)
            await self._add_one()

    async def _add_one(self) -> None:
        self._total += 1
        try:
            sb = await self.backend.create(self.spec)
        except BaseException:
            self._total -= 1
            raise
        if self._closed:
            await sb.destroy()
            self._total -= 1
            return
        self._idle.put_nowait(sb)

    def _track(self, task: asyncio.Task) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @contextlib.asynccontextmanager
    async def acquire(self) -> AsyncIterator[Sandbox]:
        if self._closed:
            raise SandboxError("pool is closed")
        if self._idle.empty() and self._total < self.max_size:
            await self._add_one()  # grow on demand up to max_size
        sb = await self._idle.get()
        try:
            yield sb
        finally:
            # Reset in the background so the holder is not delayed; the sandbox becomes
            # available again only once the reset has succeeded.
            self._track(asyncio.ensure_future(self._recycle(sb)))

    async def _recycle(self, sb: Sandbox) -> None:
        if self._closed:
            await self._discard(sb)
            return
        try:
            await sb.reset()
        except Exception as exc:  # a sandbox that cannot be cleaned is never reused
            log.warning("sandbox reset failed, replacing it: %s", exc)
            await self._discard(sb)
            if not self._closed and self._total < self.size:
                await self._add_one()
            return
        self._idle.put_nowait(sb)

    async def _discard(self, sb: Sandbox) -> None:
        try:
            await sb.destroy()
        finally:
            self._total -= 1

    async def close(self) -> None:
        """Destroy every idle sandbox; ones in use are destroyed when released."""
        self._closed = True
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        while not self._idle.empty():
            await self._discard(self._idle.get_nowait())
