"""The environment contract: the one class an environment author subclasses.

Gymnasium-small on purpose. An environment declares

* ``name``, ``domain``, ``summary``, ``needs`` — what ``envs list`` and ``/info`` show;
* ``Row`` — a pydantic model of the row fields its verifier reads (extras are kept);
* ``Config`` — a pydantic model of its config keys (defaults in its ``config.yaml``);
* ``async verify(row, response, session) -> Verdict``;

and optionally ``setup``/``close``/``health``, session state (``seed_session``,
``close_session``) and tools (methods decorated with :func:`tool`).

CPU-heavy scoring goes through ``await self.cpu(fn, *args)``: a pure, picklable function
run in the server's process pool with a deadline, so the event loop never blocks.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from servers.wire import FailureClass, ResponseObject, RowModel


class EnvConfig(BaseModel):
    """Framework knobs every environment has; subclasses add their own keys.

    Unknown keys are an error (a misspelt key silently ignored is a classic RL-infra bug).
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    max_body_mb: float = Field(16.0, description="Largest accepted request body; larger gets 413.")
    max_concurrent: int = Field(256, description="Verifications running at once in this server.")
    max_queued: int = Field(8192, description="Verifications waiting for a slot; beyond it: 503 + Retry-After.")
    verify_timeout_s: float = Field(120.0, description="Deadline of one /verify; past it the reply carries failure class 'timeout'.")
    cpu_workers: int | None = Field(None, description="Process-pool size for CPU-bound scoring; null = the CPUs this process may run on (affinity).")
    cpu_task_timeout_s: float = Field(30.0, description="Deadline of one CPU-pool call; the worker is killed and replaced past it.")
    cpu_worker_memory_mb: int = Field(4096, description="Address-space limit of each CPU-pool worker.")
    session_ttl_s: float = Field(900.0, description="Idle sessions are closed and freed after this many seconds.")
    max_sessions: int = Field(10000, description="Open sessions allowed at once; beyond it seed_session answers 503.")


class DeadlineCostConfig(BaseModel):
    """For environments whose CPU-pool scoring reads the response (math-verify, a task's own scorer):
    who pays for a deadline. Mix into the environment's config; its verify decides with
    ``CpuTimeout.worked_for(deadline_cpu_share * cpu_task_timeout_s)``."""

    deadline_cpu_share: float = Field(
        0.5, gt=0, le=1, description="A scoring call past its deadline after its worker spent at least this share "
                                     "of the deadline on the CPU is the answer's cost: reward 0 (scored_by deadline). "
                                     "Less CPU means the worker waited for a CPU (an overloaded machine): failure "
                                     "class timeout (masked), so an honest slow answer is never zeroed by load.")


@dataclass
class Verdict:
    """The outcome of one verification.

    ``components`` (optional) must sum to ``reward`` — NeMo-RL asserts it.
    ``extras`` are diagnostic fields merged into the reply (``extracted_answer``...).
    ``failure_class`` set means "could not be scored", never "scored zero".
    """

    reward: float
    components: dict[str, float] | None = None
    extras: dict[str, Any] = field(default_factory=dict)
    failure_class: FailureClass | str | None = None
    failure_detail: str | None = None

    @classmethod
    def failure(cls, failure_class: FailureClass | str, detail: str, **extras: Any) -> "Verdict":
        return cls(reward=0.0, extras=extras, failure_class=failure_class, failure_detail=detail)

    def check(self) -> None:
        if not isinstance(self.reward, (int, float)) or math.isnan(self.reward):
            raise ValueError(f"reward must be a real number, got {self.reward!r}")
        if self.components is not None:
            total = sum(self.components.values())
            if not math.isclose(total, self.reward, rel_tol=1e-6, abs_tol=1e-6):
                raise ValueError(f"reward_components sum to {total}, reward is {self.reward}")


class ToolError(Exception):
    """Raised by a tool to send an error back to the model as data (HTTP 200, ``{"error": ...}``)."""


class SessionError(Exception):
    """Raised when a session-bound call has no valid session (HTTP 400/410)."""


@dataclass
class ToolSpec:
    name: str
    description: str
    args_model: type[BaseModel]
    method_name: str

    def schema(self) -> dict[str, Any]:
        """Responses-API function tool definition (what goes in ``tools``)."""
        return {
            "type": "function",
            "name": self.name,
            "description": self.description,
            "parameters": self.args_model.model_json_schema(),
            "strict": False,
        }


def tool(description: str, *, name: str | None = None) -> Callable:
    """Mark ``async def method(self, session, args: ArgsModel) -> dict`` as tool route ``POST /<name>``.

    ``args`` is validated against the annotated pydantic model; the returned dict is the
    tool output the model sees. Raise :class:`ToolError` for errors the model should see.
    """

    def mark(fn: Callable) -> Callable:
        fn.__verigym_tool__ = (name or fn.__name__, description)
        return fn

    return mark


def endpoint(description: str, *, name: str | None = None) -> Callable:
    """Mark ``async def method(self, request: RequestModel) -> dict`` as route ``POST /<name>``: a
    stateless call beside ``/verify`` that is no model tool (genrm's ``/compare`` scores a whole
    group). The body is validated against the annotated pydantic model (422 naming the field);
    the returned dict is the JSON reply; a ``ValueError`` raised for a request that cannot be
    served is a 422 with its message. Published on ``/info`` under ``endpoints``."""

    def mark(fn: Callable) -> Callable:
        fn.__verigym_endpoint__ = (name or fn.__name__, description)
        return fn

    return mark


@dataclass
class EndpointSpec:
    name: str
    description: str
    request_model: type[BaseModel]
    method_name: str


RESERVED_ROUTES = frozenset({"verify", "seed_session", "close_session", "aggregate_metrics", "mcp", "health", "metrics",
                             "info"})


class Runtime:
    """What the server hands an environment: the CPU pool, and where its folder is.

    Kept as an interface so an environment runs the same in-process (tests, ``envs verify``)
    and inside a server.
    """

    def __init__(self, *, folder: Path, cpu_call: Callable[..., Any] | None = None):
        self.folder = folder
        self._cpu_call = cpu_call

    async def cpu(self, fn: Callable[..., Any], *args: Any, timeout: float | None = None) -> Any:
        if self._cpu_call is None:
            # No pool (in-process use without one): run inline. Callers in servers always get a pool.
            return fn(*args)
        return await self._cpu_call(fn, *args, timeout=timeout)


class Environment:
    """Base class of every environment. See the module docstring and docs/adding-an-environment.md."""

    name: ClassVar[str] = ""
    domain: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    needs: ClassVar[tuple[str, ...]] = ()  # e.g. ("sandbox",), ("judge",), ("container",)
    version: ClassVar[str] = "1"
    Row: ClassVar[type[RowModel]] = RowModel
    Config: ClassVar[type[EnvConfig]] = EnvConfig
    uses_cpu_pool: ClassVar[bool] = False  # start a process pool for self.cpu(...)
    cpu_pool_preload: ClassVar[tuple[str, ...]] = ()  # modules each worker imports at start
    stateful: ClassVar[bool] = False  # has seed_session state / tools
    # False: verify() never reads row.responses_create_params, so the HTTP server only checks
    # its shape and leaves it unbuilt (an empty UnreadCreateParams; servers/lazy_body.py).
    reads_create_params: ClassVar[bool] = True
    # NeMo-Gym agent names (a row's ``agent_ref.name``) this environment answers; published on
    # /info so data prep can route rows without importing environments.
    agent_names: ClassVar[tuple[str, ...]] = ()
    # Most model turns one rollout of this environment may take in a NeMo-Gym agent (its
    # ``simple_agent``'s ``max_steps``; None = the agent's own default, no limit). Published on
    # /info; the Gym fleet config carries it (a blend's ``agent_settings`` may override it).
    max_steps: ClassVar[int | None] = None

    _tools: ClassVar[dict[str, ToolSpec]] = {}
    _endpoints: ClassVar[dict[str, EndpointSpec]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        tools: dict[str, ToolSpec] = {}
        endpoints: dict[str, EndpointSpec] = {}
        for base in reversed(cls.__mro__[1:]):
            tools.update(getattr(base, "_tools", {}))
            endpoints.update(getattr(base, "_endpoints", {}))
        for attr, fn in list(cls.__dict__.items()):
            marked = getattr(fn, "__verigym_endpoint__", None)
            if marked:
                route_name, description = marked
                params = list(inspect.signature(fn).parameters.values())
                hints = inspect.get_annotations(fn, eval_str=True)
                if route_name in RESERVED_ROUTES or len(params) != 2 or params[1].name not in hints:
                    raise TypeError(f"{cls.__name__}.{attr}: an endpoint is 'async def {attr}(self, request: Model)' "
                                    f"with a name that is not a reserved route ({sorted(RESERVED_ROUTES)})")
                endpoints[route_name] = EndpointSpec(route_name, description, hints[params[1].name], attr)
            marker = getattr(fn, "__verigym_tool__", None)
            if not marker:
                continue
            tool_name, description = marker
            if tool_name in RESERVED_ROUTES:
                raise TypeError(f"{cls.__name__}.{attr}: '{tool_name}' is a reserved route name")
            params = list(inspect.signature(fn).parameters.values())
            hints = inspect.get_annotations(fn, eval_str=True)
            if len(params) != 3 or params[2].name not in hints:
                raise TypeError(f"{cls.__name__}.{attr}: a tool is 'async def {attr}(self, session, args: ArgsModel)'")
            tools[tool_name] = ToolSpec(tool_name, description, hints[params[2].name], attr)
        clash = set(tools) & set(endpoints)
        if clash:
            raise TypeError(f"{cls.__name__}: {sorted(clash)} is both a tool and an endpoint")
        cls._tools = tools
        cls._endpoints = endpoints

    def __init__(self, config: EnvConfig | None = None, runtime: Runtime | None = None):
        self.config = config if config is not None else self.Config()
        self.runtime = runtime or Runtime(folder=Path(inspect.getfile(type(self))).parent)

    # ---- lifecycle -------------------------------------------------------------------
    def warm_up(self) -> None:
        """CPU-only warm-up every process of the server can share: imports, tables, in-memory
        models. ``envs serve`` runs it once before forking a multi-worker server's workers, so
        they inherit the result instead of each paying for it; ``setup`` follows in each worker
        (it runs again there, so keep it idempotent). No sockets, threads or event loop here."""

    async def setup(self) -> None:
        """Open dependencies (sandboxes, databases, judge clients). Called once at start."""

    async def close(self) -> None:
        """Release what setup opened. Called once at shutdown."""

    async def health(self) -> dict[str, Any]:
        """Readiness of this environment's own dependencies: ``{"ok": bool, ...details}``."""
        return {"ok": True}

    def runtime_info(self) -> dict[str, Any]:
        """What this running server adds to ``/info`` beyond the class's description (e.g. the
        sandbox's effective limits and interpreter, found at setup)."""
        return {}

    def metrics_text(self) -> str:
        """Prometheus lines about this environment's own dependencies (judge calls...), appended to /metrics."""
        return ""

    # ---- scoring ---------------------------------------------------------------------
    async def verify(self, row: Any, response: ResponseObject, session: Any | None) -> Verdict:
        raise TypeError(f"environment {self.name!r} does not define verify()")

    async def cpu(self, fn: Callable[..., Any], *args: Any, timeout: float | None = None) -> Any:
        """Run a pure CPU-bound ``fn(*args)`` in the process pool, with a deadline."""
        return await self.runtime.cpu(fn, *args, timeout=timeout)

    # ---- sessions (stateful environments) ----------------------------------------------
    async def seed_session(self, row: dict[str, Any]) -> Any:
        """Create per-rollout state from the row (NeMo-Gym sends the whole row). Default: none."""
        return None

    async def close_session(self, state: Any) -> None:
        """Free per-rollout state (sandbox, database). Called on verify and on expiry."""

    @classmethod
    def tools(cls) -> dict[str, ToolSpec]:
        return dict(cls._tools)

    @classmethod
    def endpoints(cls) -> dict[str, EndpointSpec]:
        return dict(cls._endpoints)

    @classmethod
    def describe(cls) -> dict[str, Any]:
        return {
            "name": cls.name,
            "domain": cls.domain,
            "summary": cls.summary,
            "needs": list(cls.needs),
            "version": cls.version,
            "stateful": cls.stateful or bool(cls._tools),
            "agent_names": list(cls.agent_names),
            "max_steps": cls.max_steps,
            "row_fields": cls.Row.model_json_schema(),
            "tools": [spec.schema() for spec in cls._tools.values()],
            "endpoints": {name: spec.description for name, spec in sorted(cls._endpoints.items())},
        }
