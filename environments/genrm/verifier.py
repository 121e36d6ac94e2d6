"""genrm: responses to one prompt compared pairwise by a generative reward model (NeMo-Gym
``genrm_compare``, same rows and the same ``/compare`` API).

Two ways in:

* ``POST /compare`` — ``{conversation_history, response_objs: [N responses], principle?}`` ->
  ``{rewards, comparison_results, metrics}`` (NeMo-Gym's reply) plus ``failures`` (a failure class
  or null per response), ``base_scores`` and ``adjustments``. One call scores a whole group.
* cohort ``POST /verify`` — each rollout arrives alone; rollouts of one prompt wait for each other
  (``num_rollouts_per_prompt``) and are scored together (environments/genrm/cohorts.py).

The GenRM is asked through the shared judge client (judge ``genrm``): the conversation, then the
two answers as messages with roles ``response_1`` and ``response_2`` (and ``principle`` before them
when ``use_principle``), which a GenRM's chat template knows; its JSON ``score_1``/``score_2``/
``ranking`` is read by environments/genrm/aggregation.py, which also turns the comparisons into
rewards. A comparison the GenRM cannot answer (down, too slow, no JSON after the judge's
``parse_retries`` re-asks) makes both of its responses failure class ``judge_error`` (masked), never
NeMo-Gym's default score; the other responses are scored from their own comparisons.
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, model_validator

from environments.genrm.aggregation import (GENRM_SCORES, Comparison, Shaping, aggregate, comparison_pairs,
                                            response_texts, shown_answer)
from environments.genrm.cohorts import CohortBuffer, CohortFailure, describe_counts
from servers.environment import EnvConfig, Environment, Verdict, endpoint
from servers.judge import JudgedConfig, JudgedEnvironment, JudgeError, guard_message
from servers.wire import FailureClass, ResponseObject, RowModel

# NeMo-Gym's default principle text (genrm_compare/app.py), sent when use_principle and the row has none.
DEFAULT_PRINCIPLE = (
    "Please act as an impartial judge and evaluate the quality of the responses provided by two AI assistants "
    "to the user prompt. Begin your evaluation by generating your own answer to the prompt. You must provide "
    "your answer before judging any answers. When evaluating the assistants' answers, compare both assistants' "
    "answers with your answer. You must identify and correct any mistakes or inaccurate information. Then "
    "consider if the assistant's answers are helpful, relevant, and concise. Helpful means the answer correctly "
    "responds to the prompt or follows the instructions. Note when user prompt has any ambiguity or more than "
    "one interpretation, it is more helpful and appropriate to ask for clarifications or more information from "
    "the user than providing an answer based on assumptions. Relevant means all parts of the response closely "
    "connect or are appropriate to what is being asked. Concise means the response is clear and not verbose or "
    "excessive. Then consider the creativity and novelty of the assistant's answers when needed. Finally, "
    "identify any missing important information in the assistants' answers that would be beneficial to include "
    "when responding to the user prompt.")

# Shaping defaults per profile. rlhf: the Nemotron 3 Super RLHF stage (conciseness bonus 0.5,
# length term 0.3 reasoning / 0.35 answer); rlvr: GenRM rows inside an RLVR blend (length term
# 0.1 / 0.1); plain: NeMo-Gym's genrm_compare.yaml (no shaping).
PROFILES: dict[str, dict[str, float]] = {
    "rlhf": {"reasoning_bonus": 0.5, "answer_bonus": 0.5, "group_reasoning_length_penalty_coeff": 0.3,
             "group_answer_length_penalty_coeff": 0.35},
    "rlvr": {"reasoning_bonus": 0.5, "answer_bonus": 0.5, "group_reasoning_length_penalty_coeff": 0.1,
             "group_answer_length_penalty_coeff": 0.1},
    "plain": {"reasoning_bonus": 0.0, "answer_bonus": 0.0, "group_reasoning_length_penalty_coeff": 0.0,
              "group_answer_length_penalty_coeff": 0.0},
}


class GenRMRow(RowModel):
    principle: str | None = Field(None, description="Principle the GenRM judges by (sent when use_principle).")
    prompt_id: str | None = Field(None, description="Stable prompt id: part of the cohort key when present.")
    task_index: int | None = Field(None, alias="_ng_task_index",
                                   description="NeMo-Gym's task index: rollouts of one task form one cohort.")
    rollout_index: int | None = Field(None, alias="_ng_rollout_index",
                                      description="Position in the cohort (arrival order when absent).")
    num_rollouts_per_prompt: int | None = Field(None, ge=2, description="Cohort size of this row; null = config.")


class CompareRequest(BaseModel):
    """NeMo-Gym's ``GenRMCompareRequest``."""

    model_config = ConfigDict(extra="forbid")

    conversation_history: list[dict[str, Any]] = Field(description="The messages before the responses.")
    response_objs: list[ResponseObject] = Field(min_length=2, description="The N candidate responses.")
    principle: str | None = None


class GenRMConfig(JudgedConfig, EnvConfig):
    profile: Literal["rlhf", "rlvr", "plain"] = Field(
        "rlhf", description="Defaults of the shaping keys left null: rlhf (beta 0.5, lambda 0.3/0.35), rlvr "
                            "(beta 0.5, lambda 0.1/0.1), plain (NeMo-Gym's: no shaping).")
    comparison_strategy: Literal["circular", "all_pairs"] = Field(
        "circular", description="circular: N comparisons (i, i+1 mod N); all_pairs: N(N-1)/2.")
    num_judges_per_comparison: int = Field(1, ge=1, description="GenRM votes per pair; each is one more comparison.")
    use_principle: bool = Field(False, description="Send a 'principle' message (the row's, else default_principle).")
    default_principle: str = Field(DEFAULT_PRINCIPLE, description="Principle when the row has none.")
    aggregator_method: Literal["simple_tiebreaker"] = Field("simple_tiebreaker", description="NeMo-Gym's only one.")
    reasoning_bonus: float = Field(0.0, ge=0, description="beta_think: shortest non-empty reasoning, if a top scorer.")
    answer_bonus: float = Field(0.0, ge=0, description="beta_answer: shortest non-empty answer, if a top scorer.")
    top_percentile: float = Field(0.2, gt=0, le=1, description="Share of top scorers eligible for the bonuses.")
    group_reasoning_length_penalty_coeff: float = Field(0.0, ge=0, description="lambda_think of the length term.")
    group_answer_length_penalty_coeff: float = Field(0.0, ge=0, description="lambda_answer of the length term.")
    group_style_penalty_coeff: float = Field(0.0, ge=0, description="Zero-centred markdown-style-density penalty.")
    num_rollouts_per_prompt: int = Field(16, ge=2, description="Cohort size of /verify (a row may set its own).")
    cohort_timeout_s: float = Field(1800.0, gt=0, description="A cohort still incomplete this long after its first "
                                                              "rollout: its waiting requests get cohort_timeout.")
    max_open_cohorts: int = Field(4096, ge=1, description="Cohorts waiting at once; one more: cohort_overflow.")

    @model_validator(mode="before")
    @classmethod
    def _profile_defaults(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = dict(data)
            for key, value in PROFILES.get(data.get("profile", "rlhf"), {}).items():
                if data.get(key) is None:
                    data[key] = value
        return data

    @model_validator(mode="after")
    def _check(self) -> "GenRMConfig":
        genrm = self.judges.get("genrm")
        if genrm is not None and genrm.api != "chat":
            raise ValueError("judges.genrm.api must be 'chat': the GenRM reads the roles response_1/response_2 "
                             "from Chat Completions messages")
        if self.num_judges_per_comparison > 1 and genrm is not None and genrm.cache_size != 0:
            raise ValueError("num_judges_per_comparison > 1 needs judges.genrm.cache_size: 0 (with the cache on, "
                             "every vote would be the first vote's cached reply)")
        if self.verify_timeout_s <= self.cohort_timeout_s:
            raise ValueError(f"verify_timeout_s ({self.verify_timeout_s:g}) must exceed cohort_timeout_s "
                             f"({self.cohort_timeout_s:g}): a waiting rollout must get cohort_timeout, not timeout")
        return self

    def shaping(self) -> Shaping:
        return Shaping(self.reasoning_bonus, self.answer_bonus, self.top_percentile,
                       self.group_reasoning_length_penalty_coeff, self.group_answer_length_penalty_coeff,
                       self.group_style_penalty_coeff)


@dataclass
class GroupScore:
    """One group scored: per response a reward or a failure, plus the pairwise results."""

    rewards: list[float]  # 0.0 where failed
    failures: list[str | None]  # failure detail per response (None = scored)
    base_scores: list[float | None]
    adjustments: list[float | None]
    comparisons: list[dict[str, Any]]
    metrics: dict[str, float] = field(default_factory=dict)


def history_messages(conversation: Any) -> list[dict[str, str]]:
    """Conversation items -> ``{role, content}`` chat messages (text parts joined)."""
    if isinstance(conversation, str):
        return [{"role": "user", "content": conversation}]
    out = []
    for item in conversation or []:
        if not isinstance(item, dict) or item.get("type", "message") != "message":
            continue  # tool calls and reasoning of earlier turns are not shown to the GenRM
        content = item.get("content", "")
        if isinstance(content, list):
            content = "".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
        out.append({"role": str(item.get("role", "user")), "content": str(content or "")})
    return out


class GenRMEnvironment(JudgedEnvironment, Environment):
    name = "genrm"
    domain = "rlhf"
    summary = "Responses to one prompt compared pairwise by a GenRM (circular/all pairs); rewards relative to the group"
    needs = ("judge",)
    agent_names = ("genrm_simple_agent", "genrm_simple_agent_reasoning_off", "genrm_compare_simple_agent")
    Row = GenRMRow
    Config = GenRMConfig
    judge_names = ("genrm",)

    cohorts: CohortBuffer | None = None

    async def setup(self) -> None:
        await super().setup()
        cfg: GenRMConfig = self.config  # type: ignore[assignment]
        self.cohorts = CohortBuffer(self._score_cohort, timeout_s=cfg.cohort_timeout_s, max_open=cfg.max_open_cohorts)

    async def close(self) -> None:
        if self.cohorts is not None:
            await self.cohorts.close()
        await super().close()

    def metrics_text(self) -> str:
        lines = [super().metrics_text()]
        if self.cohorts is not None:
            counts = describe_counts(self.cohorts)
            lines += ["# HELP verigym_genrm_cohorts Cohort /verify: cohorts waiting, rollouts waiting, and totals by outcome.",
                      "# TYPE verigym_genrm_cohorts gauge"]
            lines += [f'verigym_genrm_cohorts{{state="{k}"}} {v}' for k, v in counts.items()]
        return "\n".join(x for x in lines if x) + "\n"

    # ---- one group --------------------------------------------------------------------------
    async def _ask(self, history: list[dict[str, str]], answer_1: str, answer_2: str,
                   principle: str | None) -> tuple[float, float, float]:
        cfg: GenRMConfig = self.config  # type: ignore[assignment]
        messages = list(history)
        if cfg.use_principle:
            messages.append({"role": "principle", "content": principle or cfg.default_principle})
        # The roles delimit each answer; score blocks and chat-template tokens inside one are removed.
        messages += [{"role": role, "content": guard_message(shown_answer(answer), GENRM_SCORES, cfg.response_guard)}
                     for role, answer in (("response_1", answer_1), ("response_2", answer_2))]
        reply = await self.judge("genrm").ask(messages, GENRM_SCORES.read)
        return reply.verdict

    async def score_group(self, history: list[dict[str, str]], texts: list[tuple[str, str]],
                          principle: str | None) -> GroupScore:
        cfg: GenRMConfig = self.config  # type: ignore[assignment]
        n = len(texts)
        planned = [(i, j, vote) for vote in range(cfg.num_judges_per_comparison)
                   for i, j in comparison_pairs(cfg.comparison_strategy, n)]
        outcomes = await asyncio.gather(*(self._ask(history, texts[i][1], texts[j][1], principle)
                                          for i, j, _ in planned), return_exceptions=True)
        done: list[Comparison] = []
        failed: dict[int, str] = {}
        results = []
        for (i, j, vote), got in zip(planned, outcomes):
            if isinstance(got, JudgeError):
                for k in (i, j):
                    failed.setdefault(k, f"comparison ({i}, {j}) vote {vote}: {got}")
                results.append({"response_i": i, "response_j": j, "judge_idx": vote, "error": str(got)})
                continue
            if isinstance(got, BaseException):
                raise got
            s1, s2, rank = got
            done.append(Comparison(i, j, vote, s1, s2, rank))
            results.append({"response_i": i, "response_j": j, "judge_idx": vote,
                            "score_1": s1, "score_2": s2, "ranking": rank})
        # Responses of a failed comparison are masked; the others keep all their comparisons.
        metrics: dict[str, float] = {"num_comparisons": float(len(planned)),
                                     "failed_comparisons": float(len(planned) - len(done))}
        rewards: list[float] = [0.0] * n
        base: list[float | None] = [None] * n
        adjust: list[float | None] = [None] * n
        if len(failed) < n:
            agg = aggregate(done, texts, cfg.shaping(), frozenset(failed))
            rewards = [0.0 if r is None else r for r in agg.rewards]
            base, adjust = agg.base_scores, agg.adjustments
            metrics.update(agg.metrics)
        return GroupScore(rewards=rewards, failures=[failed.get(k) for k in range(n)], base_scores=base,
                          adjustments=adjust, comparisons=results, metrics=metrics)

    # ---- POST /compare -------------------------------------------------------------------------
    @endpoint("Score a group: conversation_history + N response_objs (+ principle) -> one reward per response")
    async def compare(self, request: CompareRequest) -> dict[str, Any]:
        texts = [response_texts(r) for r in request.response_objs]
        got = await self.score_group(history_messages(request.conversation_history), texts, request.principle)
        return {"rewards": got.rewards, "comparison_results": got.comparisons, "metrics": got.metrics,
                "failures": [None if f is None else {"_ng_failure_class": FailureClass.JUDGE_ERROR.value, "detail": f}
                             for f in got.failures],
                "base_scores": got.base_scores, "adjustments": got.adjustments}

    # ---- cohort POST /verify -------------------------------------------------------------------
    def cohort_key(self, row: GenRMRow) -> str:
        """NeMo-Gym's: the prompt (input + principle) hashed, scoped by task index or prompt id."""
        params = row.responses_create_params
        digest = hashlib.sha256(orjson.dumps({"input": params.input, "principle": row.principle},
                                             option=orjson.OPT_SORT_KEYS)).hexdigest()
        if row.task_index is not None:
            return f"task_idx::{row.task_index}::{digest}"
        if row.prompt_id is not None:
            return f"prompt_id::{row.prompt_id}::{digest}"
        return digest

    async def _score_cohort(self, items: list[tuple[list[dict[str, str]], tuple[str, str], str | None]]) -> list[Any]:
        history, _, principle = items[0]
        got = await self.score_group(history, [texts for _, texts, _ in items], principle)
        return [(got.rewards[k], got.failures[k], got.base_scores[k], got.adjustments[k], len(items),
                 [c for c in got.comparisons if k in (c["response_i"], c["response_j"])]) for k in range(len(items))]

    async def verify(self, row: GenRMRow, response: ResponseObject, session: Any | None) -> Verdict:
        cfg: GenRMConfig = self.config  # type: ignore[assignment]
        assert self.cohorts is not None, "setup() opens the cohort buffer"
        size = row.num_rollouts_per_prompt or cfg.num_rollouts_per_prompt
        params = row.responses_create_params
        history = history_messages(params.input)
        instructions = getattr(params, "instructions", None)  # the Responses API's system prompt
        if instructions:
            history.insert(0, {"role": "system", "content": str(instructions)})
        item = (history, response_texts(response), row.principle)
        try:
            reward, failure, base, adjustment, cohort_size, comparisons = await self.cohorts.join(
                self.cohort_key(row), size, item, row.rollout_index)
        except CohortFailure as exc:
            return Verdict.failure(exc.failure_class, exc.detail)
        extras = {"genrm_comparisons": comparisons, "genrm_cohort_size": cohort_size}
        if failure is not None:
            return Verdict.failure(FailureClass.JUDGE_ERROR, failure, **extras)
        return Verdict(reward, extras={**extras, "genrm_base_score": base, "genrm_adjustment": adjustment})
