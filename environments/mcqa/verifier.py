"""mcqa: multiple-choice letter extraction and exact match (NeMo-Gym ``mcqa``).

Pure regex in the event loop, no CPU pool: the target is thousands of verifications per
second per process, and a pool round trip would cost more than the scoring.
"""

from __future__ import annotations

import functools
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from environments.mcqa.letters import compile_output_regex, by_output_regex, extract_letter, normalize
from servers.answer_text import strip_think
from servers.environment import EnvConfig, Environment, Verdict
from servers.wire import ResponseObject, RowModel

GradingMode = Literal["strict_single_letter_boxed", "lenient_boxed", "lenient_answer_colon"]


class TemplateMetadata(BaseModel):
    model_config = ConfigDict(extra="allow")
    output_regex: str | None = None


class McqaRow(RowModel):
    options: list[dict[str, str]] = Field(default_factory=list,
                                          description='Choices as one-key dicts: [{"A": "text"}, {"B": "text"}, ...]')
    expected_answer: str = Field(..., description="The correct letter.")
    grading_mode: GradingMode | None = Field(None, description="Extraction mode; default from config.")
    template_metadata: TemplateMetadata | None = None
    uuid: str | None = None

    @field_validator("options")
    @classmethod
    def _one_letter_keys(cls, options: list[dict[str, str]]) -> list[dict[str, str]]:
        for i, entry in enumerate(options):
            if len(entry) != 1:
                raise ValueError(f"options[{i}] must be a one-key dict like {{\"A\": \"text\"}}, got {len(entry)} keys")
            key = next(iter(entry))
            if len(key) != 1 or not key.isalpha():
                raise ValueError(f"options[{i}] key {key!r} is not a single letter")
        return options

    @model_validator(mode="after")
    def _answer_is_an_option(self) -> "McqaRow":
        gold = self.expected_answer.strip().upper()
        if len(gold) != 1 or not gold.isalpha():
            raise ValueError(f"expected_answer must be a single letter, got {self.expected_answer!r}")
        letters = self.letters
        if letters and gold not in letters:
            raise ValueError(f"expected_answer {gold!r} is not one of the option letters {''.join(sorted(letters))}")
        return self

    # cached_property: the row validator and verify() both read these, and a profile of the
    # server showed them recomputed on every access (a row is never mutated after validation).
    @functools.cached_property
    def letters(self) -> frozenset[str]:
        return frozenset(next(iter(entry)).upper() for entry in self.options)

    @functools.cached_property
    def normalized_options(self) -> tuple[tuple[str, str], ...]:
        return tuple((k.upper(), normalize(v)) for entry in self.options for k, v in entry.items())


class McqaConfig(EnvConfig):
    default_grading_mode: GradingMode = Field("strict_single_letter_boxed",
                                              description="Mode for rows without grading_mode (NeMo-Gym's default).")
    use_output_regex: bool = Field(True, description="Honour template_metadata.output_regex when the row has one.")


class McqaEnvironment(Environment):
    name = "mcqa"
    agent_names = ("mcqa_simple_agent",)  # NeMo-Gym agent_ref.name values routed here
    domain = "knowledge"
    summary = "Multiple-choice letter (boxed / Answer: / row regex) checked against the expected letter"
    Row = McqaRow
    Config = McqaConfig

    async def verify(self, row: McqaRow, response: ResponseObject, session: Any | None) -> Verdict:
        cfg: McqaConfig = self.config  # type: ignore[assignment]
        text = strip_think(response.output_text)  # the shared reading: unfinished reasoning is no answer
        allowed = row.letters
        gold = row.expected_answer.strip().upper()
        extras: dict[str, Any] = {"expected_answer": gold}
        pred: str | None = None
        method = row.grading_mode or cfg.default_grading_mode
        pattern = row.template_metadata.output_regex if row.template_metadata else None
        if pattern and cfg.use_output_regex:
            compiled = compile_output_regex(pattern)
            if isinstance(compiled, str):
                # NeMo-Gym falls back to the grading mode on a bad template regex; we do too, visibly.
                extras["output_regex_error"] = compiled
            else:
                pred = by_output_regex(text, compiled, allowed)
                method = "output_regex"
        if method != "output_regex":
            # Only the lenient modes match option texts: strict rows skip normalising them.
            options = () if method == "strict_single_letter_boxed" else row.normalized_options
            pred = extract_letter(text, method, allowed, options)
        extras.update(extracted_answer=pred, grading_method=method)
        return Verdict(1.0 if pred == gold else 0.0, extras=extras)
