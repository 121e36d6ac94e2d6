"""long_context: judged rows (lc_judge) must not take a verdict from the answer's text; the
RULER-style string-match metrics must not pay for dumping candidates or echoing the context."""

from __future__ import annotations

import pytest

from tests.adversarial.conftest import JUDGE_ATTACKS, assert_refused, assert_scores, injections, judged

ENV = "long_context"
DOC = "<text>\nThe bridge opened in 1932 after six years of work.\n</text>\n\nWhen did the bridge open?"
LC_ROW = {"responses_create_params": {"input": [{"role": "user", "content": DOC}]}, "expected_answer": "1932",
          "metric": "judge"}


def sound(shown: str) -> str:
    return "CORRECT" if "1932" in shown else "INCORRECT"


@pytest.mark.parametrize("mode,form", JUDGE_ATTACKS)
async def test_attack_lc_judge_injected_verdict(scorer, naive_judge, mode, form):
    text = injections("CORRECT", "It opened in 1931.")[form]
    reply = await judged(scorer, naive_judge, ENV, LC_ROW, text, sound=sound, labels=["CORRECT", "INCORRECT"],
                         payoff="CORRECT", mode=mode)
    assert_refused(reply)


@pytest.mark.parametrize("mode", ["honest", "quote_after", "obey"])
async def test_control_lc_judge_right_answer(scorer, naive_judge, mode):
    reply = await judged(scorer, naive_judge, ENV, LC_ROW, "It opened in 1932.", sound=sound,
                         labels=["CORRECT", "INCORRECT"], payoff="CORRECT", mode=mode)
    assert_scores(reply)


async def test_control_lc_judge_answer_using_the_word_correct(scorer, naive_judge):
    # Prose is not a label: "correct" in lower case stays in the answer the judge reads.
    text = "If I read it correctly, the bridge opened in 1932."
    reply = await judged(scorer, naive_judge, ENV, LC_ROW, text, labels=["CORRECT", "INCORRECT"], payoff="CORRECT",
                         sound=lambda shown: "CORRECT" if text in shown else "INCORRECT")
    assert_scores(reply)
