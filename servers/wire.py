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
# Gym's rollout collection does not retry a failure stamped terminal when a run resumes.
FAILURE_TERMINAL_KEY = "_ng_failure_terminal"
# NeMo-Gym >= 0.7 BaseVerifyResponse: the top-level failure signal (beside the legacy fields).
MASK_SAMPLE_KEY = "mask_sample"
FAILURE_KIND_KEY = "failure_kind"
FAILURE_REASON_KEY = "failure_reason"
TASK_INDEX_KEY = "_ng_task_index"
ROLLOUT_INDEX_KEY = "_ng_rollout_index"
SESSION_COOKIE = "verigym_session"
# How a caller chooses what a row the server cannot score gets: "mask" (HTTP 200, a masked
# sample carrying the failure) or "reject" (HTTP 422 naming the problem). See docs/protocol.md.
UNSCORABLE_HEADER = "X-Verigym-Unscorable"


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
    # the row cannot be scored here (missing or contradictory fields, an instruction this
    # verifier does not implement): answered as a masked sample inside a rollout (see
    # UNSCORABLE_HEADER); the same row fails the same way every time, so never retried
    INVALID_ROW = "invalid_row"
    OVERLOADED = "overloaded"  # client side: the server kept answering 503
    CONNECTION_ERROR = "connection_error"  # client side: server unreachable / died


# The one mapping from verigym's failure classes to NeMo-Gym's failure_kind vocabulary
# (``nemo_gym.failure_kinds``, Gym >= 0.7). Where Gym has no name, a ``verigym:<kind>``
# extension: Gym accepts ``<server>:<kind>`` names without a warning. docs/protocol.md shows it.
GYM_FAILURE_KINDS: dict[FailureClass, str] = {
    FailureClass.TIMEOUT: "verigym:verify_timeout",  # Gym's timeouts name transport or agent, not a verifier deadline
    FailureClass.VERIFIER_ERROR: "verifier_error",
    FailureClass.SANDBOX_ERROR: "provider_unavailable",  # Gym's "provider": sandboxes, containers
    FailureClass.JUDGE_ERROR: "judge_failed",
    FailureClass.DEPENDENCY_ERROR: "transport_unreachable",
    FailureClass.INVALID_ROW: "verigym:invalid_row",
    FailureClass.OVERLOADED: "verigym:overloaded",
    FailureClass.CONNECTION_ERROR: "transport_unreachable",
}
# A judge that answered but gave nothing readable is Gym's judge_unparseable, not judge_failed.
JUDGE_UNPARSEABLE_KINDS = frozenset({"unparseable", "bad_response"})
# Classes a retry cannot fix: Gym's collection must not retry them on resume.
TERMINAL_FAILURES = frozenset({FailureClass.INVALID_ROW})


def gym_failure_kind(failure: "FailureClass | str", judge_error_kind: str | None = None) -> str:
    """Gym's ``failure_kind`` for a verigym failure class (an unknown class: ``verigym:<class>``)."""
    try:
        cls = FailureClass(failure)
    except ValueError:
        return f"verigym:{failure}"
    if cls is FailureClass.JUDGE_ERROR and judge_error_kind in JUDGE_UNPARSEABLE_KINDS:
        return "judge_unparseable"
    return GYM_FAILURE_KINDS[cls]


def failure_fields(failure: "FailureClass | str", detail: str | None, *, judge_error_kind: str | None = None,
                   legacy: bool = True) -> dict[str, Any]:
    """The fields a reply that could not be scored carries, beside ``reward: 0.0``.

    Gym >= 0.7 reads the top-level ``mask_sample`` / ``failure_kind`` / ``failure_reason``;
    NeMo-RL reads ``instance_config.mask_sample`` (merged in by the caller: it keeps the row's
    other instance_config keys); Gym <= 0.6 collections route ``_ng_failure_class`` rows to their
    failures file. ``legacy=False`` leaves out the ``_ng_*`` keys: a Gym >= 0.7 environment
    server refuses a result that carries keys reserved for its rollout collection."""
    value = failure.value if isinstance(failure, FailureClass) else str(failure)
    fields: dict[str, Any] = {
        MASK_SAMPLE_KEY: True,
        FAILURE_KIND_KEY: gym_failure_kind(value, judge_error_kind),
        FAILURE_REASON_KEY: (detail or value)[:2000],
    }
    if legacy:
        fields[FAILURE_CLASS_KEY] = value
        fields[FAILURE_DETAIL_KEY] = detail
        if value in {c.value for c in TERMINAL_FAILURES}:
            fields[FAILURE_TERMINAL_KEY] = True
    return fields


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


class ResourcesSeedRequest(BaseModel):
    """``POST /seed_session`` from a NeMo-Gym >= 0.7 environment server (``single_agent_turn``):
    a caller-assigned session id and the row in ``task_data``. Told apart from a legacy seed (the
    row itself, as Gym's agents send it) by ``resources_session_id`` + ``task_data``. Episode and
    task ids are Gym's identity objects, kept as they come."""

    model_config = ConfigDict(extra="forbid")

    resources_session_id: str = Field(min_length=1)
    episode_id: dict[str, Any]
    task_id: dict[str, Any]
    task_data: dict[str, Any]


class ResourcesCloseRequest(BaseModel):
    """``POST /close_session`` (Gym >= 0.7): end the session a seed opened under this id."""

    model_config = ConfigDict(extra="forbid")

    resources_session_id: str = Field(min_length=1)
    episode_id: dict[str, Any]


def is_resources_seed(body: Any) -> bool:
    """A seed in Gym >= 0.7's contract rather than a legacy row (which always carries
    ``responses_create_params`` and never ``resources_session_id``)."""
    return isinstance(body, dict) and "resources_session_id" in body and "task_data" in body \
        and "responses_create_params" not in body


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
