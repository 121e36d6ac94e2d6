"""The decode engine on a GPU: captured decode steps (CUDA graphs) give the tokens and logprobs of
eager steps and of the model's own forward, weights copied in place reach a captured step, and a
swap between two steps changes what the captured step samples. Skipped where torch sees no GPU
(CI has none; these run on a lent card, see docs/model-server.md)."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch here")

from servers.model.engine import DecodeEngine, EngineRequest  # noqa: E402
from servers.model.sampling import SamplingParams  # noqa: E402
from servers.model.tiny import TinyModelConfig, build_tiny_model, build_tiny_tokenizer  # noqa: E402

TOK = build_tiny_tokenizer()


def model(seed: int = 0, dtype: torch.dtype = torch.float32):
    return build_tiny_model(TOK, TinyModelConfig(), seed).to(device="cuda", dtype=dtype).eval()


def prompts() -> list[list[int]]:
    texts = ["hi", "what is 2+2?", "tell me a story about a cat and a dog", "x"]
    return [TOK(TOK.apply_chat_template([{"role": "user", "content": t}], tokenize=False, add_generation_prompt=True),
                add_special_tokens=False)["input_ids"] for t in texts]


def run(engine: DecodeEngine, params: list[SamplingParams], **kw):
    return engine.run([EngineRequest(p, q) for p, q in zip(prompts(), params)], **kw)


def sampled(n: int = 4, new: int = 40) -> list[SamplingParams]:
    return [SamplingParams(max_new_tokens=new, temperature=t, top_p=p, seed=s, ignore_eos=True)
            for s, (t, p) in enumerate([(0, 1), (1.0, 1), (0.7, 0.9), (1.3, 0.5)][:n])]


def test_captured_steps_equal_eager_steps():
    m = model()
    graphed, eager = DecodeEngine(m, TOK), DecodeEngine(m, TOK, graphs=False)
    assert "CUDA graphs" in graphed.kind and "eager" in eager.kind
    for _ in range(2):  # the first run captures, the second replays
        a, b = run(graphed, sampled()), run(eager, sampled())
        for x, y in zip(a, b):
            assert x.token_ids == y.token_ids and len(x.token_ids) == 40
            assert max(abs(u - v) for u, v in zip(x.logprobs, y.logprobs)) < 1e-4
    assert "CUDA graphs" in graphed.kind  # no fallback to eager steps happened


def test_greedy_on_the_gpu_equals_transformers_generate():
    m = model()
    engine = DecodeEngine(m, TOK)
    outs = run(engine, [SamplingParams(max_new_tokens=24, temperature=0, ignore_eos=True)] * 4)
    for p, out in zip(prompts(), outs):
        ref = m.generate(torch.tensor([p], device="cuda"), attention_mask=torch.ones(1, len(p), dtype=torch.long,
                                                                                    device="cuda"),
                         max_new_tokens=24, do_sample=False, eos_token_id=None, pad_token_id=TOK.pad_token_id)
        assert out.token_ids == ref[0, len(p):].tolist()


def test_logprobs_on_the_gpu_are_the_models():
    m = model()
    out = run(DecodeEngine(m, TOK), sampled(2))[1]
    p = prompts()[1]
    with torch.no_grad():
        logits = m(torch.tensor([p + out.token_ids], device="cuda")).logits[0, len(p) - 1:-1].float()
    ref = torch.log_softmax(logits, -1).gather(1, torch.tensor(out.token_ids, device="cuda").unsqueeze(1)).squeeze(1)
    assert torch.allclose(torch.tensor(out.logprobs, device="cuda"), ref, atol=1e-4)


def test_weights_loaded_in_place_reach_a_captured_step():
    engine = DecodeEngine(model(0), TOK)
    greedy = [SamplingParams(max_new_tokens=16, temperature=0, ignore_eos=True)] * 4
    before = run(engine, greedy)
    run(engine, greedy)  # replayed, not captured again
    engine.load_weights(dict(model(1).named_parameters()), version="2")
    after = run(engine, greedy)
    fresh = run(DecodeEngine(model(1), TOK, graphs=False), greedy)
    assert [o.token_ids for o in after] == [o.token_ids for o in fresh] != [o.token_ids for o in before]
    assert all(o.versions == ["2"] * 16 for o in after)


def test_a_swap_between_captured_steps_changes_the_next_tokens():
    m, other = model(0), model(1)
    version = {"v": 1}
    engine = DecodeEngine(m, TOK, version=lambda: version["v"])
    params = sampled(4, 24)
    run(engine, params)  # capture first, so the swap hits replayed steps

    def swap(step: int) -> None:
        if step == 8:
            with engine.lock:
                m.load_state_dict(other.state_dict())
                version["v"] = 2

    out = run(engine, params, on_step=swap)
    base = run(DecodeEngine(model(0), TOK, graphs=False), params)
    for o, b in zip(out, base):
        assert o.versions == [1] * 8 + [2] * 16 and o.token_ids[:8] == b.token_ids[:8]
    assert any(o.token_ids[8:] != b.token_ids[8:] for o, b in zip(out, base))


def test_bf16_batches_decode_with_finite_logprobs():
    engine = DecodeEngine(model(0, torch.bfloat16), TOK)
    params = [SamplingParams(max_new_tokens=32, temperature=1.0, seed=i, ignore_eos=True) for i in range(64)]
    outs = engine.run([EngineRequest(prompts()[i % 4], q) for i, q in enumerate(params)])
    assert all(len(o.token_ids) == 32 and all(lp <= 0 and lp == lp for lp in o.logprobs) for o in outs)
    assert len({tuple(o.token_ids) for o in outs}) > 32  # different seeds sample different rows


def test_compiled_captured_steps_equal_eager_steps_and_see_new_weights():
    """torch.compile'd steps captured as CUDA graphs (``--compile``): the eager steps' tokens and logprobs
    across two batch shapes, and a weight copy reaches the replayed compiled step."""
    m = model(0)
    compiled, eager = DecodeEngine(m, TOK, compile=True), DecodeEngine(m, TOK, graphs=False)
    assert "CUDA graphs" in compiled.kind and "torch.compile" in compiled.kind
    for n in (4, 3, 4):  # capture, a second shape (dynamic batch), replay
        a, b = run(compiled, sampled(n)), run(eager, sampled(n))
        for x, y in zip(a, b):
            assert x.token_ids == y.token_ids and max(abs(u - v) for u, v in zip(x.logprobs, y.logprobs)) < 1e-4
    assert "CUDA graphs" in compiled.kind  # capture of the compiled step did not fail
    compiled.load_weights(dict(model(1).named_parameters()), version="2")
    greedy = [SamplingParams(max_new_tokens=16, temperature=0, ignore_eos=True)] * 4
    fresh = run(DecodeEngine(model(1), TOK, graphs=False), greedy)
    assert [o.token_ids for o in run(compiled, greedy)] == [o.token_ids for o in fresh]
