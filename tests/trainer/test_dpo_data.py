"""Preference pairs: NeMo-RL's two formats, errors naming the field, pairs from tool rollouts."""

from __future__ import annotations

import json

import pytest

from trainer.dpo.config import load_dpo_config
from trainer.config import ConfigError
from trainer.dpo.preference_data import (PAIR_INFO_KEY, PreferenceDataError, assistant_message, pairs_from_rollouts,
                                         parse_pair, read_pairs, tokenize_pair)
from trainer.policy import Policy, PolicyConfig, TinyModelConfig

TOOL = {"type": "function", "name": "get_weather", "description": "w",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                       "additionalProperties": False}}


def call(name, args):
    return {"type": "function_call", "name": name, "arguments": json.dumps(args), "call_id": "c", "id": "fc"}


def test_preference_dataset_row_lower_rank_is_chosen():
    row = {"context": [{"role": "user", "content": "2+2?"}],
           "completions": [{"rank": 1, "completion": [{"role": "assistant", "content": "5"}]},
                           {"rank": 0, "completion": [{"role": "assistant", "content": "4"}]}]}
    pair = parse_pair(row)
    assert pair.chosen["content"] == "4" and pair.rejected["content"] == "5" and pair.tools == []


def test_binary_row_with_custom_keys_and_message_prompt():
    pair = parse_pair({"q": "2+2?", "good": "4", "bad": "5"}, prompt_key="q", chosen_key="good", rejected_key="bad")
    assert pair.context == [{"role": "user", "content": "2+2?"}] and pair.chosen == {"role": "assistant", "content": "4"}
    pair = parse_pair({"prompt": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}],
                       "chosen": "a", "rejected": "b", "tools": [TOOL]})
    assert len(pair.context) == 2 and pair.tools[0]["function"]["name"] == "get_weather"


@pytest.mark.parametrize("row, message", [
    ({"context": [], "completions": [{"rank": 0, "completion": [{"role": "assistant", "content": "a"}]}]},
     "exactly two completions"),
    ({"context": [], "completions": [{"rank": 0, "completion": [{"role": "assistant", "content": "a"}]},
                                     {"rank": 0, "completion": [{"role": "assistant", "content": "b"}]}]}, "ties"),
    ({"context": [], "completions": [{"completion": []}, {"rank": 1, "completion": []}]}, "integer 'rank'"),
    ({"context": [], "completions": [{"rank": 0, "completion": []},
                                     {"rank": 1, "completion": [{"role": "assistant", "content": "b"}]}]},
     "chosen completion must be a list of exactly one message"),
    ({"prompt": "p", "chosen": "c"}, "missing 'rejected'"),
    ({"prompt": "p", "chosen": {"role": "user", "content": "x"}, "rejected": "r"}, "expected an assistant message"),
])
def test_bad_rows_name_the_problem(row, message):
    with pytest.raises(PreferenceDataError, match=message):
        parse_pair(row, where="pairs.jsonl:3")


def test_read_pairs_reports_the_line(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "a", "chosen": "b", "rejected": "c"}\n{not json\n')
    with pytest.raises(PreferenceDataError, match=r"p.jsonl:2: not JSON"):
        read_pairs(f)
    with pytest.raises(PreferenceDataError, match="driver rollout"):
        read_pairs(tmp_path / "missing.jsonl")


def test_tokenize_splits_prompt_and_completion_with_tools():
    policy = Policy.load(PolicyConfig(tiny=TinyModelConfig(num_hidden_layers=1, hidden_size=32, intermediate_size=64)))
    msg = assistant_message({"output": [call("get_weather", {"city": "Oslo"})]})
    pair = parse_pair({"context": [{"role": "user", "content": "weather Oslo"}], "tools": [TOOL],
                       "completions": [{"rank": 0, "completion": [msg]},
                                       {"rank": 1, "completion": [{"role": "assistant", "content": "no idea"}]}]})
    tok = tokenize_pair(policy, pair)
    assert "get_weather" in policy.decode(tok.prompt_ids) and policy.decode(tok.prompt_ids).endswith("assistant\n")
    assert policy.decode(tok.chosen_ids) == \
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call><|im_end|>\n'
    assert policy.decode(tok.rejected_ids) == "no idea<|im_end|>\n"
    assert tok.digest != tokenize_pair(policy, parse_pair({"prompt": "x", "chosen": "a", "rejected": "b"})).digest


def test_pairs_from_rollouts_pair_clean_with_hallucinated_of_the_same_prompt():
    params = {"input": [{"role": "user", "content": "weather Oslo"}], "tools": [TOOL]}
    good = {"output": [call("get_weather", {"city": "Oslo"})]}
    made_up = {"output": [call("fetch_weather", {"city": "Oslo"})]}
    bad_args = {"output": [call("get_weather", {"location": "Oslo"})]}
    plain = {"output": [{"type": "message", "content": [{"type": "output_text", "text": "sunny"}]}]}
    recs = [{"responses_create_params": params, "response": r, "_ng_task_index": t, "_ng_rollout_index": i}
            for t, rs in ((0, [good, made_up, bad_args, plain]), (1, [good, good]), (2, [made_up]))
            for i, r in enumerate(rs)]
    pairs = pairs_from_rollouts(recs)
    assert len(pairs) == 2  # task 0 only: task 1 has no hallucination, task 2 no clean call
    assert [p[PAIR_INFO_KEY]["rejected_kind"] for p in pairs] == ["hallucinated_tool", "invalid_arguments"]
    assert all(p[PAIR_INFO_KEY]["chosen_rollout"] == 0 for p in pairs)
    first = parse_pair(json.loads(json.dumps(pairs[0])))  # the written row reads back as a NeMo-RL pair
    assert first.chosen["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": {"city": "Oslo"}}
    assert first.rejected["tool_calls"][0]["function"]["name"] == "fetch_weather"
    assert "'fetch_weather' is not a tool" in pairs[0][PAIR_INFO_KEY]["rejected_problems"][0]
    assert len(pairs_from_rollouts(recs, max_pairs_per_prompt=1)) == 1


def test_dpo_config_is_strict_and_keeps_nemo_rl_names():
    cfg = load_dpo_config("tiny", ["dpo.preference_average_log_probs=true", "data.train.data_path=x.jsonl"])
    assert cfg.sft_average_log_probs is True  # follows preference_average_log_probs, as NeMo-RL's yaml
    with pytest.raises(ConfigError, match="did you mean 'dpo.sft_loss_weight'"):
        load_dpo_config("tiny", ["dpo.sft_los_weight=0.1"])
    with pytest.raises(ConfigError, match="nothing to train"):
        load_dpo_config("tiny", ["dpo.preference_loss_weight=0", "dpo.sft_loss_weight=0"])
    with pytest.raises(ConfigError, match="nothing to validate"):
        load_dpo_config("tiny", ["dpo.val_at_end=true"])
    with pytest.raises(ConfigError, match="must divide"):
        load_dpo_config("tiny", ["policy.train_micro_batch_size=5"])
    with pytest.raises(ConfigError, match="used only by data.hallucination_eval"):
        load_dpo_config("tiny", ["policy.generation.temperature=0.5"])
