"""workplace_assistant: the stateful multi-turn tool environment (WorkBench tasks, NeMo-Gym rows).

Each session is a private in-memory SQLite workplace (email, calendar, analytics, project
management, CRM, company directory). The 27 tools of the NeMo-Gym rows are ``POST /<name>``
routes; ``verify`` replays the row's ``ground_truth`` calls on a fresh copy of the seed and
rewards 1 when the model's final workplace state equals the reference state.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from environments.workplace_assistant.seed import fresh_copy, seed_database, largest_seed_ids
from environments.workplace_assistant.state import TOOLS, Workplace, call_validated, diff_states, run_call
from environments.workplace_assistant.toolkit import WorkplaceTool
from servers.environment import EnvConfig, Environment, ToolError, Verdict, tool
from servers.wire import FailureClass, ResponseObject, RowModel


# Reference states kept per process (~270 KB of SQLite pages each: at most ~17 MB).
EXPECTED_STATES_CACHED = 64


class GroundTruthCall(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str
    arguments: str | dict[str, Any] = "{}"  # NeMo-Gym rows carry a JSON string


class WorkplaceRow(RowModel):
    ground_truth: list[GroundTruthCall] = Field(description="The reference solution: tool calls in order.")


class WorkplaceConfig(EnvConfig):
    seed: int = Field(0, description="Seed of the generated workplace filler data (pinned records never change).")
    state_source: Literal["auto", "session", "response"] = Field(
        "auto", description="Whose actions are scored: the session's database ('session'), a replay of the "
                            "response's function_call items on a fresh copy ('response'), or the session when "
                            "there is one and the response otherwise ('auto').")
    max_diff_lines: int = Field(20, ge=1, description="Differences listed in the reply's state_diff.")


def _route(spec: WorkplaceTool) -> Any:
    """An Environment tool method for a registered workplace tool (one per route)."""

    async def method(self: "WorkplaceAssistant", session: Workplace, args: Any) -> dict[str, Any]:
        return {"output": call_validated(session, spec.name, args)}

    method.__name__ = spec.name
    method.__annotations__ = {"session": Workplace, "args": spec.args_model, "return": dict}
    method.__verigym_tool__ = (spec.name, spec.description)
    return method


class WorkplaceAssistant(Environment):
    name = "workplace_assistant"
    agent_names = ("workplace_assistant_simple_agent",)  # NeMo-Gym agent_ref.name values routed here
    domain = "agent"
    summary = ("Multi-turn workplace tools (email, calendar, analytics, projects, CRM) over a per-session SQLite "
               "database; reward 1 when the final state equals the ground-truth replay.")
    Row = WorkplaceRow
    Config = WorkplaceConfig
    stateful = True
    config: WorkplaceConfig

    # One route per tool, from the toolkit registry: the class body is the route table.
    for _spec in TOOLS.values():
        locals()[_spec.name] = _route(_spec)
    del _spec

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._expected_states: OrderedDict[tuple[Any, ...], Workplace] = OrderedDict()

    async def setup(self) -> None:
        seed_database(self.config.seed)  # build once now, so the first session is as fast as the rest

    async def seed_session(self, row: dict[str, Any]) -> Workplace:
        return Workplace(fresh_copy(self.config.seed))

    async def close_session(self, state: Workplace | None) -> None:
        if state is not None:
            state.close()

    def _expected_state(self, row: WorkplaceRow) -> Workplace | Verdict:
        """The seed workplace after the row's ground_truth calls (a failure Verdict if one fails).

        Kept in a small LRU keyed by (seed, ground_truth): GRPO verifies every prompt's row once
        per generation (8-16 times), and the replay (a fresh copy + the calls) was ~40% of a
        verify's CPU in a profile. The cached database is only ever read (diff_states runs
        SELECTs) and verify() does not await while it holds one, so eviction cannot race a reader.
        """
        key = (self.config.seed, tuple((call.name, call.arguments if isinstance(call.arguments, str)
                                        else json.dumps(call.arguments, sort_keys=True)) for call in row.ground_truth))
        cache = self._expected_states
        expected = cache.get(key)
        if expected is not None:
            cache.move_to_end(key)
            return expected
        expected = Workplace(fresh_copy(self.config.seed))
        for index, call in enumerate(row.ground_truth):
            try:
                run_call(expected, call.name, call.arguments)
            except ToolError as exc:
                expected.close()
                return Verdict.failure(FailureClass.VERIFIER_ERROR,
                                       f"ground_truth[{index}] ({call.name}) fails on the seed workplace: {exc}")
        cache[key] = expected
        if len(cache) > EXPECTED_STATES_CACHED:
            cache.popitem(last=False)[1].close()
        return expected

    async def close(self) -> None:
        while self._expected_states:
            self._expected_states.popitem()[1].close()

    async def verify(self, row: WorkplaceRow, response: ResponseObject, session: Workplace | None) -> Verdict:
        source = self.config.state_source
        if source == "auto":
            source = "session" if session is not None else "response"
        if source == "session" and session is None:
            return Verdict.failure(FailureClass.VERIFIER_ERROR, "state_source is 'session' but /verify came "
                                   "without a session: call /seed_session and send its cookie")
        expected = self._expected_state(row)
        if isinstance(expected, Verdict):
            return expected
        replayed: Workplace | None = None
        try:
            if source == "session":
                actual = session
            else:
                actual = replayed = Workplace(fresh_copy(self.config.seed))
                for item in response.function_calls:
                    try:
                        run_call(replayed, item.name or "", item.arguments or "{}")
                    except ToolError:
                        pass  # a failed call leaves the state as it was, exactly as it did for the model
            diff = diff_states(actual, expected, largest_seed_ids(self.config.seed), self.config.max_diff_lines)
        finally:
            if replayed is not None:
                replayed.close()
        return Verdict(reward=0.0 if diff else 1.0,
                       extras={"state_matches": not diff, "state_diff": diff, "state_source": source,
                               "model_tool_calls": actual.calls, "ground_truth_calls": len(row.ground_truth)})
