"""tool_call: the pure matching rules, then the environment's components and row validation."""

from __future__ import annotations

import pytest

from environments.agent_actions.calls import MatchOptions, make_call, match_calls, parse_arguments, value_problems
from servers import registry
from servers.service import EnvService


def calls(*pairs):
    return [make_call(name, args) for name, args in pairs]


@pytest.mark.parametrize("expected,got,equal", [
    ({"a": 14}, {"a": "14"}, True),  # quoted number
    ({"a": 0.1 + 0.2}, {"a": 0.3}, True),  # tolerance
    ({"a": 1.0}, {"a": 1.001}, False),
    ({"a": True}, {"a": 1}, False),  # booleans are not numbers
    ({"a": None}, {"a": "None"}, False),
    ({"a": "New  York\n"}, {"a": " New York"}, True),  # whitespace collapse
    ({"a": "New York"}, {"a": "new york"}, False),  # case-sensitive by default
    ({"a": [1, 2]}, {"a": [2, 1]}, False),  # list order matters
    ({"a": {"b": [1, {"c": "x"}]}}, {"a": {"b": [1.0, {"c": "x "}]}}, True),
    ({"a": "14"}, {"a": "14.0"}, False),  # two strings compare as strings
    ({"a": 1}, {"a": 1, "b": 2}, False),
    ({"a": 1, "b": 2}, {"a": 1}, False),
])
def test_value_rules(expected, got, equal):
    assert (value_problems(expected, got, MatchOptions(), "arguments") == []) is equal


def test_options_change_the_rules():
    assert value_problems({"s": "A b"}, {"s": "a  B"}, MatchOptions(case_sensitive=False), "arguments") == []
    assert value_problems({"s": "a b"}, {"s": "a  b"}, MatchOptions(whitespace="exact"), "arguments") != []
    assert value_problems({"s": " a"}, {"s": "a"}, MatchOptions(whitespace="strip"), "arguments") == []
    assert value_problems({"a": 1}, {"a": 1, "b": 2}, MatchOptions(allow_extra_arguments=True), "arguments") == []
    # extra keys are only allowed at the top level
    assert value_problems({"a": {"x": 1}}, {"a": {"x": 1, "y": 2}}, MatchOptions(allow_extra_arguments=True),
                          "arguments") == ["arguments.a.y: unexpected"]
    assert value_problems({"n": 100.0}, {"n": 101}, MatchOptions(rel_tol=0.02), "arguments") == []
    assert value_problems({"n": 100}, {"n": 101}, MatchOptions(rel_tol=0.02), "arguments") != []  # ints exact


def test_parse_arguments():
    assert parse_arguments('{"a": 1}') == {"a": 1} and parse_arguments({"a": 1}) == {"a": 1}
    assert parse_arguments("") == {} and parse_arguments(None) == {}
    assert parse_arguments("[1]") is None and parse_arguments("{bad") is None


def test_multiset_matching_is_order_insensitive_and_counts_duplicates():
    expected = calls(("f", {"x": 1}), ("f", {"x": 2}), ("g", {}))
    result = match_calls(expected, calls(("g", "{}"), ("f", '{"x": 2}'), ("f", {"x": 1})))
    assert result.exact and result.name_score == result.arguments_score == 1.0
    assert [c.predicted_index for c in result.calls] == [2, 1, 0]
    # a greedy first-fit would fail here; maximum matching must not
    loose = MatchOptions(rel_tol=0.5)
    result = match_calls(calls(("f", {"x": 10.0}), ("f", {"x": 14.0})), calls(("f", {"x": 12}), ("f", {"x": 5.5})),
                         loose)
    assert result.exact
    result = match_calls(calls(("f", {"x": 1})), calls(("f", {"x": 1}), ("f", {"x": 1})))
    assert not result.exact and result.arguments_score == 0.5 and result.unmatched_predicted == [1]


def test_match_reports_explain_failures():
    result = match_calls(calls(("f", {"x": 1}), ("h", {})), calls(("f", {"x": 3}), ("g", {})))
    assert result.name_score == 0.5 and result.arguments_score == 0.0
    assert result.calls[0].problems == ["closest call #0: arguments.x: expected 1, got 3"]
    assert result.calls[1].problems == ["no call named 'h'"]
    assert match_calls([], []).exact


@pytest.fixture
async def service(request):
    svc = EnvService(registry.instantiate("tool_call", overrides=getattr(request, "param", {})))
    await svc.start()
    yield svc
    await svc.stop()


def _response(*pairs):
    return {"output": [{"type": "function_call", "name": n, "arguments": a, "call_id": str(i)}
                       for i, (n, a) in enumerate(pairs)]}


ROW = {"responses_create_params": {"input": "q"},
       "expected_answers": [{"name": "f", "arguments": {"x": 1}}, {"name": "g", "arguments": '{"y": "a"}'}]}


@pytest.mark.parametrize("service", [{"scoring": "partial", "name_weight": 0.4, "arguments_weight": 0.6}],
                         indirect=True)
async def test_partial_scoring_components_sum_to_reward(service):
    status, reply = await service.verify({**ROW, "response": _response(("f", '{"x": 1}'), ("g", '{"y": "b"}'))})
    assert status == 200
    assert reply["reward_components"] == {"name": pytest.approx(0.4), "arguments": pytest.approx(0.3)}
    assert reply["reward"] == pytest.approx(0.7)


async def test_binary_scoring(service):
    _, reply = await service.verify({**ROW, "response": _response(("g", '{"y": "a"}'), ("f", '{"x": 1.0}'))})
    assert reply["reward"] == 1.0 and reply["exact_match"]
    _, reply = await service.verify({**ROW, "response": _response(("f", '{"x": 1}'))})
    assert reply["reward"] == 0.0 and reply["name_score"] == 0.5
    expected_action = {"responses_create_params": {"input": "q"},
                       "expected_action": {"type": "function_call", "name": "f", "arguments": '{"x": 1}'}}
    _, reply = await service.verify({**expected_action, "response": _response(("f", '{"x":1}'))})
    assert reply["reward"] == 1.0


async def test_rows_without_exactly_one_expectation_are_rejected(service):
    both = {**ROW, "expected_action": {"name": "f"}, "response": _response()}
    status, body = await service.verify(both)
    assert status == 422 and "exactly one" in str(body["detail"])


def test_bad_weights_are_a_config_error():
    from servers.registry import ConfigError
    with pytest.raises(ConfigError, match="must be 1"):
        registry.instantiate("tool_call", overrides={"name_weight": 0.5})


@pytest.mark.parametrize("expected,got,equal", [
    ({"id": 1234567890}, {"id": 1234567891}, False),  # integers are exact: no relative tolerance
    ({"id": 1234567890}, {"id": "1234567890"}, True),
    ({"id": 14}, {"id": 14.0}, True),  # same value
    ({"x": "3.5"}, {"x": 3.5000000001}, True),  # a real written as a string keeps the tolerance
    ({"x": 1}, {"x": 10 ** 400}, False),  # used to raise OverflowError (verifier_error)
    ({"x": 1.5}, {"x": 10 ** 400}, False),
    ({"x": 10 ** 400}, {"x": 10 ** 400}, True),
])
def test_numbers_compare_exactly_unless_real(expected, got, equal):
    assert (value_problems(expected, got, MatchOptions(), "arguments") == []) is equal


def test_unparsable_predicted_arguments_are_a_wrong_call_not_an_error():
    assert parse_arguments("[" * 100_000 + "]" * 100_000) is None  # RecursionError inside json
    assert parse_arguments('{"x": ' + "1" * 5000 + "}") is None  # over Python's int digit limit


async def test_hostile_function_calls_score_zero(service):
    for arguments in ("{bad json", "[" * 100_000 + "]" * 100_000, '{"x": ' + "9" * 5000 + "}", None):
        status, reply = await service.verify({**ROW, "response": _response(("f", arguments))})
        assert status == 200 and reply["reward"] == 0.0 and "_ng_failure_class" not in reply, reply


async def test_gold_arguments_that_are_not_a_json_object_are_rejected(service):
    for bad in ('{"x": 1', "[1, 2]", "3"):
        row = {"responses_create_params": {"input": "q"}, "expected_answers": [{"name": "f", "arguments": bad}]}
        status, body = await service.verify({**row, "response": _response(("f", '{"x": 1}'))})
        assert status == 422 and "expected_answers.0.arguments" in str(body["detail"]), body


def test_similarity_text_rules_and_strict_numeric_strings():
    # NeMo-Gym's PivotRL rules: word-count overlap (identical texts score 0.5) and SequenceMatcher.
    overlap = MatchOptions(text_match="word_overlap", text_threshold=0.3)
    assert value_problems("climate change effects", "Effects of climate change", overlap, "q") == []
    assert value_problems("climate change effects", "stock prices today", overlap, "q")
    assert value_problems("paris", "Paris", overlap, "q")  # one word: identical or nothing
    sequence = MatchOptions(text_match="sequence", text_threshold=0.9)
    assert value_problems("ls -la /workspace\n", "ls -la /workspace/", sequence, "cmd") == []
    assert value_problems("ls -la /workspace", "rm -rf /", sequence, "cmd")
    assert value_problems(14, "14", MatchOptions(), "n") == []
    assert value_problems(14, "14", MatchOptions(numeric_strings=False), "n")


def test_match_calls_with_a_custom_pair_rule():
    expected = [make_call("a", {"x": 1}), make_call("b", {})]
    predicted = [make_call("b", {"ignored": True}), make_call("a", {"x": 2})]
    by_name = match_calls(expected, predicted, compare=lambda e, p: [] if e.name == p.name else ["name"])
    assert by_name.exact and [c.predicted_index for c in by_name.calls] == [1, 0]
    assert not match_calls(expected, predicted).exact
