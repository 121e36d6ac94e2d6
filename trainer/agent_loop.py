"""The one rollout function: generate (and call tools) until done, then ``/verify``.

Every rollout the trainer makes goes through :func:`run_episode` — ``driver rollout``, the GRPO
engine's generators and its validation. Single-turn rows are its one-turn case: one model turn,
no session, verify; when the row offers tools, the calls the model writes go to ``/verify`` as
``function_call`` items (tool_call, next_action score one call against the expected one). Rows
of a stateful environment (``/info``: ``stateful`` — it serves tools or keeps per-rollout state):
``seed_session`` -> model turn -> for each function call, the tool route (session cookie
carried) -> ``function_call_output`` fed back -> ... up to ``max_steps`` model turns ->
``verify`` on the same session — NeMo-Gym's ``simple_agent``.

The model turn is ``generator.generate(prompt_ids, params)``: any object with that coroutine
and a ``policy``. Batching is the generator's business (trainer.generation.BatchedGenerator
gathers concurrent episodes; trainer.grpo.episodes.LockstepGenerator decodes every live
episode's turn in one deterministic batch), so many one-turn episodes still decode as one batch.

Token contiguity (NeMo-RL asserts it, nemo-gym.md §6): turn k+1's prompt ids are exactly
turn k's prompt ids + its generated ids + environment ids. The environment ids are the
text the chat template adds after an assistant turn (its end-of-turn marker, unless the
model already generated it, then the tool messages and the next generation prompt),
found by rendering the conversation with and without the tool messages and tokenising
only the difference. We never re-tokenise what the model generated.

``context_limit`` (prompt + everything generated) caps each turn's new tokens to the room
left; a first prompt with no room fails with :data:`PROMPT_TOO_LONG` before any server call
(NeMo-RL gives such a prompt ``loss_multiplier=0``); a later turn with no room ends the
episode as truncated.

Verification is :func:`verify_rollout`, the one verify / retry / failure path. ``verify=False``
stops an episode that has no session right before it, with its ``response`` built, so that the
engine's reward actor runs that same last step concurrently with the next decode batch (or
scores the group through ``/compare``).

Infrastructure failures never raise out of here: the episode comes back with a failure
class (``connection_error``, ``overloaded``, ``verifier_error``...) and reward 0 so the
caller can count and mask it.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from servers.client import EnvClient, EnvClientError, SessionHandle
from servers.wire import FAILURE_CLASS_KEY, FAILURE_DETAIL_KEY, FailureClass
from trainer.generation import Generation, SamplingParams
from trainer.policy import Policy
from trainer.responses import (build_response, chat_tools, function_call_output_item, offers_tools, to_chat_messages,
                               turn_items)
from trainer.rollout.task import Task

_PLACEHOLDER = "\x00VERIGYM_TURN\x00"
PROMPT_TOO_LONG = "prompt_too_long"  # failure class of a first prompt with no room left for one new token


class Generator(Protocol):
    """What an episode needs to take a model turn (trainer.generation.BatchedGenerator is one)."""

    policy: Policy

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> Generation: ...


@dataclass
class Episode:
    """What the trainer needs from one rollout.

    ``completion_*`` cover everything after the first prompt: model tokens (mask 1, their
    sampled logprob and policy version) and environment tokens (mask 0, logprob 0.0,
    version -1).
    """

    reply: dict[str, Any]
    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    completion_mask: list[int] = field(default_factory=list)
    completion_logprobs: list[float] = field(default_factory=list)
    completion_versions: list[int] = field(default_factory=list)
    turns: int = 0
    truncated: bool = False
    text: str = ""  # everything the model generated, decoded (all turns)
    response: dict[str, Any] | None = None  # the Responses-API response sent (or to send) to /verify
    verified: bool = False  # False only for verify=False episodes: the caller runs verify_rollout
    verify_retries: int = 0  # failure-classed /verify answers retried

    @property
    def reward(self) -> float:
        return float(self.reply.get("reward", 0.0))

    @property
    def failure_class(self) -> str | None:
        return self.reply.get(FAILURE_CLASS_KEY)

    def add_model_tokens(self, gen: Generation) -> None:
        self.completion_ids += gen.token_ids
        self.completion_mask += [1] * len(gen.token_ids)
        self.completion_logprobs += gen.logprobs
        self.completion_versions += gen.versions

    def add_env_tokens(self, ids: list[int]) -> None:
        self.completion_ids += ids
        self.completion_mask += [0] * len(ids)
        self.completion_logprobs += [0.0] * len(ids)
        self.completion_versions += [-1] * len(ids)


def environment_tokens(policy: Policy, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                       tool_messages: list[dict[str, Any]], gen: Generation) -> list[int]:
    """Ids that follow a model turn: end-of-turn marker (if not generated) + tool turns +
    the next generation prompt. See the module docstring."""
    assistant = {"role": "assistant", "content": _PLACEHOLDER}
    closed = policy.render(messages + [assistant], tools, add_generation_prompt=False)
    full = policy.render(messages + [assistant] + tool_messages, tools, add_generation_prompt=True)
    if not full.startswith(closed):
        raise ValueError("chat template is not prefix-stable: rendering tool turns changed earlier text")
    close = closed.rsplit(_PLACEHOLDER, 1)[1]
    if gen.token_ids and gen.finish_reason == "stop":
        generated_end = policy.decode(gen.token_ids[-1:])
        if generated_end and close.startswith(generated_end):
            close = close[len(generated_end):]
    return policy.encode(close + full[len(closed):])


def _failure(reply_base: dict[str, Any], exc: EnvClientError | Exception, cls: FailureClass) -> dict[str, Any]:
    failure = getattr(exc, "failure_class", None) or cls
    body = getattr(exc, "body", None)
    if isinstance(body, dict) and body.get(FAILURE_CLASS_KEY):
        failure = body[FAILURE_CLASS_KEY]
    return {**reply_base, "reward": 0.0, FAILURE_CLASS_KEY: getattr(failure, "value", failure),
            FAILURE_DETAIL_KEY: str(exc)[:2000]}


async def verify_rollout(client: EnvClient, env: str, row: dict[str, Any], response: dict[str, Any], *,
                         session: SessionHandle | None = None, retries: int = 0) -> tuple[dict[str, Any], int]:
    """``/verify`` with the run's retry rule; returns (reply, retries used). The reply carries a
    failure class when the server could not score it (its own class, or ``connection_error`` /
    ``verifier_error`` for an unreachable server / a 4xx-5xx answer); failure-classed replies are
    retried ``retries`` times with backoff, then returned as they are (the caller masks them)."""
    reply: dict[str, Any] = {}
    for attempt in range(retries + 1):
        try:
            reply = await client.verify(env, row, response, session=session)
        except EnvClientError as exc:
            cls = FailureClass.CONNECTION_ERROR if exc.status is None else FailureClass.VERIFIER_ERROR
            reply = _failure({**row, "response": response}, exc, cls)
        if reply.get(FAILURE_CLASS_KEY) is None or attempt == retries:
            return reply, attempt
        await asyncio.sleep(0.2 * 2 ** attempt)
    return reply, retries


async def run_episode(generator: Generator, client: EnvClient | None, task: Task, params: SamplingParams, *,
                      stateful: bool = False, max_steps: int = 8, context_limit: int | None = None,
                      verify: bool = True, verify_retries: int = 0) -> Episode:
    """One rollout of ``task`` (see the module docstring). ``client`` may be None only for an
    episode that needs no server before its verify step (no session, ``verify=False``)."""
    policy = generator.policy
    env, row = task.env, task.row
    create_params = task.create_params
    messages = to_chat_messages(create_params)
    tools = chat_tools(create_params.get("tools"))
    use_tools = offers_tools(create_params)
    prompt_ids = policy.encode(policy.render(messages, tools))
    episode = Episode(reply={}, prompt_ids=list(prompt_ids))
    output: list[dict[str, Any]] = []
    session: SessionHandle | None = None
    input_tokens = len(prompt_ids)

    def response() -> dict[str, Any]:
        return build_response(output, create_params=create_params, model=policy.name, input_tokens=input_tokens,
                              output_tokens=sum(episode.completion_mask), incomplete=episode.truncated)

    if context_limit is not None and len(prompt_ids) >= context_limit:
        episode.reply = {**row, "reward": 0.0, FAILURE_CLASS_KEY: PROMPT_TOO_LONG,
                         FAILURE_DETAIL_KEY: f"prompt of {len(prompt_ids)} tokens leaves no room in {context_limit}"}
        episode.verified = True  # nothing to verify: the sample is masked
        return episode
    try:
        if stateful:
            assert client is not None, "a session episode needs an environment client"
            session = await client.seed_session(env, row)
        for step in range(max_steps):
            turn_params = params
            if context_limit is not None:
                room = context_limit - len(prompt_ids)
                if room <= 0:  # the conversation filled the context: stop here, verify what there is
                    episode.truncated = True
                    break
                if room < params.max_new_tokens:
                    turn_params = replace(params, max_new_tokens=room)
            gen = await generator.generate(prompt_ids, turn_params)
            episode.turns += 1
            episode.text += gen.text
            episode.add_model_tokens(gen)
            items = turn_items(gen.text, prompt_ids=prompt_ids, gen_ids=gen.token_ids, logprobs=gen.logprobs,
                               versions=gen.versions, parse_tools=use_tools)
            output += items
            calls = [it for it in items if it["type"] == "function_call"]
            episode.truncated = gen.truncated
            if not calls or gen.truncated or step == max_steps - 1 or session is None:
                break
            assert client is not None
            tool_messages = []
            for call in calls:
                text = await _call_tool(client, session, call)
                output.append(function_call_output_item(call["call_id"], text))
                tool_messages.append({"role": "tool", "tool_call_id": call["call_id"], "content": text})
            visible = "".join(c["text"] for it in items if it["type"] == "message" for c in it["content"])
            env_ids = environment_tokens(policy, messages, tools, tool_messages, gen)
            messages = messages + [{"role": "assistant", "content": visible, "tool_calls": [
                {"type": "function", "function": {"name": c["name"], "arguments": json.loads(c["arguments"])
                                                  if _is_json(c["arguments"]) else c["arguments"]}} for c in calls]}] + tool_messages
            episode.add_env_tokens(env_ids)
            prompt_ids = prompt_ids + gen.token_ids + env_ids
    except EnvClientError as exc:
        cls = FailureClass.CONNECTION_ERROR if exc.status is None else FailureClass.VERIFIER_ERROR
        episode.response = response()
        episode.reply = _failure({**row, "response": episode.response}, exc, cls)
        episode.verified = True
        return episode
    episode.response = response()
    if not verify and session is None:
        episode.reply = {**row, "response": episode.response}
        return episode
    assert client is not None, "verifying an episode needs an environment client"
    episode.reply, episode.verify_retries = await verify_rollout(client, env, row, episode.response, session=session,
                                                                 retries=verify_retries)
    episode.verified = True
    return episode


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
        return True
    except json.JSONDecodeError:
        return False


async def _call_tool(client: EnvClient, session: SessionHandle, call: dict[str, Any]) -> str:
    """Tool output text as the model will see it. Bad JSON arguments never reach the server
    (NeMo-Gym's simple_agent does the same). Tool errors are data: the body goes back as is,
    whatever the status; a dead server raises EnvClientError (the episode fails)."""
    try:
        arguments = json.loads(call["arguments"])
    except json.JSONDecodeError as exc:
        return json.dumps({"error": f"Invalid tool call arguments: {exc}"})
    if not isinstance(arguments, dict):
        return json.dumps({"error": "Invalid tool call arguments: expected a JSON object"})
    _, body = await client.call_tool(session, call["name"], arguments)
    return body if isinstance(body, str) else json.dumps(body)
