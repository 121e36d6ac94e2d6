"""Answer-vs-reference equivalence judged by an LLM: the one implementation behind
``equivalence_llm_judge``, ``nl2bash_equivalency`` and ``long_context``'s ``lc_judge`` mode
(NeMo-Gym runs all three as configs of its ``equivalence_llm_judge`` server).

The flow, as NeMo-Gym's ``equivalence_llm_judge`` (resources_servers/equivalence_llm_judge/app.py):

1. the question is the prompt's last user message (optionally cut by ``question_extract_regex``);
   the candidate is the response's final assistant text, cut by ``response_extract_regex`` — or by
   the row's own ``template_metadata.output_regex`` when ``use_per_record_regex`` — the last
   match, its first non-empty group; no match: the whole text. A per-record regex is skipped
   (whole text judged) when the reference is longer than ``extraction_length_threshold``;
2. first pass: the judge compares candidate to reference and ends with ``judge_equal_label`` or
   ``judge_not_equal_label``;
3. equal and ``check_twice_swap``: a second pass with the two answers swapped (position bias);
   reward 1 if it agrees, else ``reward_if_swap_fails``. Skipped for over-threshold references;
4. not equal, with a per-record regex and ``check_full_generation_on_fail``: a second pass on the
   whole text rescues an extraction miss, for ``reward_if_full_generation_succeeds``.

Differences from NeMo-Gym, on purpose: a reply with neither label is asked again, then the
sample fails with ``judge_error`` (NeMo-Gym scores it "not equal"); the label occurring **last**
counts (NeMo-Gym: first — a reasoning judge quotes the labels before deciding); an empty response
scores 0 without a judge call.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from servers.judge import Judge, ResponseGuard, check_prompt_template, judge_prompt, label_verdict

# NeMo-Gym's prompt_templates/equivalence_llm_judge.txt (STEM grader, [[A=B]] / [[A!=B]]).
DEFAULT_PROMPT = """===== System role =====
You are a meticulous STEM grader. Compare a candidate answer to a GOLD reference for a scientific question and decide strict equivalence.

Grading priorities (in order):
1) Factual equivalence to GOLD (accept algebraically/formally equivalent formulations).
2) Completeness on required parts — the candidate must include the same core parts/subclaims as the GOLD.

Rules:
- Treat GOLD as authoritative for what counts as correct.
- If GOLD is a range or set, the candidate is equivalent only if it lies within that range or is a member of that set.
- For formulas/derivations, accept mathematically identical transformations (e.g., symbol reordering, factoring, equivalent identities).
- Multi-part: all essential parts must match for “equivalent”; otherwise they are not equivalent.
- Be concise. Do NOT reveal or rewrite the GOLD.

Show your reason why they are equivalent or not equivalent first and then provide the output.

Output (at the end after double newlines):
- If equivalent: [[A=B]] they are equivalent
- If not equivalent: [[A!=B]] they are not equivalent

===== Example 1 (equivalent) =====
QUESTION:
State Avogadro’s constant (include units).

GOLD:
6.022 × 10^23 mol^-1

CANDIDATE:
6.022e23 per mole.

The candidate gives the same magnitude in scientific notation and the same “per mole” unit; no extra or missing qualifiers.

[[A=B]] they are equivalent

===== Example 2 (not equivalent) =====
QUESTION:
State the first law of thermodynamics for a closed system and identify what each symbol represents.

GOLD:
ΔU = Q − W ; ΔU is change in internal energy, Q is heat added to the system, W is work done by the system.

CANDIDATE:
ΔU = Q + W ; ΔU is change in internal energy, Q is heat added to the system, W is work done by the system.

The candidate uses the opposite sign convention for work relative to the required relationship; one core part is incorrect, so the overall statement does not match.

[[A!=B]] they are not equivalent

===== Inputs =====
QUESTION:
{question}

GOLD:
{expected_answer}

CANDIDATE:
{generated_answer}"""

PLACEHOLDERS = ("question", "expected_answer", "generated_answer")


def check_regex(value: str | None, what: str = "regex") -> str | None:
    """``value`` unchanged when it compiles; else a ValueError naming ``what`` (422 for a row, a config error)."""
    if value is not None:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"{what} is not a valid regular expression: {exc}") from None
    return value


class EquivalenceSettings(BaseModel):
    """The judge-prompt keys (NeMo-Gym's names). Mixed into a Config, or nested under a key."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    judge_prompt_template: str = Field(
        DEFAULT_PROMPT, description="User prompt of each judge call; placeholders {question} {expected_answer} "
                                    "{generated_answer} (str.format: write literal braces as {{ }}).")
    judge_system_message: str | None = Field(None, description="System message of each judge call; null = none.")
    judge_equal_label: str = Field("[[A=B]]", min_length=1, description="The judge's 'equivalent' label.")
    judge_not_equal_label: str = Field("[[A!=B]]", min_length=1, description="The judge's 'not equivalent' label.")
    question_extract_regex: str | None = Field(
        None, description="Cuts the question out of the last user message: last match, first non-empty group.")
    response_extract_regex: str | None = Field(
        None, description="Cuts the candidate answer out of the response: last match, first non-empty group; "
                          "no match = the whole text.")
    check_twice_swap: bool = Field(False, description="After 'equal', judge again with the answers swapped.")
    reward_if_swap_fails: float = Field(0.0, description="Reward when the swapped pass says 'not equal' (e.g. -1).")
    use_per_record_regex: bool = Field(True, description="A row's template_metadata.output_regex replaces "
                                                         "response_extract_regex.")
    extraction_length_threshold: int | None = Field(
        None, ge=0, description="Per-record regex only: a reference longer than this is compared with the whole "
                                "text, and no second pass runs; null = no threshold.")
    check_full_generation_on_fail: bool = Field(
        False, description="Per-record regex only: after 'not equal', judge the whole text once more.")
    reward_if_full_generation_succeeds: float = Field(
        0.0, description="Reward when that whole-text pass says 'equal' (partial credit, e.g. 0.5).")

    @field_validator("question_extract_regex", "response_extract_regex")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        return check_regex(value)

    @field_validator("judge_prompt_template")
    @classmethod
    def _placeholders(cls, value: str) -> str:
        return check_prompt_template(value, PLACEHOLDERS)

    @model_validator(mode="after")
    def _distinct_labels(self) -> "EquivalenceSettings":
        if self.judge_equal_label == self.judge_not_equal_label:
            raise ValueError("judge_equal_label and judge_not_equal_label must differ")
        return self


def extract_last(text: str, pattern: str | None) -> str:
    """NeMo-Gym's extraction: the last match of ``pattern`` (MULTILINE | DOTALL), its first
    non-empty group, else the whole match; no pattern or no match: ``text``."""
    text = text.strip()
    if not pattern or not text:
        return text
    last = None
    for last in re.finditer(pattern, text, flags=re.MULTILINE | re.DOTALL):
        pass
    if last is None:
        return text
    for group in last.groups():
        if isinstance(group, str) and group.strip():
            return group.strip()
    return last.group(0).strip()


@dataclass
class JudgePass:
    kind: str  # "first" | "swap" | "full_generation"
    equal: bool
    judge_response: str
    cached: bool

    def as_dict(self, labels: tuple[str, str]) -> dict[str, Any]:
        return {"pass": self.kind, "equal": self.equal, "verdict_label": labels[0] if self.equal else labels[1],
                "judge_response": self.judge_response[-2000:], "cached": self.cached}


@dataclass
class EquivalenceOutcome:
    reward: float
    extracted_answer: str
    passes: list[JudgePass]


async def ask_equal(judge: Judge, s: EquivalenceSettings, kind: str, *, question: str, gold: str, candidate: str,
                    response_first: bool, guard: ResponseGuard) -> JudgePass:
    """One pass. The candidate (the policy's text) goes in the CANDIDATE slot, or, for the swap pass
    (``response_first``), in the GOLD slot; either way it is the untrusted value of the prompt."""
    slots = ("expected_answer", "generated_answer") if response_first else ("generated_answer", "expected_answer")
    prompt = judge_prompt(s.judge_prompt_template, label_verdict({s.judge_equal_label: True, s.judge_not_equal_label: False}),
                          untrusted={slots[0]: candidate}, trusted={"question": question, slots[1]: gold},
                          system=s.judge_system_message, guard=guard)
    answer = await judge.ask(prompt.messages, prompt.read)
    return JudgePass(kind, bool(answer.verdict), answer.text, answer.cached)


async def judge_equivalence(judge: Judge, s: EquivalenceSettings, *, question: str, expected: str, response_text: str,
                            record_regex: str | None, guard: ResponseGuard = "guarded") -> EquivalenceOutcome:
    """The whole flow of the module docstring. ``response_text`` is the final answer (reasoning
    removed, not empty); ``record_regex`` the row's ``template_metadata.output_regex``; ``guard``
    the environment's ``response_guard`` (servers/judge/untrusted.py)."""
    record_regex = record_regex if s.use_per_record_regex else None
    # An over-threshold reference with a per-record regex: judge the whole text, no second pass.
    long_reference = bool(record_regex) and s.extraction_length_threshold is not None \
        and len(expected) > s.extraction_length_threshold
    regex = None if long_reference else (record_regex or s.response_extract_regex)
    generated = extract_last(response_text, regex)
    first = await ask_equal(judge, s, "first", question=question, gold=expected, candidate=generated,
                            response_first=False, guard=guard)
    passes = [first]
    reward = 1.0 if first.equal else 0.0
    if first.equal and s.check_twice_swap and not long_reference:
        swap = await ask_equal(judge, s, "swap", question=question, gold=expected, candidate=generated,
                               response_first=True, guard=guard)
        passes.append(swap)
        reward = 1.0 if swap.equal else s.reward_if_swap_fails
    elif not first.equal and record_regex and s.check_full_generation_on_fail and not long_reference:
        full = await ask_equal(judge, s, "full_generation", question=question, gold=expected,
                               candidate=extract_last(response_text, None), response_first=False, guard=guard)
        passes.append(full)
        reward = s.reward_if_full_generation_succeeds if full.equal else 0.0
    return EquivalenceOutcome(reward, generated, passes)


def question_of(row: Any, pattern: str | None) -> str:
    """The last user message's text, cut by ``pattern`` (NeMo-Gym's question extraction)."""
    messages = row.responses_create_params.input
    text = messages if isinstance(messages, str) else ""
    if not isinstance(messages, str):
        for message in messages:
            if message.get("role") != "user":
                continue
            content = message.get("content")
            if isinstance(content, str):
                text = content
            elif isinstance(content, list):
                parts = [b.get("text") for b in content if isinstance(b, dict) and isinstance(b.get("text"), str)]
                if parts:
                    text = "\n".join(parts)
    return extract_last(text, pattern)
