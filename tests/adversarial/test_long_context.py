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


# ---- dumping: RULER-style string match -----------------------------------------------------------------
def ruler_row(task: str, seed: int = 0, **options) -> dict:
    from environments.long_context.synthetic import generate_rows

    return next(generate_rows(tasks=[task], size=1, seed=seed, target_tokens=2000, **options))


def prompt_of(row: dict) -> str:
    return row["responses_create_params"]["input"][0]["content"]


def dumps(row: dict) -> dict[str, str]:
    import re

    prompt = prompt_of(row)
    numbers = sorted(set(re.findall(r"\b\d{7}\b", prompt)))
    names = sorted(set(re.findall(r"\bVAR ([A-Z]{5})\b", prompt)))
    candidates = numbers if row["subset"].startswith("niah") else names
    return {
        "every_candidate": ", ".join(candidates),
        "every_candidate_lowercase": " ".join(c.lower() for c in candidates),
        "candidates_as_prose": "It is one of: " + " or ".join(candidates) + ".",
        "echo_context": prompt,
        "echo_context_tail": prompt[-3000:],
        "answer_then_the_rest": f"{row['outputs'][0]}. Others seen: " + ", ".join(candidates),
    }


@pytest.mark.parametrize("task", ["niah_multikey", "variable_tracking"])
@pytest.mark.parametrize("form", ["every_candidate", "every_candidate_lowercase", "candidates_as_prose", "echo_context",
                                  "echo_context_tail", "answer_then_the_rest"])
async def test_attack_dumping_candidates_or_context(scorer, task, form):
    row = ruler_row(task, num_distractors=6) if task == "niah_multikey" else ruler_row(task)
    # RULER's variable tracking hides other chains too: add two decoy chains to the haystack
    decoys = "VAR DECOY = 55555. VAR QWERT = VAR DECOY. VAR ZXCVB = VAR QWERT. VAR PLMOK = VAR ZXCVB. " \
             "VAR ASDFG = 77777. VAR HJKLM = VAR ASDFG. VAR TYUIO = VAR HJKLM. VAR BNMQW = VAR TYUIO. "
    message = row["responses_create_params"]["input"][0]
    message["content"] = message["content"].replace("\n", "\n" + decoys, 1)
    env = await scorer(ENV)
    reply = await env.verify(row, dumps(row)[form])
    # a dump pays no more than naming one gold among the candidates would: well under an answer's
    assert_refused(reply, at_most=0.5 if task == "variable_tracking" else 0.2)


async def test_attack_reasoning_dump_with_short_answer(scorer):
    # Candidates listed in inline reasoning count as nothing: the answer is what follows it.
    row = ruler_row("niah_multikey", num_distractors=6)
    text = "<think>" + dumps(row)["every_candidate"] + "</think>I am not sure."
    env = await scorer(ENV)
    assert_refused(await env.verify(row, text))


@pytest.mark.parametrize("task", ["niah_single", "niah_multikey", "variable_tracking"])
async def test_control_honest_answers_score(scorer, task):
    row = ruler_row(task)
    golds = row["outputs"]
    env = await scorer(ENV)
    if task == "variable_tracking":
        texts = [", ".join(golds), "Answer: According to the chain(s) of variable assignment in the text above, "
                 f"{len(golds)} variables are assigned the value, they are: " + ", ".join(golds),
                 " ".join(g.lower() for g in golds)]
    else:
        key = prompt_of(row).split("special magic number for ")[-1].split(" mentioned")[0]
        texts = [golds[0], f"The special magic number for {key} mentioned in the provided text is {golds[0]}.",
                 f"<think>Scanning the text for {key}...</think>{golds[0]}"]
    for text in texts:
        assert_scores(await env.verify(row, text))


async def test_control_ruler_rows_from_the_example_data(scorer):
    import json
    from pathlib import Path

    env = await scorer(ENV)
    path = Path(__file__).resolve().parents[2] / "environments/long_context/data/example.jsonl"
    for line in path.read_text().splitlines():
        row = json.loads(line)
        expected = row.get("_expected", {})
        if "outputs" in row and expected.get("reward") is not None:
            reply = await env.verify({k: v for k, v in row.items() if k not in ("response", "_expected")}, row["response"])
            assert reply["reward"] == pytest.approx(expected["reward"]), row["response"]


async def test_nemo_gym_parity_pays_for_the_dump(scorer):
    """Why the attacks above can fail: RULER's metric as NeMo-Gym scores it."""
    row = ruler_row("variable_tracking")
    env = await scorer(ENV, nemo_gym_parity=True)
    assert (await env.verify(row, dumps(row)["every_candidate"]))["reward"] == 1.0
    assert (await env.verify(row, dumps(row)["echo_context"]))["reward"] == 1.0
