"""The two OpenAI wire formats a judge may speak, and reading a verdict out of a reply.

Pure functions (no I/O): request bodies for Chat Completions and the Responses API, the
reply text of each, ``<think>`` stripping, and label/regex verdict finders that judged
environments share.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, TypeVar

from servers.answer_text import strip_think  # noqa: F401  (re-exported: the judge's reply is read like a response)
from servers.judge.config import JudgeConfig

T = TypeVar("T")

Message = dict[str, str]  # {"role": "system" | "user" | "assistant", "content": str}


class BadJudgeReply(ValueError):
    """The endpoint answered 200 with a body that is not a completion of the expected API."""


def request_path(cfg: JudgeConfig) -> str:
    return "/chat/completions" if cfg.api == "chat" else "/responses"


def request_body(cfg: JudgeConfig, messages: list[Message]) -> dict[str, Any]:
    if cfg.api == "chat":
        body: dict[str, Any] = {"model": cfg.model, "messages": messages}
        if cfg.max_output_tokens is not None:
            body["max_tokens"] = cfg.max_output_tokens
    else:
        body = {"model": cfg.model, "input": messages}
        if cfg.max_output_tokens is not None:
            body["max_output_tokens"] = cfg.max_output_tokens
    if cfg.temperature is not None:
        body["temperature"] = cfg.temperature
    if cfg.top_p is not None:
        body["top_p"] = cfg.top_p
    body.update(cfg.extra_body)
    return body


def reply_text(api: str, payload: Any) -> str:
    """The assistant text of a completion. Reasoning kept by the server in a separate field
    (vLLM's ``reasoning_content``, Responses ``reasoning`` items) is not part of it."""
    if not isinstance(payload, dict):
        raise BadJudgeReply(f"reply is not a JSON object: {str(payload)[:200]}")
    if api == "chat":
        try:
            content = payload["choices"][0]["message"].get("content")
        except (KeyError, IndexError, TypeError, AttributeError):
            raise BadJudgeReply(f"no choices[0].message in the reply: {str(payload)[:300]}") from None
        if isinstance(content, list):  # content parts
            content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        return content or ""
    output = payload.get("output")
    if not isinstance(output, list):
        raise BadJudgeReply(f"no 'output' list in the Responses reply: {str(payload)[:300]}")
    parts: list[str] = []
    for item in output:
        if isinstance(item, dict) and item.get("type") == "message":
            content = item.get("content")
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):
                parts.extend(c.get("text") or "" for c in content
                             if isinstance(c, dict) and c.get("type") in ("output_text", "text"))
    return "".join(parts)


def find_label(text: str, labels: Mapping[str, T]) -> T | None:
    """The value of the label that occurs **last** in ``text`` (a judge's final word; reasoning
    before it may quote the options), or None when none occurs. Case-sensitive, like the
    ``[[YES]]``-style labels of NeMo-Gym's prompts. A label inside a longer one ("harmful" in
    "unharmful") does not count there: longer labels are matched first and masked."""
    masked = text
    best_pos, best = -1, None
    for label in sorted(labels, key=len, reverse=True):
        pos = masked.rfind(label)
        if pos > best_pos:
            best_pos, best = pos, labels[label]
        masked = masked.replace(label, "\0" * len(label))
    return best if best_pos >= 0 else None


def check_prompt_template(template: str, placeholders: Iterable[str]) -> str:
    """``template`` unchanged when ``str.format`` fills it with these placeholders alone; else a
    ValueError naming them, so a bad judge prompt (config or row) fails at load, not per call."""
    names = list(placeholders)
    try:
        template.format(**{name: "" for name in names})
    except (KeyError, IndexError, ValueError) as exc:
        wanted = " ".join("{" + n + "}" for n in names)
        raise ValueError(f"the judge prompt template may use only {wanted} (write literal braces as {{{{ }}}}): "
                         f"{type(exc).__name__}: {exc}") from None
    return template


def find_regex(text: str, pattern: re.Pattern[str], values: Mapping[str, T]) -> T | None:
    """The value of the **last** match's first group (lower-cased) of ``pattern``, or None."""
    last = None
    for match in pattern.finditer(text):
        last = match
    if last is None:
        return None
    return values.get(last.group(1).lower())
