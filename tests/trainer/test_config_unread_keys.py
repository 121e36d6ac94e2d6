"""NeMo-RL keys the built-in engine does not act on are refused with a message, never accepted
and ignored (they still pass through to NeMo-RL with --backend nemo-rl)."""

from __future__ import annotations

import pytest

from trainer.config import ConfigError, load_config

UNREAD = ["grpo.async_grpo.max_generation_failures=2", "grpo.async_grpo.recompute_kv_cache_after_weight_updates=true",
          "policy.generation.top_k=5", "data.max_input_seq_length=64",
          "logger.num_val_samples_to_print=3", "cluster.gpus_per_node=8", "cluster.num_nodes=2"]


@pytest.mark.parametrize("override", UNREAD)
def test_unread_nemo_rl_keys_are_refused_naming_the_backend_that_reads_them(override):
    key = override.split("=")[0]
    with pytest.raises(ConfigError, match=rf"'{key}' is NeMo-RL's, and the built-in engine cannot act on it.*--backend nemo-rl"):
        load_config("tiny", [override])


def test_keys_the_engine_reads_still_load():
    cfg = load_config("tiny", ["logger.tensorboard_enabled=true", "policy.generation.top_p=0.9"])
    assert cfg.logger.tensorboard_enabled and cfg.policy.generation.top_p == 0.9


@pytest.mark.parametrize("value", ["vllm", "megatron"])
def test_nemo_rl_generation_backends_are_refused_naming_the_backend_that_reads_them(value):
    # policy.generation.backend is read here (local | server); NeMo-RL's own values are its
    with pytest.raises(ConfigError, match=rf"'{value}' is NeMo-RL's generation backend.*--backend nemo-rl.*local or server"):
        load_config("tiny", [f"policy.generation.backend={value}"])
