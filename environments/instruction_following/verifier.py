"""instruction_following: IFEval / IF-RLVR / IFBench verifiable instructions, offline.

A row lists instruction ids and one kwargs object per id, either under
``verifier_metadata`` (current NeMo-Gym rows) or at the top level (legacy rows). Each id
is checked by a pure function from the registry (see ``registry.py`` and the
``checks_*.py`` families); the reward is 1 if all are followed (``binary``) or the
fraction followed (``fraction``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, PrivateAttr, model_validator

from environments.instruction_following.registry import InstructionSpec, bind_all, load_all
from environments.instruction_following.scoring import evaluate
from environments.instruction_following.text import warm_language_detector
from servers.answer_text import strip_think, visible
from servers.environment import EnvConfig, Environment, Verdict
from servers.wire import ResponseObject, RowModel

GradingMode = Literal["binary", "fraction"]
# Names other datasets use for the same two modes.
_MODE_ALIASES = {"binary": "binary", "all": "binary", "all_or_nothing": "binary", "strict": "binary",
                 "fraction": "fraction", "partial": "fraction", "average": "fraction"}


def _mode(value: Any) -> str | None:
    if value is None:
        return None
    mode = _MODE_ALIASES.get(str(value).strip().lower())
    if mode is None:
        raise ValueError(f"grading_mode must be one of {sorted(_MODE_ALIASES)}, got {value!r}")
    return mode


class InstructionFollowingConfig(EnvConfig):
    grading_mode: GradingMode = Field("binary", description="binary: 1 if every instruction is followed; fraction: share followed.")
    scoring: Literal["strict", "loose"] = Field("strict", description="Which IFEval variant drives the reward; both are reported.")
    strip_thinking: bool = Field(True, description="Drop <think>...</think> reasoning before checking; a block that "
                                                   "never closes leaves an empty response (which follows nothing).")


class InstructionFollowingRow(RowModel):
    instruction_id_list: list[str] | None = Field(None, description="Legacy: instruction ids at the top level.")
    kwargs: list[dict[str, Any] | None] | None = Field(None, description="Legacy: one kwargs object (or null) per id.")
    prompt: str | None = Field(None, description="Legacy: the prompt text.")
    grading_mode: str | None = Field(None, description="Per-row override of the config's grading_mode.")
    verifier_metadata: dict[str, Any] | None = Field(None, description="{instruction_id_list, kwargs, prompt?, grading_mode?}")

    # Plain None defaults: a default_factory makes pydantic inspect the factory's signature
    # on every validation, which cost more than the whole verification.
    _specs: list[InstructionSpec] | None = PrivateAttr(None)
    _bound: list[dict[str, Any]] | None = PrivateAttr(None)
    _mode: str | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _resolve(self) -> "InstructionFollowingRow":
        meta = self.verifier_metadata or {}
        ids = meta.get("instruction_id_list", self.instruction_id_list)
        kwargs = meta.get("kwargs", self.kwargs)
        if not ids or not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise ValueError("the row needs a non-empty list of instruction ids "
                             "(verifier_metadata.instruction_id_list or instruction_id_list)")
        if kwargs is None:
            kwargs = [None] * len(ids)
        if not isinstance(kwargs, list):
            raise ValueError("kwargs must be a list with one object (or null) per instruction id")
        self._bound = bind_all(ids, kwargs)
        registry = load_all()
        self._specs = [registry[i] for i in ids]
        self._mode = _mode(meta.get("grading_mode", self.grading_mode))
        return self


class InstructionFollowing(Environment):
    name = "instruction_following"
    agent_names = ("instruction_following_simple_agent",)  # NeMo-Gym agent_ref.name values routed here
    domain = "instruction_following"
    summary = "IFEval's 25 verifiable instructions plus IF-RLVR and IFBench ids, strict and loose, binary or fractional reward."
    Row = InstructionFollowingRow
    Config = InstructionFollowingConfig

    def warm_up(self) -> None:
        # Before envs serve forks its workers (they share it): every checker imported, the
        # language profiles loaded (about a second) rather than on the first request.
        load_all()
        warm_language_detector()

    async def verify(self, row: InstructionFollowingRow, response: ResponseObject, session: Any | None) -> Verdict:
        cfg: InstructionFollowingConfig = self.config  # type: ignore[assignment]
        text = response.last_message_text
        if cfg.strip_thinking:  # the shared reading: reasoning that never closes is no answer
            text = strip_think(text)
        # Checks read what a reader sees: zero-width and other invisible characters neither make an
        # empty response non-empty nor split or pad words.
        outcome = evaluate(visible(text), row._specs, row._bound)
        followed = outcome.strict if cfg.scoring == "strict" else outcome.loose
        mode = row._mode or cfg.grading_mode
        reward = float(all(followed)) if mode == "binary" else sum(followed) / len(followed)
        return Verdict(reward=reward, extras={
            "follow_all_instructions": all(followed),
            "follow_instruction_list": followed,
            "follow_instruction_list_strict": outcome.strict,
            "follow_instruction_list_loose": outcome.loose,
            "strict_fraction": sum(outcome.strict) / len(followed),
            "loose_fraction": sum(outcome.loose) / len(followed),
            "grading_mode_used": mode,
            "scoring_used": cfg.scoring,
        })
