"""The optional equivalence-judge fallback of ``math`` (NeMo-Gym ``math_with_judge``'s judge path).

Off by default (``judge_fallback: false``, as in the Nemotron recipes). When on, an LLM
judge is asked only after math-verify (or the symbolic fast path standing in for it) said "not
equal" (not for a missing answer, not for two plain numbers the exact path told apart, not for a
failure): is the extracted answer
equivalent to the gold? It is asked in both orders to cancel position bias — gold first,
then, only if that says equal, the answer first — and the reward is 1 only when both say
``[[A=B]]``. A judge that fails makes the sample ``judge_error`` (masked).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from servers.environment import Verdict
from servers.judge import JudgedConfig, JudgedEnvironment, judge_prompt, label_verdict

SYSTEM_MESSAGE = """Act as an impartial judge of mathematical equivalence. You will see a problem \
and the final answers of two assistants, A and B. Decide whether A's answer is mathematically \
equivalent to B's answer. Ignore formatting and presentation (LaTeX vs plain text, order of \
terms, equivalent forms of the same value or set); consider only whether they denote the same \
mathematical object.

After your analysis, output exactly one verdict label:
- the answers are equivalent: [[A=B]]
- the answers differ: [[A!=B]]

Example of a final line: "My final verdict is different [[A!=B]]"."""

PROMPT_TEMPLATE = """<|Problem|>
{question}

<|Start of Assistant A's Answer|>
{first_answer}
<|End of Assistant A's Answer|>

<|Start of Assistant B's Answer|>
{second_answer}
<|End of Assistant B's Answer|>"""


class MathJudgeConfig(JudgedConfig):
    judge_fallback: bool = Field(
        False, description="Ask the equivalence judge (judges.judge) when math-verify says 'not equal'.")
    judge_system_message: str = Field(SYSTEM_MESSAGE, description="System message of the equivalence judge.")
    judge_prompt_template: str = Field(
        PROMPT_TEMPLATE, description="Placeholders {question} {first_answer} {second_answer}.")
    equal_label: str = Field("[[A=B]]", description="The judge's 'equivalent' verdict label.")
    not_equal_label: str = Field("[[A!=B]]", description="The judge's 'different' verdict label.")


class MathJudgeFallback(JudgedEnvironment):
    """Mixin of MathEnvironment: the judge is opened only when the fallback is on."""

    def required_judges(self) -> tuple[str, ...]:
        return ("judge",) if self.config.judge_fallback else ()

    async def apply_judge_fallback(self, question: str, gold: str, extracted: str, verdict: Verdict) -> Verdict:
        """``verdict`` unchanged unless the fallback is on and math-verify said 'not equal' (the
        only case worth a judge call); then the judge's both-orders decision. With the fallback
        on, the reply says ``judge_used``."""
        cfg: MathJudgeConfig = self.config
        if not cfg.judge_fallback:
            return verdict
        if not (verdict.failure_class is None and verdict.reward == 0.0
                and verdict.extras.get("scored_by") in ("math_verify", "symbolic")):
            verdict.extras["judge_used"] = False
            return verdict
        evaluations: list[dict[str, Any]] = []
        equal = True
        labels = label_verdict({cfg.equal_label: True, cfg.not_equal_label: False})
        for order, response_slot, gold_slot in (("expected_first", "second_answer", "first_answer"),
                                                ("response_first", "first_answer", "second_answer")):
            # The extracted box is the policy's text: fenced and defused like any judged response.
            prompt = judge_prompt(cfg.judge_prompt_template, labels, untrusted={response_slot: extracted},
                                  trusted={"question": question, gold_slot: gold}, system=cfg.judge_system_message,
                                  guard=cfg.response_guard)
            reply = await self.judge("judge").ask(prompt.messages, prompt.read)
            evaluations.append({"order": order, "equal": reply.verdict, "judge_response": reply.text[-2000:],
                                "cached": reply.cached})
            if not reply.verdict:
                equal = False
                break  # one "different" decides; the second order is asked only to confirm an "equal"
        extras = {**verdict.extras, "judge_used": True, "judge_evaluations": evaluations}
        if equal:
            extras["scored_by"] = "judge"
        return Verdict(1.0 if equal else 0.0, extras=extras)
