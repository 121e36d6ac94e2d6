"""Episode -> sample -> group: the one record a rollout hands to the loss, and the group it belongs to.

A :class:`Sample` is one episode (trainer.rollout.episode) as the trainer needs it: the first
prompt's token ids, every token after it (model tokens and, in multi-turn episodes, environment
tokens with mask 0), the logprobs and weight versions they were sampled with, and the reward with
its failure class. A :class:`Group` is one task's K samples: the reward actor scores a group (one
``/compare`` for an environment that scores groups), the replay buffer holds groups, the train
step takes groups, and the advantages normalise each sample within its group
(trainer.grpo.advantages.group_ids). Nothing flattens a group and rebuilds it.

NeMo-RL groups samples by the token ids of their prompt. Here that holds by construction: a
group's K samples are K episodes of one task, whose first prompt the policy renders the same way
every time (:attr:`Group.prompt_ids`); groups of two tasks with identical prompts share one
baseline, as in NeMo-RL.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# The failure class of a sample whose first prompt leaves no room for one new token: it is never
# generated nor sent to a server, and is masked (NeMo-RL gives such a prompt loss_multiplier=0).
PROMPT_TOO_LONG = "prompt_too_long"


@dataclass
class Ticket:
    """A group's place in the training order (the replay buffer's admission)."""

    slot: int           # slot i trains at step i // num_prompts_per_step
    prompt_index: int   # index of its task in the split's task list
    seed: int           # sampling seed of this group (per slot: reproducible for any batching)


@dataclass
class Sample:
    prompt_ids: list[int]
    gen_ids: list[int]
    gen_logprobs: list[float]
    versions: list[int]
    truncated: bool
    reward: float = 0.0
    failure: str | None = None
    env: str = ""
    text: str = ""
    kind: str = ""                       # prompt kind: low_effort / reasoning_off / reasoning_budget (trainer.grpo.effort)
    length_reward: float | None = None   # effort shaping's L, when the reward was shaped
    # Multi-turn episodes: gen_ids hold every token after the first prompt — model turns (mask 1,
    # trained) and tool outputs / chat-template glue (mask 0, logprob 0.0, version -1: never
    # trained). None: every generated token is the model's (one turn).
    gen_mask: list[int] | None = None
    scored: bool = False                 # the episode already ran /verify (its session ends there)
    # A one-turn episode stopped before its verify step: the Responses-API response the reward
    # actor sends to /verify (or /compare); dropped once scored.
    response: dict[str, Any] | None = None
    verify_retries: int = 0              # failure-classed /verify answers retried inside a session episode
    tool_calls: int = 0                  # <tool_call> blocks the model wrote, counted when the episode parsed them


@dataclass
class Group:
    ticket: Ticket
    task_id: str
    start_version: int           # weight version when generation started (NeMo-RL trajectory_version)
    samples: list[Sample] = field(default_factory=list)
    gen_seconds: float = 0.0

    @property
    def prompt_ids(self) -> list[int]:
        """The prompt every sample of the group continues (one task, rendered once)."""
        return self.samples[0].prompt_ids if self.samples else []

    @property
    def min_version(self) -> int:
        # -1 marks tool-output tokens of a multi-turn sample: no policy version produced them
        return min((v for s in self.samples for v in s.versions if v >= 0), default=self.start_version)
