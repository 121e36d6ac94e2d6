"""A client for a generation server that speaks vLLM's RL surface — ``envs model serve
--weight-transfer-config ...`` or ``vllm serve`` in dev mode: token-id completions with logprobs,
pause/resume, and weight pushes through the ``disk`` backend (safetensors files in a directory
both sides see; on one machine a tmpfs such as ``/dev/shm``).

Failures never hang and never pass as output: a server that is unreachable, dies mid-request or
does not answer within ``timeout_s`` raises :class:`GenerationServerError` with failure class
``connection_error``; one that keeps answering 503 raises it with ``overloaded``; a request the
server refuses (4xx) raises it with no failure class (the caller's bug, never retried).
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import aiohttp

from servers.wire import FailureClass


class GenerationServerError(RuntimeError):
    def __init__(self, message: str, *, status: int | None = None, failure_class: FailureClass | None = None):
        super().__init__(message)
        self.status, self.failure_class = status, failure_class


@dataclass
class Completion:
    """One choice of a token-id completion."""

    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    versions: list[str]  # per token; empty when the server does not say (vLLM's /v1/completions)
    finish_reason: str
    stop_reason: int | str | None
    text: str
    raw: dict[str, Any] = field(repr=False, default_factory=dict)


def versions_per_token(spans: list[dict[str, Any]] | None, count: int) -> list[str]:
    """vLLM's ``weight_versions`` spans as one label per output token ([] when absent)."""
    if not spans:
        return []
    out = [""] * count
    for span in spans:
        for i in range(int(span["start"]), min(int(span["end"]), count)):
            out[i] = str(span["version"])
    return out


class GenerationClient:
    def __init__(self, base_url: str, *, model: str | None = None, timeout_s: float = 600.0, retries: int = 2,
                 backoff_s: float = 0.2):
        self.url = base_url.rstrip("/").removesuffix("/v1")
        self.model, self.timeout_s, self.retries, self.backoff_s = model, timeout_s, retries, backoff_s
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> "GenerationClient":
        return self

    async def __aexit__(self, *_: Any) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout_s),
                                                  connector=aiohttp.TCPConnector(limit=0))
        return self._session

    async def _call(self, method: str, path: str, body: Any = None, *, retry: bool = True) -> Any:
        tries = self.retries + 1 if retry else 1
        last: Exception | None = None
        for attempt in range(tries):
            if attempt:
                await asyncio.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                async with self._http().request(method, self.url + path, json=body) as r:
                    reply = await r.json(content_type=None)
                    if r.status == 503:
                        last = GenerationServerError(f"{path}: overloaded (503)", status=503,
                                                     failure_class=FailureClass.OVERLOADED)
                        continue
                    if r.status >= 400:
                        message = reply.get("error", reply) if isinstance(reply, dict) else reply
                        if isinstance(message, dict):
                            message = message.get("message", message)
                        failure = FailureClass.DEPENDENCY_ERROR if r.status >= 500 else None
                        raise GenerationServerError(f"{path}: {r.status}: {message}", status=r.status,
                                                    failure_class=failure)
                    return reply
            except (aiohttp.ClientConnectionError, asyncio.TimeoutError, ValueError) as exc:
                kind = "no answer within the timeout" if isinstance(exc, asyncio.TimeoutError) else \
                    f"{type(exc).__name__}: {exc}"
                last = GenerationServerError(f"{self.url}{path}: {kind}", failure_class=FailureClass.CONNECTION_ERROR)
                if isinstance(exc, asyncio.TimeoutError):
                    break  # a hung server stays hung: do not wait again
        assert last is not None
        raise last

    # ---- generation ----------------------------------------------------------------------
    async def complete(self, prompt_ids: list[int], *, max_tokens: int, temperature: float = 1.0, top_p: float = 1.0,
                       n: int = 1, seed: int | None = None, stop: Iterable[str] = (), logprobs: int = 0,
                       include_stop_str_in_output: bool = True, **extra: Any) -> list[Completion]:
        """Sample ``n`` continuations of ``prompt_ids``: token ids, their logprobs and weight versions.
        Generation is not retried on a connection error (the server may have run part of it)."""
        body = {"prompt": list(prompt_ids), "max_tokens": max_tokens, "temperature": temperature, "top_p": top_p,
                "n": n, "logprobs": logprobs, "return_token_ids": True, "return_tokens_as_token_ids": True,
                "skip_special_tokens": True,
                "include_stop_str_in_output": include_stop_str_in_output, **extra}
        if self.model:
            body["model"] = self.model
        if seed is not None:
            body["seed"] = seed
        if stop:
            body["stop"] = list(stop)
        reply = await self._call("POST", "/v1/completions", body, retry=False)
        out = []
        for choice in reply["choices"]:
            ids = choice.get("token_ids") or []
            lps = (choice.get("logprobs") or {}).get("token_logprobs") or []
            out.append(Completion(prompt_ids=choice.get("prompt_token_ids") or list(prompt_ids), token_ids=ids,
                                  logprobs=[float(x) for x in lps], finish_reason=choice.get("finish_reason") or "",
                                  versions=versions_per_token(choice.get("weight_versions"), len(ids)),
                                  stop_reason=choice.get("stop_reason"), text=choice.get("text", ""), raw=choice))
        return out

    # ---- control ---------------------------------------------------------------------------
    async def pause(self, mode: str = "keep") -> None:
        await self._call("POST", f"/pause?mode={mode}")

    async def resume(self) -> None:
        await self._call("POST", "/resume")

    async def is_paused(self) -> bool:
        return bool((await self._call("GET", "/is_paused"))["is_paused"])

    async def weight_version(self) -> str:
        return str((await self._call("GET", "/weight_info"))["weight_version"])

    async def init_weight_transfer(self, init_info: dict[str, Any] | None = None) -> None:
        await self._call("POST", "/init_weight_transfer_engine", {"init_info": init_info or {}})

    async def push_weights(self, tensors: dict[str, Any], version: str, directory: str | None = None) -> None:
        """One update through the ``disk`` backend: the tensors (a model's ``named_parameters()``)
        as safetensors in a fresh directory under ``directory`` (default: the system temp dir; pass a
        tmpfs such as /dev/shm), then start -> update -> finish(version); the directory is removed."""
        from safetensors.torch import save_file

        folder = Path(tempfile.mkdtemp(prefix=f"verigym-weights-{uuid.uuid4().hex[:8]}-", dir=directory))
        try:
            await asyncio.to_thread(save_file, {n: t.detach().contiguous().cpu() for n, t in tensors.items()},
                                    str(folder / "model.safetensors"))
            await self._call("POST", "/start_weight_update", {})
            try:
                await self._call("POST", "/update_weights", {"update_info": {"path": str(folder.resolve())}},
                                 retry=False)
            except GenerationServerError:
                # close the session without a new label (the old weights still serve), so the next can start
                await self._call("POST", "/finish_weight_update", {})
                raise
            await self._call("POST", "/finish_weight_update", {"weight_version": version})
        finally:
            shutil.rmtree(folder, ignore_errors=True)
