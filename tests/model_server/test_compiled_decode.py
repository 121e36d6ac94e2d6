"""Decode steps through ``torch.compile`` (``DecodeEngine(compile=True)``, ``envs model serve --compile``,
``policy.generation.compile``) and the sampler's two-level inverse-CDF search, on CPU.

Inductor's CPU backend compiles the same step function a GPU compiles and then captures, so these
tests check what compilation must not change: the tokens, logprobs and bookkeeping of the eager
step, across batch shapes (the second shape recompiles with a dynamic batch dimension), and weights
copied in place reaching the compiled step. Whether compilation makes a GPU faster is measured by
``benchmarks/gpu_decode.py --compile`` on a GPU, not here."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from servers.model.engine import DecodeEngine, EngineRequest  # noqa: E402
from servers.model.sampling import SamplingParams, block_size, inverse_cdf  # noqa: E402
from servers.model.tiny import TinyModelConfig, build_tiny_model, build_tiny_tokenizer  # noqa: E402

TOK = build_tiny_tokenizer()


def tiny(seed: int = 0):
    return build_tiny_model(TOK, TinyModelConfig(), seed).eval()


def batch(rows: int, new: int = 20) -> list[EngineRequest]:
    """Rows of different prompt lengths and every kind of sampling the sampler specialises on."""
    texts = ["hi", "what is 2+2?", "tell me a story about a cat", "x"]
    out = []
    for i in range(rows):
        ids = TOK(texts[i % len(texts)] * (1 + i // len(texts)), add_special_tokens=False)["input_ids"]
        params = SamplingParams(max_new_tokens=new - (i % 3), temperature=(0.0, 1.0, 0.7)[i % 3],
                                top_p=0.8 if i % 4 == 3 else 1.0, seed=100 + i, top_logprobs=2 if i % 2 else 0)
        out.append(EngineRequest(ids, params))
    return out


def same(a, b) -> None:
    for x, y in zip(a, b, strict=True):
        assert x.token_ids == y.token_ids and x.finish_reason == y.finish_reason
        assert max((abs(u - v) for u, v in zip(x.logprobs, y.logprobs)), default=0.0) < 1e-4
        assert (x.top_logprobs is None) == (y.top_logprobs is None)
        if x.top_logprobs is not None:
            assert [[t for t, _ in step] for step in x.top_logprobs] == [[t for t, _ in step] for step in y.top_logprobs]


def test_compiled_steps_decode_as_the_eager_steps_across_batch_shapes():
    model = tiny()
    eager, compiled = DecodeEngine(model, TOK), DecodeEngine(model, TOK, compile=True)
    assert compiled.kind.endswith("torch.compile") and not eager.kind.endswith("torch.compile")
    for rows in (4, 6, 3):  # the second shape recompiles with a dynamic batch; the third reuses it
        requests = batch(rows)
        same(eager.run(requests), compiled.run(requests))
    assert compiled.stats["decode_steps"] == eager.stats["decode_steps"] > 0


def test_weights_copied_in_place_reach_the_compiled_step():
    model = tiny(0)
    engine = DecodeEngine(model, TOK, compile=True)
    requests = batch(4)
    before = engine.run(requests)
    engine.load_weights(dict(tiny(1).named_parameters()), version="v1")
    after = engine.run(requests)
    same(after, DecodeEngine(tiny(1), TOK).run(requests))
    assert [o.token_ids for o in after] != [o.token_ids for o in before]
    assert all(set(o.versions) == {"v1"} for o in after)


def test_compile_needs_the_static_decoder():
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=len(TOK))).eval()
    DecodeEngine(model, TOK)  # runs through the transformers forward
    with pytest.raises(ValueError, match="static decoder.*gpt2"):
        DecodeEngine(model, TOK, compile=True)


# ---- the two-level inverse-CDF search -----------------------------------------------------------
@pytest.mark.parametrize("vocab", [7, 300, 1187 * 4, 50257, 151936])
def test_block_size_splits_the_vocabulary_into_about_sqrt_blocks(vocab):
    size = block_size(vocab)
    blocks = -(-vocab // size)
    assert size * blocks >= vocab and size <= 4 * vocab ** 0.5 + 1 and blocks <= 4 * vocab ** 0.5 + 1


@pytest.mark.parametrize("vocab", [7, 300, 50257])
def test_inverse_cdf_finds_the_entry_a_full_running_sum_finds(vocab):
    gen = torch.Generator().manual_seed(vocab)
    probs = torch.rand(64, vocab, generator=gen) ** 6
    probs[:, torch.randperm(vocab, generator=gen)[: vocab // 3]] = 0.0  # zero entries, as a nucleus leaves
    u = torch.rand(64, generator=gen, dtype=torch.float64)
    cdf = probs.double().cumsum(-1)
    expected = torch.searchsorted(cdf, (u * cdf[:, -1]).unsqueeze(1), right=True).squeeze(1)
    assert torch.equal(inverse_cdf(probs, u), expected)


def test_inverse_cdf_never_draws_a_zero_probability_entry_at_the_top_of_the_range():
    probs = torch.zeros(3, 300)
    probs[0, 5], probs[1, 150], probs[2, [0, 299]] = 1.0, 0.5, 0.25
    top = torch.full((3,), 1.0, dtype=torch.float64)  # where rounding can put u x total at the total
    assert inverse_cdf(probs, top).tolist() == [5, 150, 299]
    assert inverse_cdf(probs, torch.zeros(3, dtype=torch.float64)).tolist() == [5, 150, 0]
