"""Typed config of an LLM judge: where it is, which API it speaks, how hard to try.

A judged environment's config holds ``judges: {name: JudgeConfig}`` (see
:class:`JudgedConfig`); each named judge is one model behind one OpenAI-compatible
endpoint. Unknown keys are errors, as everywhere in verigym.
"""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class JudgeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    base_url: str = Field(description="OpenAI-compatible API root, e.g. http://127.0.0.1:8000/v1 (vLLM, NIM, hosted).")
    model: str = Field(description="Model name sent in every request (vLLM: the served model name).")
    api: Literal["chat", "responses"] = Field(
        "chat", description="chat = POST {base_url}/chat/completions; responses = POST {base_url}/responses.")
    api_key_env: str | None = Field(
        None, description="Name of the environment variable holding the API key (sent as a Bearer token); "
                          "null = no key. The key itself never goes in a config file.")
    max_concurrency: int = Field(64, ge=1, description="Calls in flight to this endpoint at once; more wait.")
    timeout_s: float = Field(60.0, gt=0, description="Deadline of one HTTP call; past it the call is a 'timeout' error.")
    max_retries: int = Field(3, ge=0, description="Retries of a call after a connection error, timeout, 429 or 5xx.")
    backoff_s: float = Field(0.5, ge=0, description="First retry delay; doubles per retry (jittered), up to backoff_max_s.")
    backoff_max_s: float = Field(8.0, ge=0, description="Largest retry delay (a 429's Retry-After is honoured up to it).")
    parse_retries: int = Field(
        1, ge=0, description="Times the judge is asked again when its reply holds no verdict; then the sample "
                             "gets failure class judge_error (never a default score).")
    temperature: float | None = Field(0.0, description="Sampling temperature of the judge; null = the server's default.")
    top_p: float | None = Field(None, description="Nucleus sampling of the judge; null = the server's default.")
    max_output_tokens: int | None = Field(
        2048, ge=1, description="Reply length cap (max_tokens / max_output_tokens); null = the server's default.")
    extra_body: dict[str, Any] = Field(
        default_factory=dict, description="Merged into every request body (e.g. chat_template_kwargs for vLLM).")
    cache_size: int = Field(
        65536, ge=0, description="Identical judge requests answered from an LRU cache of this many replies, or by "
                                 "joining the identical call in flight; 0 = both off.")
    breaker_failures: int = Field(
        5, ge=1, description="Consecutive failed calls (connection error, timeout, 5xx) that open the circuit breaker.")
    breaker_reset_s: float = Field(
        5.0, gt=0, description="While open, calls fail fast for this long; then one probe call decides.")
    strip_think: bool = Field(True, description="Remove <think>...</think> reasoning before reading the verdict.")

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {value!r}")
        return value.rstrip("/")

    def api_key(self) -> str | None:
        """The key from ``api_key_env``; a named variable that is unset is an error (a silent
        unauthenticated call would only fail later, once per sample)."""
        if self.api_key_env is None:
            return None
        key = os.environ.get(self.api_key_env)
        if not key:
            raise ValueError(f"judge api_key_env names {self.api_key_env!r}, which is not set in the environment")
        return key


class JudgedConfig(BaseModel):
    """Config keys of every judged environment (mix into its EnvConfig)::

        class MyConfig(JudgedConfig, EnvConfig): ...
    """

    judges: dict[str, JudgeConfig] = Field(
        default_factory=dict, description="Named judges: {name: {base_url, model, api, ...}}; the environment "
                                          "says which names it needs.")
    response_guard: Literal["guarded", "verbatim"] = Field(
        "guarded", description="guarded: the response is fenced with a secret tag, verdict labels / score blocks / "
                               "control tokens / prompt headings inside it are removed, and the verdict is read "
                               "outside any echo of it (docs/judges.md); verbatim: pasted as NeMo-Gym pastes it "
                               "(exact parity with a NeMo-Gym run, but response text can steer the verdict).")
    judge_health: Literal["require", "report"] = Field(
        "require", description="require: /health answers 503 while a judge endpoint is unreachable, does not serve "
                               "the judge's model, or has its circuit open (the server cannot score); report: "
                               "/health shows the judge's state but stays 200.")
