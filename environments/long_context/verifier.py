"""long_context: needle-in-a-haystack, variable tracking and long-document QA scoring.

Rows carry one gold source:
* ``outputs`` (RULER): ``string_match_all`` (fraction of gold strings in the answer), or
  ``string_match_part`` for QA subsets (``subset`` starting with ``qa``);
* ``expected_answer`` (lc_niah / graphwalks): a JSON list of nodes vs ``Final Answer: [...]``
  on the answer's last line, set F1, optionally penalised by the reasoning's verbatim
  16-gram overlap with the prompt (copying the haystack is not reasoning);
* ``answers`` (multi-document QA): ``token_f1`` or ``exact_match`` (SQuAD normalisation).
A row may force a metric with ``metric``.

``lc_judge`` mode (NeMo-Gym's ``lc_judge`` config of ``equivalence_llm_judge``): rows with
``metric: judge``, or routed from ``lc_judge_simple_agent``, have a free-text ``expected_answer``
that an LLM judge compares with the final answer (CORRECT / INCORRECT). The judging is the
shared equivalence flow (environments/equivalence_llm_judge/equivalence.py), its settings under
the ``lc_judge`` config key; the judge is ``judges.judge``. Only these rows call a judge.
"""

from __future__ import annotations

import json
from typing import Any, Iterator, Literal

from pydantic import Field, field_validator, model_validator

from environments.equivalence_llm_judge.equivalence import (
    EquivalenceSettings, check_regex, judge_equivalence, question_of,
)
from environments.long_context import scoring
from environments.long_context.synthetic import generate_rows
from servers.answer_text import strip_think
from servers.environment import EnvConfig, Environment, Verdict
from servers.judge import JudgeConfig, JudgedConfig, JudgedEnvironment, final_answer
from servers.wire import ResponseObject, RowModel

Metric = Literal["string_match_all", "string_match_part", "exact_match", "token_f1", "set_f1", "judge"]
LC_JUDGE_AGENTS = ("lc_judge_simple_agent",)  # rows from this agent are judged (metric "judge")

# NeMo-Gym's prompt_templates/lc_judge.txt.
LC_JUDGE_PROMPT = """Assess whether the following CANDIDATE ANSWER is CORRECT or INCORRECT.
For the CANDIDATE ANSWER to be correct, it must be consistent with the OFFICIAL ANSWER.

The question, for reference only: {question}
The OFFICIAL ANSWER: {expected_answer}
CANDIDATE ANSWER TO ASSESS: {generated_answer}

Reply only with CORRECT or INCORRECT."""


class LcJudgeSettings(EquivalenceSettings):
    """The equivalence judge's keys with NeMo-Gym's configs/lc_judge.yaml values as defaults (keys
    that file leaves out: its server's class defaults)."""

    judge_prompt_template: str = Field(LC_JUDGE_PROMPT, description="NeMo-Gym's lc_judge.txt; placeholders "
                                       "{question} {expected_answer} {generated_answer}.")
    judge_equal_label: str = Field("CORRECT", min_length=1, description="The judge's 'correct' label.")
    judge_not_equal_label: str = Field("INCORRECT", min_length=1, description="The judge's 'incorrect' label.")
    question_extract_regex: str | None = Field(
        r"^QUESTION:\s*(.*)$|</text>\n\n(.*)$", description="The question: after 'QUESTION:', else after the "
                                                             "last </text> document block.")
    extraction_length_threshold: int | None = Field(120, ge=0, description="As equivalence_llm_judge.")
    check_full_generation_on_fail: bool = Field(True, description="As equivalence_llm_judge.")
    reward_if_full_generation_succeeds: float = Field(0.5, description="As equivalence_llm_judge.")


class LongContextRow(RowModel):
    outputs: list[str] | None = Field(None, description="RULER gold strings.")
    expected_answer: str | None = Field(None, description="lc_niah: JSON list of expected nodes.")
    answers: list[str] | None = Field(None, description="QA gold answers (any may match).")
    subset: str | None = Field(None, description="RULER task name (qa_* subsets use string_match_part).")
    length: int | None = Field(None, description="Prompt length in tokens (informational).")
    metric: Metric | None = Field(None, description="Force a metric for this row.")

    @field_validator("outputs", "answers")
    @classmethod
    def _non_empty_golds(cls, golds: list[str] | None) -> list[str] | None:
        # "" is contained in every answer and an empty list matches nothing: either would
        # give every response the same reward, silently. A broken row is a 422.
        if golds is not None and (not golds or any(not gold.strip() for gold in golds)):
            raise ValueError("give at least one gold answer, none of them empty")
        return golds

    @property
    def output_regex(self) -> str | None:
        meta = (self.model_extra or {}).get("template_metadata")
        regex = meta.get("output_regex") if isinstance(meta, dict) else None
        return regex if isinstance(regex, str) and regex else None

    @property
    def judged(self) -> bool:
        """An lc_judge row: ``metric: judge``, or routed from an lc_judge agent."""
        agent = (self.model_extra or {}).get("agent_ref")
        return self.metric == "judge" or (isinstance(agent, dict) and agent.get("name") in LC_JUDGE_AGENTS)

    @model_validator(mode="after")
    def _one_gold(self) -> "LongContextRow":
        if self.judged:
            if not (self.expected_answer or "").strip():
                raise ValueError("an lc_judge row (metric 'judge' / lc_judge_simple_agent) needs a non-empty "
                                 "free-text 'expected_answer'")
            check_regex(self.output_regex, "template_metadata.output_regex")
            return self
        given = [n for n in ("outputs", "expected_answer", "answers") if getattr(self, n) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one gold source: 'outputs' (RULER), 'expected_answer' (lc_niah) or "
                             f"'answers' (QA); got {given or 'none'}")
        if self.expected_answer is not None:
            _json_list_of_strings(self.expected_answer)
        if self.metric == "set_f1" and self.expected_answer is None:
            raise ValueError("metric 'set_f1' needs 'expected_answer'")
        return self


def _json_list_of_strings(value: str) -> None:
    try:
        nodes = json.loads(value)
    except ValueError:
        nodes = None
    if not isinstance(nodes, list) or not all(isinstance(node, str) for node in nodes):
        raise ValueError(f"expected_answer must be a JSON list of strings (lc_niah), got {value[:100]!r}; "
                         "free-text answers are lc_judge rows (metric 'judge')")


class LongContextConfig(JudgedConfig, EnvConfig):
    qa_metric: Literal["token_f1", "exact_match"] = Field("token_f1", description="Metric for 'answers' rows.")
    overlap_grading_rule: Literal["base", "multiply", "minus"] = Field(
        "multiply", description="lc_niah rows: base = answer F1; multiply = F1 * (1 - overlap); minus = F1 - overlap.")
    overlap_ngram: int = Field(16, ge=1, description="n of the reasoning/prompt word n-gram overlap (lc_niah).")
    judges: dict[str, JudgeConfig] = Field(
        default_factory=lambda: {"judge": JudgeConfig(base_url="http://127.0.0.1:8000/v1",
                                                      model="Qwen/Qwen3-235B-A22B-Instruct-2507-FP8")},
        description="lc_judge rows: the judge named 'judge' (other rows never call it).")
    judge_health: Literal["require", "report"] = Field(
        "report", description="report (default): /health stays 200 when the judge is down, since only lc_judge "
                              "rows need it (they fail with judge_error); require: 503 until it is reachable.")
    lc_judge: LcJudgeSettings = Field(default_factory=LcJudgeSettings,
                                          description="lc_judge rows: the equivalence judge's prompt, labels, regexes.")
    nemo_gym_parity: bool = Field(
        False, description="string_match_all/part exactly as RULER/NeMo-Gym score them: any answer containing the "
                           "gold strings pays, so listing every candidate or echoing the context pays too. Default "
                           "(false): reasoning removed, answers past the dump budget score 0, and the score is "
                           "multiplied by the share of named candidates that are golds.")
    dump_min_chars: int = Field(400, ge=1, description="A string-match answer may always be this long.")
    dump_gold_factor: float = Field(8.0, gt=0, description="...or this many times the golds' total length, if longer.")


def _input_text(row: LongContextRow) -> str:
    raw = row.responses_create_params.input
    if isinstance(raw, str):
        return raw
    parts: list[str] = []
    for item in raw:
        content = item.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts += [block.get("text") or "" for block in content if isinstance(block, dict)]
    return "\n".join(parts)


def _reasoning_text(response: ResponseObject) -> str:
    return "".join(str(s.get("text", "")) for item in response.output if item.type == "reasoning"
                   for s in (item.summary or []))


class LongContext(JudgedEnvironment, Environment):
    name = "long_context"
    domain = "long_context"
    summary = ("RULER / lc_niah / long-document QA: string-match-all/part, set F1, EM and token F1 against gold "
               "answers; lc_judge rows: an LLM judge")
    needs = ("judge",)  # lc_judge rows only; the rule-scored rows never call it
    agent_names = ("ruler_simple_agent", "long_context_simple_agent", *LC_JUDGE_AGENTS)
    judge_names = ("judge",)
    Row = LongContextRow
    Config = LongContextConfig
    config: LongContextConfig

    def choose_metric(self, row: LongContextRow) -> Metric:
        if row.judged:
            return "judge"
        if row.metric:
            return row.metric
        if row.expected_answer is not None:
            return "set_f1"
        if row.outputs is not None:
            return "string_match_part" if (row.subset or "").startswith("qa") else "string_match_all"
        return self.config.qa_metric

    async def verify(self, row: LongContextRow, response: ResponseObject, session: Any) -> Verdict:
        answer = response.output_text
        metric = self.choose_metric(row)
        if metric == "judge":
            return await self._judge(row, response)
        if metric in ("string_match_all", "string_match_part") and not self.config.nemo_gym_parity:
            return self._string_match_guarded(row, metric, answer)
        if metric != "set_f1":
            golds = row.outputs if row.outputs is not None else row.answers or [row.expected_answer or ""]
            score = scoring.METRICS[metric](answer, golds)
            return Verdict(reward=score, extras={"metric": metric, "score": score})
        nodes = scoring.final_answer_list(answer)
        answer_score = scoring.set_f1(nodes, row.expected_answer or "[]")
        overlap = scoring.ngram_overlap(_reasoning_text(response), _input_text(row), self.config.overlap_ngram)
        rule = self.config.overlap_grading_rule
        reward = answer_score if rule == "base" else answer_score * (1 - overlap) if rule == "multiply" \
            else answer_score - overlap
        return Verdict(reward=reward, extras={"metric": metric, "answer_score": answer_score,
                                              "reasoning_overlap": overlap, "extracted_answer": nodes})

    def _string_match_guarded(self, row: LongContextRow, metric: Metric, output_text: str) -> Verdict:
        """RULER's string match on the answer without its reasoning, refusing dumps: an answer past
        the budget scores 0; otherwise the match is multiplied by the share of candidates it names
        that are golds (``scoring.candidate_precision``)."""
        cfg = self.config
        golds = row.outputs if row.outputs is not None else row.answers or [row.expected_answer or ""]
        answer = strip_think(output_text)
        budget = cfg.dump_min_chars  # the golds' length matters only past the floor
        if len(answer) > budget and len(answer) > (budget := scoring.dump_budget(golds, budget, cfg.dump_gold_factor)):
            return Verdict(reward=0.0, extras={"metric": metric, "score": 0.0, "dump": f"the answer has {len(answer)} "
                                               f"characters, over the budget of {budget} (dump_min_chars, "
                                               "dump_gold_factor)"})
        score = scoring.METRICS[metric](answer, golds)
        check = scoring.candidate_precision(answer, golds, lambda: _input_text(row)) if score else None
        extras: dict[str, Any] = {"metric": metric, "score": score}
        if check is not None and check.others:
            extras.update(candidate_precision=round(check.precision, 4), other_candidates=check.others[:20])
            score *= check.precision
        return Verdict(reward=score, extras=extras)

    async def _judge(self, row: LongContextRow, response: ResponseObject) -> Verdict:
        settings = self.config.lc_judge
        expected = row.expected_answer or ""
        answer = final_answer(response)
        if not answer:  # nothing to judge (empty, or reasoning that never closed)
            return Verdict(0.0, extras={"metric": "judge", "expected_answer": expected, "extracted_answer": "",
                                        "judge_evaluations": [], "scored_by": "empty_response"})
        outcome = await judge_equivalence(self.judge("judge"), settings, question=question_of(
            row, settings.question_extract_regex), expected=expected, response_text=answer,
            record_regex=row.output_regex, guard=self.config.response_guard)
        labels = (settings.judge_equal_label, settings.judge_not_equal_label)
        return Verdict(outcome.reward, extras={
            "metric": "judge", "expected_answer": expected, "extracted_answer": outcome.extracted_answer,
            "judge_evaluations": [p.as_dict(labels) for p in outcome.passes], "scored_by": "judge"})

    @classmethod
    def generate(cls, *, tasks: list[str] | None, size: int, seed: int, **options: Any) -> Iterator[dict]:
        """Synthetic RULER-style rows (``niah_single``, ``niah_multikey``, ``variable_tracking``).

        Options: ``target_tokens`` (default 4000; 1 token ~= 4 characters), ``num_distractors``
        (niah_multikey, default 3), ``chain_length`` (variable_tracking, default 5).
        """
        return generate_rows(tasks=tasks, size=size, seed=seed, **options)
