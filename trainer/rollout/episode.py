"""Task -> episode: the one rollout function. Generate (and call tools) until done, then ``/verify``.

Every rollout the trainer makes goes through :func:`run_episode` — ``driver rollout``, the GRPO
engine's generators and its validation. Single-turn rows are its one-turn case: one model turn,
no session, verify; when the row offers tools, the calls the model writes go to ``/verify`` as
``function_call`` items (tool_call, next_action score one call against the expected one). Rows
of a stateful environment (``/info``: ``stateful`` — it serves tools or keeps per-rollout state):
``seed_session`` -> model turn -> for each function call, the tool route (session cookie
carried) -> ``function_call_output`` fed back -> ... up to ``max_steps`` model turns ->
``verify`` on the same session — NeMo-Gym's ``simple_agent``.

The model turn is ``turns.generate(prompt_ids, params)`` (trainer.rollout.generator.Turns).
Batching is the generator's business (the local backend decodes every live episode's turn of a
batch together), so many one-turn episodes still decode as one batch. Each turn's text is split
into visible text and tool calls once, here; the episode counts the calls.

Token contiguity (NeMo-RL asserts it, nemo-gym.md §6): turn k+1's prompt ids are exactly
turn k's prompt ids + its generated ids + environment ids. The environment ids are the
text the chat template adds after an assistant turn (its end-of-turn marker, unless the
model already generated it, then the tool messages and the next generation prompt),
found by rendering the conversation with and without the tool messages and tokenising
only the difference. We never re-tokenise what the model generated.

``context_limit`` (prompt + everything generated) caps each turn's new tokens to the room
left; a first prompt with no room fails with :data:`~trainer.rollout.sample.PROMPT_TOO_LONG`
before any server call; a later turn with no room ends the episode as truncated.

Server calls go through trainer.rollout.scoring.EnvCalls (one retry policy). ``verify=False``
stops an episode that has no session right before verify, with its ``response`` built, so that
the engine's reward actor runs that same last step concurrently with the next decode batch (or
scores the group through ``/compare``). Infrastructure failures never raise out of here: the
episode comes back with a failure class and reward 0 so the caller can count and mask it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from servers.client import EnvClientError, SessionHandle
from servers.wire import FAILURE_CLASS_KEY, FAILURE_DETAIL_KEY
from trainer.policy import Policy
from trainer.responses import (build_response, chat_tools, function_call_output_item, offers_tools, parse_tool_calls,
                               parsed_turn_items, to_chat_messages)
from trainer.rollout.generator import Generation, GenerationFailed, SamplingParams, Turns
from trainer.rollout.sample import PROMPT_TOO_LONG, Sample
from trainer.rollout.scoring import EnvCalls, failure_reply
from trainer.rollout.task import Task

_PLACEHOLDER = "\x00VERIGYM_TURN\x00"


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
    verified: bool = False  # False only for verify=False episodes: the reward actor verifies them
    verify_retries: int = 0  # failure-classed /verify answers retried
    tool_calls: int = 0  # <tool_call> blocks the model wrote (parsed once per turn)

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


def prompt_ids(policy: Policy, row: dict[str, Any]) -> list[int]:
    """The row's first prompt, rendered by the policy's chat template with the row's tools."""
    params = row.get("responses_create_params") or {}
    return policy.encode(policy.render(to_chat_messages(params), chat_tools(params.get("tools"))))


async def run_episode(turns: Turns, env: EnvCalls | None, task: Task, params: SamplingParams, *,
                      stateful: bool = False, max_steps: int = 8, context_limit: int | None = None,
                      verify: bool = True) -> Episode:
    """One rollout of ``task`` (see the module docstring). ``env`` may be None only for an
    episode that needs no server before its verify step (no session, ``verify=False``)."""
    policy = turns.policy
    row, create_params = task.row, task.create_params
    messages = to_chat_messages(create_params)
    tools = chat_tools(create_params.get("tools"))
    use_tools = offers_tools(create_params)
    prompt = policy.encode(policy.render(messages, tools))
    episode = Episode(reply={}, prompt_ids=list(prompt))
    output: list[dict[str, Any]] = []
    session: SessionHandle | None = None

    def response() -> dict[str, Any]:
        return build_response(output, create_params=create_params, model=policy.name, input_tokens=len(episode.prompt_ids),
                              output_tokens=sum(episode.completion_mask), incomplete=episode.truncated)

    if context_limit is not None and len(prompt) >= context_limit:
        episode.reply = {**row, "reward": 0.0, FAILURE_CLASS_KEY: PROMPT_TOO_LONG,
                         FAILURE_DETAIL_KEY: f"prompt of {len(prompt)} tokens leaves no room in {context_limit}"}
        episode.verified = True  # nothing to verify: the sample is masked
        return episode
    try:
        if stateful:
            assert env is not None, "a session episode needs the environment servers"
            session = await env.seed_session(task.env, row)
        for step in range(max_steps):
            turn_params = params
            if context_limit is not None:
                room = context_limit - len(prompt)
                if room <= 0:  # the conversation filled the context: stop here, verify what there is
                    episode.truncated = True
                    break
                if room < params.max_new_tokens:
                    turn_params = replace(params, max_new_tokens=room)
            gen = await turns.generate(prompt, turn_params)
            episode.turns += 1
            episode.text += gen.text
            episode.add_model_tokens(gen)
            visible, calls = parse_tool_calls(gen.text)  # the one parse of this turn
            episode.tool_calls += len(calls)
            if not use_tools:  # a row without tools: the model's <tool_call> blocks are text to the environment
                visible, calls = gen.text, []
            items = parsed_turn_items(visible, calls, prompt_ids=prompt, gen_ids=gen.token_ids, logprobs=gen.logprobs,
                                      versions=gen.versions)
            output += items
            calls = [it for it in items if it["type"] == "function_call"]
            episode.truncated = gen.truncated
            if not calls or gen.truncated or step == max_steps - 1 or session is None:
                break
            assert env is not None
            tool_messages = []
            for call in calls:
                text = await _call_tool(env, session, call)
                output.append(function_call_output_item(call["call_id"], text))
                tool_messages.append({"role": "tool", "tool_call_id": call["call_id"], "content": text})
            env_ids = environment_tokens(policy, messages, tools, tool_messages, gen)
            messages = messages + [{"role": "assistant", "content": visible if visible.strip() else "", "tool_calls": [
                {"type": "function", "function": {"name": c["name"], "arguments": json.loads(c["arguments"])
                                                  if _is_json(c["arguments"]) else c["arguments"]}} for c in calls]}] + tool_messages
            episode.add_env_tokens(env_ids)
            prompt = prompt + gen.token_ids + env_ids
    except (EnvClientError, GenerationFailed) as exc:  # an environment or the generation server failed
        episode.response = response()
        episode.reply = failure_reply({**row, "response": episode.response}, exc)
        episode.verified = True
        return episode
    episode.response = response()
    if not verify and session is None:
        episode.reply = {**row, "response": episode.response}
        return episode
    assert env is not None, "verifying an episode needs the environment servers"
    episode.reply, episode.verify_retries = await env.verify(task.env, row, episode.response, session=session)
    episode.verified = True
    return episode


def to_sample(episode: Episode, env: str, max_total_sequence_length: int) -> Sample:
    """The sample of one episode; an unverified episode keeps its ``response`` for the reward
    actor, a too-long prompt keeps its last tokens so a (masked) forward pass fits."""
    failure = episode.reply.get(FAILURE_CLASS_KEY) if episode.verified else None
    prompt = list(episode.prompt_ids)
    if failure == PROMPT_TOO_LONG:
        prompt = prompt[-(max_total_sequence_length - 1):]
    mask = list(episode.completion_mask)
    return Sample(prompt_ids=prompt, gen_ids=list(episode.completion_ids),
                  gen_logprobs=list(episode.completion_logprobs), versions=list(episode.completion_versions),
                  truncated=episode.truncated, reward=episode.reward if episode.verified and not failure else 0.0,
                  failure=str(failure) if failure else None, env=env, text=episode.text,
                  gen_mask=mask if 0 in mask else None, scored=episode.verified,
                  response=None if episode.verified else episode.response, verify_retries=episode.verify_retries,
                  tool_calls=episode.tool_calls)


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
        return True
    except json.JSONDecodeError:
        return False


async def _call_tool(env: EnvCalls, session: SessionHandle, call: dict[str, Any]) -> str:
    """Tool output text as the model will see it. Bad JSON arguments never reach the server
    (NeMo-Gym's simple_agent does the same). Tool errors are data: the body goes back as is,
    whatever the status; a dead server raises EnvClientError (the episode fails)."""
    try:
        arguments = json.loads(call["arguments"])
    except json.JSONDecodeError as exc:
        return json.dumps({"error": f"Invalid tool call arguments: {exc}"})
    if not isinstance(arguments, dict):
        return json.dumps({"error": "Invalid tool call arguments: expected a JSON object"})
    _, body = await env.call_tool(session, call["name"], arguments)
    return body if isinstance(body, str) else json.dumps(body)
