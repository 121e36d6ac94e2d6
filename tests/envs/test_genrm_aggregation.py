"""genrm aggregation: pure functions against values computed by hand (NeMo-Gym's order of operations)."""
import math

import pytest

from environments.genrm.aggregation import (Comparison, Shaping, aggregate, centred_weights, comparison_pairs,
                                            mean_scores, parse_genrm_reply, response_texts, shortest_nonempty,
                                            shown_answer, style_density, top_threshold)


def test_pairs_circular_and_all_pairs():
    assert comparison_pairs("circular", 4) == [(0, 1), (1, 2), (2, 3), (3, 0)]
    assert comparison_pairs("circular", 2) == [(0, 1), (1, 0)]
    assert comparison_pairs("all_pairs", 4) == [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    assert len(comparison_pairs("circular", 16)) == 16 and len(comparison_pairs("all_pairs", 16)) == 120
    with pytest.raises(ValueError, match="at least 2"):
        comparison_pairs("circular", 1)
    with pytest.raises(ValueError, match="unknown comparison strategy"):
        comparison_pairs("round_robin", 4)


@pytest.mark.parametrize("text, expected", [
    ('{"score_1": 4, "score_2": 2, "ranking": 2}', (4.0, 2.0, 2.0)),
    # a fenced json block wins over a later bare object
    ('```json\n{"score_1": 5, "score_2": 1, "ranking": 1}\n```\nso {"score_1": 1, "score_2": 5, "ranking": 6}',
     (5.0, 1.0, 1.0)),
    # otherwise the last valid object: reasoning may quote a draft first
    ('Draft {"score_1": 1, "score_2": 1, "ranking": 3}. Final: {"score_1": 3, "score_2": 4, "ranking": 4.5}',
     (3.0, 4.0, 4.5)),
    ('{"rubric_evaluations": [{"x": 1}], "overall": {"score_1": "3", "score_2": 2, "ranking": 3}}', (3.0, 2.0, 3.0)),
    ('{"note": "a } brace in a string", "score_1": 2, "score_2": 3, "ranking": 5}', (2.0, 3.0, 5.0)),
    ('{"score_1": 4, "score_2": 2}', None),  # ranking missing: no verdict (NeMo-Gym would fill 3.5)
    ('{"score_1": "high", "score_2": 2, "ranking": 1}', None),
    ('{"score_1": NaN, "score_2": 2, "ranking": 1}', None),
    ("I prefer response 1.", None),
    ('{"score_1": 4, "score_2": ', None),
])
def test_parse_genrm_reply(text, expected):
    assert parse_genrm_reply(text) == expected


def test_tiebreak_and_mean_by_hand():
    # circular over 3: (0,1) 4 vs 2; (1,2) tie 3 vs 3, ranking 5 -> delta -1.5: 1.5 vs 4.5; (2,0) 5 vs 1
    comps = [Comparison(0, 1, 0, 4, 2, 2), Comparison(1, 2, 0, 3, 3, 5), Comparison(2, 0, 0, 5, 1, 1)]
    assert mean_scores(comps, 3) == [2.5, 1.75, 4.75]  # (4+1)/2, (2+1.5)/2, (4.5+5)/2
    out = aggregate(comps, [("", "a")] * 3, Shaping())
    assert out.rewards == [2.5, 1.75, 4.75] and out.adjustments == [0.0, 0.0, 0.0]
    # raw scores 4,2,3,3,5,1: mean 3, population variance 10/6; one tie in three comparisons
    assert out.metrics["mean_individual_score"] == 3.0
    assert math.isclose(out.metrics["std_individual_score"], math.sqrt(10 / 6))
    assert math.isclose(out.metrics["tiebreak_usage_rate"], 1 / 3)


def test_votes_each_count_as_a_comparison_and_a_response_without_one_is_an_error():
    # two votes on (0,1) and one on (1,0); vote 1 is a tie 3/3 ranking 1 -> 5.5 vs 0.5
    comps = [Comparison(0, 1, 0, 5, 1, 1), Comparison(0, 1, 1, 3, 3, 1), Comparison(1, 0, 0, 2, 4, 5)]
    assert mean_scores(comps, 2) == [(5 + 5.5 + 4) / 3, (1 + 0.5 + 2) / 3]
    with pytest.raises(ValueError, match=r"responses \[2\]"):
        mean_scores(comps, 3)


def test_threshold_shortest_and_weights():
    assert top_threshold([1, 7, 3, 9, 5], 0.2) == 9  # int(5*0.2)-1 = 0: the best
    assert top_threshold(list(range(1, 11)), 0.2) == 9  # int(10*0.2)-1 = 1: second best
    assert top_threshold([4, 4], 0.2) == 4
    assert shortest_nonempty([10, 0, 4, 20]) == 2
    assert shortest_nonempty([30, 10, 50, 10]) == 1  # first on a tie
    assert shortest_nonempty([0, 0]) is None
    assert centred_weights([5, 5, 5]) == [0.0, 0.0, 0.0]
    assert centred_weights([0, 10]) == [0.5, -0.5]  # the shorter gets the positive weight


def test_full_shaping_by_hand():
    # base scores [4, 3, 5, 2] from four non-tied circular comparisons
    comps = [Comparison(0, 1, 0, 4, 3, 2), Comparison(1, 2, 0, 3, 5, 5), Comparison(2, 3, 0, 5, 2, 1),
             Comparison(3, 0, 0, 2, 4, 5)]
    # reasoning lengths [10, 0, 4, 20] and answer lengths [30, 10, 50, 10] (after strip)
    texts = [("r" * 10, "a" * 30), ("   ", "b" * 10), ("  rrrr \n", "c" * 50), ("r" * 20, "d" * 10)]
    out = aggregate(comps, texts, Shaping(reasoning_bonus=0.5, answer_bonus=0.5, top_percentile=0.2,
                                          group_reasoning_length_penalty_coeff=0.3,
                                          group_answer_length_penalty_coeff=0.35))
    assert out.base_scores == [4.0, 3.0, 5.0, 2.0]
    # threshold = the best score, 5. Shortest reasoning: #2 (4 chars), score 5 >= 5: +0.5.
    # Shortest answer: #1 (10, first of a tie), score 3 < 5: no bonus.
    # reasoning w = 1 - l/20 = [.5, 1, .8, 0], mean .575 -> [-.075, .425, .225, -.575] * 0.3
    # answer w = 1 - (l-10)/40 = [.5, 1, 0, 1], mean .625 -> [-.125, .375, -.625, .375] * 0.35
    expected = [4 - 0.0225 - 0.04375, 3 + 0.1275 + 0.13125, 5.5 + 0.0675 - 0.21875, 2 - 0.1725 + 0.13125]
    assert out.rewards == pytest.approx(expected, abs=1e-12)
    assert out.rewards == pytest.approx([3.93375, 3.25875, 5.34875, 1.95875], abs=1e-12)
    assert out.adjustments == pytest.approx([r - b for r, b in zip(expected, [4, 3, 5, 2])], abs=1e-12)


def test_bonus_applies_to_the_shortest_only_when_it_is_a_top_scorer():
    comps = [Comparison(0, 1, 0, 5, 2, 1), Comparison(1, 0, 0, 2, 5, 6)]  # 5 vs 2
    short_best = aggregate(comps, [("", "ok"), ("", "much longer")], Shaping(answer_bonus=0.5))
    assert short_best.rewards == [5.5, 2.0]
    short_worst = aggregate(comps, [("", "much longer"), ("", "ok")], Shaping(answer_bonus=0.5))
    assert short_worst.rewards == [5.0, 2.0]  # the shortest (#1) is not a top scorer: nobody gets it
    empty = aggregate(comps, [("", ""), ("", "x")], Shaping(answer_bonus=0.5))
    assert empty.rewards == [5.0, 2.0]  # an empty answer is never 'shortest'; #1 is, and is not top


def test_style_density_and_penalty():
    text = "# Title\n- one\n- two\n**bold** words here\n```\n# not a header\n- not a list\n```"
    body = "# Title\n- one\n- two\n**bold** words here\n"
    assert style_density(text) == pytest.approx(4 / len(body.strip()))  # header, 2 list items, bold
    assert style_density("") == 0.0 and style_density("plain words") == 0.0
    comps = [Comparison(0, 1, 0, 3, 3, 3.5), Comparison(1, 0, 0, 3, 3, 3.5)]  # ties, ranking 3.5: delta 0
    out = aggregate(comps, [("", "plain answer"), ("", "# Big\n- a\n- b")], Shaping(group_style_penalty_coeff=0.2))
    assert out.rewards == pytest.approx([3.1, 2.9])  # weights [1, 0] centred [.5, -.5] * 0.2


def test_response_texts():
    response = {"output": [
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think "}, {"type": "summary_text", "text": "more"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Paris"},
                                                              {"type": "refusal", "refusal": "x"}]},
        {"type": "function_call", "name": "f", "arguments": "{}", "call_id": "c"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": " is it."}]}]}
    assert response_texts(response) == ("think more", "Paris is it.")
    assert response_texts({"output": []}) == ("", "")
    assert shown_answer("  ") == "None" and shown_answer("x") == "x"


def test_response_texts_reads_the_validated_model_the_same_way():
    from servers.wire import ResponseObject

    response = {"output": [
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Paris"}]},
        {"type": "message", "role": "assistant", "content": "plain string"}]}
    assert response_texts(ResponseObject.model_validate(response)) == response_texts(response) == ("think", "Parisplain string")
