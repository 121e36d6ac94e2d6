"""Wire models of the NeMo-Gym resources-server protocol, as verigym serves it.

A request to ``/verify`` is a dataset row plus ``response`` (an OpenAI Responses-API
``Response`` object). We validate only what a verifier reads and keep every other field
untouched, because the reply must echo the request exactly (NeMo-Gym semantics:
"request dump + reward + extras").

The trainer imports this module (and ``servers.client``) and nothing else of servers/.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

# Field names NeMo-Gym and NeMo-RL read off a verify reply.
FAILURE_CLASS_KEY = "_ng_failure_class"
FAILURE_DETAIL_KEY = "_ng_failure_detail"
TASK_INDEX_KEY = "_ng_task_index"
ROLLOUT_INDEX_KEY = "_ng_rollout_index"
SESSION_COOKIE = "verigym_session"


class FailureClass(str, Enum):
    """Why a sample could not be scored. Never the same thing as a wrong answer.

    A reply carrying one of these has ``reward == 0.0`` only so that naive consumers do
    not crash; trainers must mask it (NeMo-RL: ``instance_config.mask_sample``).
    """

    TIMEOUT = "timeout"  # the verifier (or sandbox run it awaited) passed its deadline
    VERIFIER_ERROR = "verifier_error"  # the verifier raised: a bug or an unexpected row
    SANDBOX_ERROR = "sandbox_error"  # the sandbox could not be created / crashed
    # an LLM judge was down, too slow, or never gave a verdict (NeMo-Gym calls it "judge_failed"
    # and scores an unparseable reply as wrong; here both are this class, masked)
    JUDGE_ERROR = "judge_error"
    DEPENDENCY_ERROR = "dependency_error"  # a service the verifier needs is down
    OVERLOADED = "overloaded"  # client side: the server kept answering 503
    CONNECTION_ERROR = "connection_error"  # client side: server unreachable / died


class _Open(BaseModel):
    """Known fields typed, unknown fields kept (rows carry free-form metadata)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)


class OutputContent(_Open):
    type: str
    text: str | None = None


class OutputItem(_Open):
    """One item of ``response.output``. NeMo-Gym requires ``type`` on every item."""

    type: str
    role: str | None = None
    content: list[OutputContent] | str | None = None
    # function_call items
    name: str | None = None
    arguments: str | None = None
    call_id: str | None = None
    # reasoning items
    summary: list[dict[str, Any]] | None = None


class ResponseObject(_Open):
    """The OpenAI ``Response``. Only ``output`` is required (NeMo-Gym's response model requires
    it too; a response without it is a 422 naming the field, never a silent reward 0):
    everything else defaults, so hand-written test requests stay short while full SDK
    objects pass unchanged. An empty ``output`` list is a valid, empty answer."""

    id: str = ""
    created_at: float = 0.0
    model: str = ""
    object: str = "response"
    output: list[OutputItem]

    @property
    def output_text(self) -> str:
        """Concatenated ``output_text`` parts of assistant messages (the SDK property)."""
        parts: list[str] = []
        for item in self.output:
            if item.type != "message":
                continue
            if isinstance(item.content, str):
                parts.append(item.content)
            elif item.content:
                parts.extend(c.text or "" for c in item.content if c.type in ("output_text", "text"))
        return "".join(parts)

    @property
    def last_message_text(self) -> str:
        """Text of the final assistant message only (multi-turn: the final answer)."""
        for item in reversed(self.output):
            if item.type == "message":
                if isinstance(item.content, str):
                    return item.content
                return "".join(c.text or "" for c in (item.content or []) if c.type in ("output_text", "text"))
        return ""

    @property
    def function_calls(self) -> list[OutputItem]:
        return [item for item in self.output if item.type == "function_call"]


class ResponsesCreateParams(_Open):
    """The original Responses create request. Only ``input`` is read by most verifiers."""

    input: str | list[dict[str, Any]] = Field(default_factory=list)
    tools: list[dict[str, Any]] = Field(default_factory=list)


class RowModel(_Open):
    """Base of every environment's row model: declare the fields your verifier reads.

    ``responses_create_params`` is the one field NeMo-Gym requires on every row.
    """

    responses_create_params: ResponsesCreateParams


class VerifyRequest(RowModel):
    """What ``POST /verify`` receives when no environment-specific model applies."""

    response: ResponseObject


class ErrorBody(BaseModel):
    error: str
    detail: Any = None


def text_message(text: str, *, role: str = "assistant") -> dict[str, Any]:
    """A Responses-API output message holding ``text`` (tests and tools build replies with it)."""
    return {
        "id": "msg_0",
        "type": "message",
        "role": role,
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def response_from_text(text: str, *, model: str = "verigym", response_id: str = "resp_0") -> dict[str, Any]:
    """A minimal but complete Responses-API object whose only output is ``text``."""
    return {
        "id": response_id,
        "created_at": 0.0,
        "model": model,
        "object": "response",
        "output": [text_message(text)],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }
