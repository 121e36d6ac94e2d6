"""mcqa: multiple-choice letter extraction and exact match (NeMo-Gym ``mcqa``).

Pure regex in the event loop, no CPU pool: the target is thousands of verifications per
second per process, and a pool round trip would cost more than the scoring.
"""

from __future__ import annotations

import functools
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from environments.mcqa.letters import compile_output_regex, by_output_regex, extract_letter, normalize
from servers.answer_text import strip_think
from servers.environment import EnvConfig, Environment, Verdict
from servers.wire import ResponseObject, RowModel

GradingMode = Literal["strict_single_letter_boxed", "lenient_boxed", "lenient_answer_colon"]


class TemplateMetadata(BaseModel):
    model_config = ConfigDict(extra="allow")
    output_regex: str | None = None


class McqaRow(RowModel):
    options: list[dict[str, str | None]] = Field(
        default_factory=list, description='Choices as one-key dicts: [{"A": "text"}, {"B": "text"}, ...]; as in '
                                          "NeMo-Gym, an option letter is a single-letter key with a text")
    expected_answer: str = Field(..., description="The correct letter.")
    grading_mode: GradingMode | None = Field(None, description="Extraction mode; default from config.")
    template_metadata: TemplateMetadata | None = None
    uuid: str | None = None

    @model_validator(mode="after")
    def _answer_is_an_option(self) -> "McqaRow":
        # Odd entries are read as NeMo-Gym reads them (README, "Rows"): a two-key entry gives two
        # letters; a key that is not one letter, or a null text, gives none. A row is refused only
        # when it cannot measure an answer: no letter at all, or a gold letter no option has.
        gold = self.expected_answer.strip().upper()
        if len(gold) != 1 or not gold.isalpha():
            raise ValueError(f"expected_answer must be a single letter, got {self.expected_answer!r}")
        letters = self.letters
        if self.options and not letters:
            raise ValueError("no option has a single-letter key with a text: no answer could be right")
        if letters and gold not in letters:
            raise ValueError(f"expected_answer {gold!r} is not one of the option letters {''.join(sorted(letters))}")
        return self

    # cached_property: the row validator and verify() both read these, and a profile of the
    # server showed them recomputed on every access (a row is never mutated after validation).
    @functools.cached_property
    def letters(self) -> frozenset[str]:
        return frozenset(k for k, _ in self.lettered_options)

    @functools.cached_property
    def normalized_options(self) -> tuple[tuple[str, str], ...]:
        return tuple((k, normalize(v)) for k, v in self.lettered_options)

    @functools.cached_property
    def lettered_options(self) -> tuple[tuple[str, str], ...]:
        return tuple((k.upper(), v) for entry in self.options for k, v in entry.items()
                     if len(k) == 1 and k.isalpha() and v is not None)


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
