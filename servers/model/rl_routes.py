"""vLLM's RL control routes on ``envs model serve``: pause/resume between decode steps and the
weight-transfer protocol (vLLM: vllm/entrypoints/serve/dev/rlhf/api_router.py, served by
``vllm serve`` with ``VLLM_SERVER_DEV_MODE=1``). Here they exist when the server is started with
``--weight-transfer-config`` (a judge's server has none: nobody pauses or rewrites a judge).

  POST /pause?mode=abort|wait|keep   (vLLM's default: abort; ``wait_for_inflight_requests=true``
                                      is the older spelling of mode=wait)   -> {"status": "paused"}
  POST /resume                                                               -> {"status": "resumed"}
  GET  /is_paused                                                            -> {"is_paused": bool}
  POST /init_weight_transfer_engine  {"init_info": {...}}
  POST /start_weight_update          {} (vLLM's older ``is_checkpoint_format`` is accepted)
  POST /update_weights               {"update_info": {...}}  (see servers.model.weight_transfer)
  POST /finish_weight_update         {"weight_version": "7"}  (optional: commits the label)
  POST /update_weight_version        {"new_version": "7"}
  GET  /weight_info                                                          -> {"weight_version": ...}
  GET  /get_world_size                                                       -> {"world_size": 1}

``clear_cache``: vLLM drops its KV and prefix caches after an abort/wait pause (and ignores the flag
for keep). This engine keeps no cache beyond its batch in flight (which keep retains, as vLLM does),
so there is nothing to clear: the parameter is validated and has no further effect.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable

from aiohttp import web

from servers.model.openai_api import BadRequest
from servers.model.scheduler import PAUSE_MODES, Scheduler
from servers.model.weight_transfer import WeightTransfer, WeightTransferError

Handler = Callable[[web.Request], Awaitable[dict[str, Any]]]
BodyReader = Callable[[web.Request], Awaitable[dict[str, Any]]]


def _query_flag(request: web.Request, key: str, default: bool) -> bool:
    raw = request.query.get(key)
    if raw is None:
        return default
    if raw.lower() not in ("true", "false", "1", "0"):
        raise BadRequest(f"{key} must be true or false, got {raw!r}", param=key)
    return raw.lower() in ("true", "1")


class RLRoutes:
    def __init__(self, scheduler: Scheduler, transfer: WeightTransfer, read_body: BodyReader):
        self.scheduler, self.transfer, self.read_body = scheduler, transfer, read_body

    def routes(self) -> dict[tuple[str, str], Handler]:
        return {("POST", "/pause"): self.pause, ("POST", "/resume"): self.resume, ("GET", "/is_paused"): self.is_paused,
                ("POST", "/init_weight_transfer_engine"): self.init, ("POST", "/start_weight_update"): self.start,
                ("POST", "/update_weights"): self.update, ("POST", "/finish_weight_update"): self.finish,
                ("POST", "/update_weight_version"): self.set_version, ("GET", "/weight_info"): self.weight_info,
                ("GET", "/get_world_size"): self.world_size}

    async def _optional_body(self, request: web.Request) -> dict[str, Any]:
        return await self.read_body(request) if request.can_read_body else {}

    async def pause(self, request: web.Request) -> dict[str, Any]:
        mode = request.query.get("mode")
        if _query_flag(request, "wait_for_inflight_requests", False):
            mode = mode or "wait"
        mode = mode or "abort"
        if mode not in PAUSE_MODES:
            raise BadRequest(f"mode must be one of {', '.join(PAUSE_MODES)}, got {mode!r}", param="mode")
        _query_flag(request, "clear_cache", True)  # validated; see the module doc
        await self.scheduler.pause(mode)
        return {"status": "paused"}

    async def resume(self, request: web.Request) -> dict[str, Any]:
        await self.scheduler.resume()
        return {"status": "resumed"}

    async def is_paused(self, request: web.Request) -> dict[str, Any]:
        return {"is_paused": self.scheduler.paused}

    async def init(self, request: web.Request) -> dict[str, Any]:
        body = await self.read_body(request)
        if "init_info" not in body:
            raise BadRequest("missing 'init_info' in the request body", param="init_info")
        self._call(self.transfer.init, body["init_info"])
        return {"message": "Weight transfer initialized"}

    async def start(self, request: web.Request) -> dict[str, Any]:
        body = await self._optional_body(request)
        extra = set(body) - {"is_checkpoint_format"}
        if extra:
            raise BadRequest(f"unknown keys {sorted(extra)}", param=sorted(extra)[0])
        self._call(self.transfer.start)
        return {"message": "Weight update started"}

    async def update(self, request: web.Request) -> dict[str, Any]:
        body = await self.read_body(request)
        if "update_info" not in body:
            raise BadRequest("missing 'update_info' in the request body", param="update_info")
        try:  # reading and copying run off the event loop; the copy waits for the step in flight
            await asyncio.to_thread(self.transfer.update, body["update_info"])
        except WeightTransferError as exc:
            raise BadRequest(str(exc), status=exc.status, param="update_info") from None
        return {"message": "Weights updated"}

    async def finish(self, request: web.Request) -> dict[str, Any]:
        body = await self._optional_body(request)
        self._call(self.transfer.finish, body.get("weight_version"))
        return {"message": "Weight update finished"}

    async def set_version(self, request: web.Request) -> dict[str, Any]:
        body = await self.read_body(request)
        version = body.get("new_version")
        if not isinstance(version, str):
            raise BadRequest("new_version must be a string", param="new_version")
        with self.scheduler.engine.lock:
            self.scheduler.engine.weight_version = version
        return {"success": True, "new_version": version}

    async def weight_info(self, request: web.Request) -> dict[str, Any]:
        return {"weight_version": self.scheduler.engine.weight_version}

    async def world_size(self, request: web.Request) -> dict[str, Any]:
        return {"world_size": 1}

    @staticmethod
    def _call(fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except WeightTransferError as exc:
            raise BadRequest(str(exc), status=exc.status) from None
