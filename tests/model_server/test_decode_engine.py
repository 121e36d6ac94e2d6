"""The one decode engine (servers/model/engine.py) on CPU, in process: its static-KV-cache path (the
function a GPU captures as a CUDA graph, run eagerly here) against the model's own forward, its
sampler against the distribution it samples, its bookkeeping (stop tokens and strings, per-row
limits, versions between steps) against what each request asked. Untrained models: the tests assert
equality and bookkeeping, never what a model says."""

from __future__ import annotations

import math
from collections import Counter

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from servers.model.decoder import HFDecoder, StaticDecoder  # noqa: E402
from servers.model.engine import DecodeEngine, EngineRequest  # noqa: E402
from servers.model.sampling import SamplerFlags, SamplingParams, sample, uniforms  # noqa: E402
from servers.model.tiny import TinyModelConfig, build_tiny_model, build_tiny_tokenizer  # noqa: E402

TOK = build_tiny_tokenizer()


def tiny(seed: int = 0):
    return build_tiny_model(TOK, TinyModelConfig(), seed).eval()


def small(kind: str):
    """A random model of another Llama-family geometry: Qwen2 (q/k/v biases) or Qwen3 (per-head q/k norms)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

    geometry = dict(vocab_size=len(TOK), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                    eos_token_id=TOK.eos_token_id, pad_token_id=TOK.pad_token_id)
    torch.manual_seed(3)
    if kind == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**geometry))
        with torch.no_grad():  # nonzero biases, so the bias path is exercised
            for layer in model.model.layers:
                for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                    proj.bias.normal_(0, 0.5)
        return model.eval()
    return Qwen3ForCausalLM(Qwen3Config(head_dim=16, **geometry)).eval()


def prompts(n: int = 4) -> list[list[int]]:
    texts = ["hi", "what is 2+2?", "hi", "tell me a story about a cat and a dog"][:n]
    return [TOK(TOK.apply_chat_template([{"role": "user", "content": t}], tokenize=False, add_generation_prompt=True),
                add_special_tokens=False)["input_ids"] for t in texts]


def run(engine: DecodeEngine, ps: list[list[int]], params: list[SamplingParams], **kw):
    return engine.run([EngineRequest(p, q) for p, q in zip(ps, params)], **kw)


def hf_engine(model) -> DecodeEngine:
    engine = DecodeEngine(model, TOK)
    engine.decoder = HFDecoder(model)
    return engine


# ---- the static path against the model's own forward ------------------------------------------
@pytest.mark.parametrize("kind", ["tiny", "qwen2", "qwen3"])
def test_static_decoder_matches_the_model_forward(kind):
    model = tiny() if kind == "tiny" else small(kind)
    static = DecodeEngine(model, TOK)
    assert isinstance(static.decoder, StaticDecoder)
    ps = prompts()
    params = [SamplingParams(max_new_tokens=24, temperature=t, top_p=p, seed=s, ignore_eos=True)
              for s, (t, p) in enumerate([(0, 1), (1.0, 1), (0.7, 0.9), (1.3, 0.5)])]
    a, b = run(static, ps, params), run(hf_engine(model), ps, params)
    for x, y in zip(a, b):
        assert x.token_ids == y.token_ids and len(x.token_ids) == 24
        assert max(abs(u - v) for u, v in zip(x.logprobs, y.logprobs)) < 1e-4


def test_greedy_equals_transformers_generate():
    model = tiny()
    engine = DecodeEngine(model, TOK)
    for p in prompts():
        out = run(engine, [p], [SamplingParams(max_new_tokens=20, temperature=0, ignore_eos=True)])[0]
        ref = model.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                             max_new_tokens=20, do_sample=False, eos_token_id=None, pad_token_id=TOK.pad_token_id)
        assert out.token_ids == ref[0, len(p):].tolist()


def test_logprobs_are_the_models_at_the_sampling_temperature():
    model = tiny()
    p = prompts(1)[0]
    out = run(DecodeEngine(model, TOK), [p], [SamplingParams(max_new_tokens=10, temperature=0.8, seed=5,
                                                             ignore_eos=True)])[0]
    with torch.no_grad():
        logits = model(torch.tensor([p + out.token_ids])).logits[0, len(p) - 1:-1].float() / 0.8
    ref = torch.log_softmax(logits, -1).gather(1, torch.tensor(out.token_ids).unsqueeze(1)).squeeze(1)
    assert torch.allclose(torch.tensor(out.logprobs), ref, atol=1e-4)


def test_a_rows_tokens_do_not_depend_on_its_batch_or_sync_cadence():
    model = tiny()
    ps = prompts()
    params = [SamplingParams(max_new_tokens=30, temperature=1.0, seed=11 + i) for i in range(4)]
    together = run(DecodeEngine(model, TOK, sync_every=8), ps, params)
    every_step = run(DecodeEngine(model, TOK, sync_every=1), ps, params)
    for i, (p, q) in enumerate(zip(ps, params)):
        alone = run(DecodeEngine(model, TOK, sync_every=3), [p], [q])[0]
        assert together[i].token_ids == alone.token_ids == every_step[i].token_ids
        assert together[i].finish_reason == alone.finish_reason


def test_shared_prompts_prefill_once_and_match_separate_prefills():
    model = tiny()
    p = prompts(1)[0]
    params = [SamplingParams(max_new_tokens=16, temperature=1.0, seed=s, ignore_eos=True) for s in range(4)]
    group = run(DecodeEngine(model, TOK), [p] * 4, params)  # one distinct prompt, four rows
    for out, q in zip(group, params):
        assert out.token_ids == run(DecodeEngine(model, TOK), [p], [q])[0].token_ids
    assert len({tuple(o.token_ids) for o in group}) == 4  # different seeds, different samples


# ---- the sampler --------------------------------------------------------------------------
def test_uniforms_are_deterministic_and_spread():
    seeds = torch.arange(2000, dtype=torch.long)
    u = uniforms(seeds, torch.zeros_like(seeds))
    assert torch.equal(u, uniforms(seeds, torch.zeros_like(seeds)))
    assert bool(((u > 0) & (u < 1)).all()) and abs(float(u.mean()) - 0.5) < 0.03
    assert not torch.equal(u, uniforms(seeds, torch.ones_like(seeds)))  # the counter moves the draw


@pytest.mark.parametrize("top_p", [1.0, 0.6])
def test_samples_follow_the_distribution(top_p):
    torch.manual_seed(0)
    logits = torch.randn(1, 12) * 1.5
    n = 20000
    flags = SamplerFlags(any_top_p=top_p < 1, all_greedy=False, top_k=0)
    tokens, lps, _, _ = sample(logits.expand(n, 12), torch.full((n,), 0.9), torch.full((n,), top_p),
                               torch.arange(n, dtype=torch.long) * 7919, torch.zeros(n, dtype=torch.long), flags)
    probs = torch.softmax(logits[0] / 0.9, -1)
    kept = torch.ones(12, dtype=torch.bool)
    if top_p < 1:
        sorted_p, order = probs.sort(descending=True)
        kept = torch.zeros(12, dtype=torch.bool)
        kept[order[(sorted_p.cumsum(0) - sorted_p) < top_p]] = True
    target = torch.where(kept, probs, 0) / probs[kept].sum()
    counts = Counter(tokens.tolist())
    assert set(counts) <= set(torch.nonzero(kept).flatten().tolist())  # never outside the nucleus
    for t in range(12):
        if kept[t]:
            sd = math.sqrt(n * float(target[t]) * (1 - float(target[t])))
            assert abs(counts[t] - n * float(target[t])) < 5 * sd + 1
    # logprob convention: log_softmax(logits / T) over the full vocabulary, before top-p
    assert torch.allclose(lps, torch.log(probs)[tokens], atol=1e-5)


def test_top_logprobs_are_the_best_alternatives():
    model = tiny()
    out = run(DecodeEngine(model, TOK), prompts(1), [SamplingParams(max_new_tokens=5, temperature=1.0, seed=1,
                                                                    top_logprobs=3, ignore_eos=True)])[0]
    assert len(out.top_logprobs) == 5
    for (tok, lp), alts in zip(zip(out.token_ids, out.logprobs), out.top_logprobs):
        values = [v for _, v in alts]
        assert len(alts) == 3 and values == sorted(values, reverse=True) and values[0] >= lp - 1e-6


# ---- bookkeeping ------------------------------------------------------------------------------
def test_each_row_keeps_its_own_limit_and_stops():
    model = tiny()
    engine = DecodeEngine(model, TOK)
    ps = prompts(3)
    free = run(engine, ps[:1], [SamplingParams(max_new_tokens=40, temperature=1.0, seed=2, ignore_eos=True)])[0]
    stop_token = free.token_ids[9]
    first = free.token_ids.index(stop_token)
    text = TOK.decode(free.token_ids)
    outs = run(engine, [ps[0], ps[0], ps[0], ps[1]], [
        SamplingParams(max_new_tokens=40, temperature=1.0, seed=2, ignore_eos=True, stop_token_ids=(stop_token,)),
        SamplingParams(max_new_tokens=40, temperature=1.0, seed=2, ignore_eos=True, stop=(text[20:23],)),
        SamplingParams(max_new_tokens=7, temperature=1.0, seed=2, ignore_eos=True),
        SamplingParams(max_new_tokens=0, temperature=1.0)])
    assert outs[0].token_ids == free.token_ids[:first + 1]  # the stop token is the last token
    assert (outs[0].finish_reason, outs[0].stop_reason) == ("stop", stop_token)
    assert outs[1].finish_reason == "stop" and outs[1].stop_reason == text[20:23]
    assert text[20:23] in TOK.decode(outs[1].token_ids) and outs[1].token_ids == free.token_ids[:len(outs[1].token_ids)]
    assert text[20:23] not in TOK.decode(outs[1].token_ids[:-1])  # cut at the token that completed it
    assert outs[2].token_ids == free.token_ids[:7] and outs[2].finish_reason == "length"
    assert outs[3].token_ids == [] and outs[3].finish_reason == "length"


def test_eos_ends_a_row_unless_ignored():
    model = tiny()
    engine = DecodeEngine(model, TOK, stop_token_ids=[])
    free = run(engine, prompts(1), [SamplingParams(max_new_tokens=30, temperature=1.0, seed=4)])[0]
    eos_like = free.token_ids[5]
    engine.stop_token_ids = [eos_like]  # pretend that token is the model's end of turn
    ended = run(engine, prompts(1), [SamplingParams(max_new_tokens=30, temperature=1.0, seed=4)])[0]
    assert ended.token_ids[-1] == eos_like and (ended.finish_reason, ended.stop_reason) == ("stop", None)
    kept = run(engine, prompts(1), [SamplingParams(max_new_tokens=30, temperature=1.0, seed=4, ignore_eos=True)])[0]
    assert kept.token_ids == free.token_ids and kept.finish_reason == "length"


def test_versions_change_between_steps_when_weights_do():
    """The trainer's in-flight swap: a hook between two decode steps loads new weights and bumps the
    version; tokens before carry the old version, tokens after the new one, and the tokens after
    are sampled by the new weights (the keys/values already cached stay the old weights', as in
    vLLM's pause mode=keep)."""
    model, other = tiny(0), tiny(1)
    version = {"v": 3}
    engine = DecodeEngine(model, TOK, version=lambda: version["v"])
    p = prompts(1)[0]
    params = SamplingParams(max_new_tokens=20, temperature=1.0, seed=8, ignore_eos=True)

    def swap(step: int) -> None:
        if step == 8:
            with engine.lock:
                model.load_state_dict(other.state_dict())
                version["v"] = 4

    out = run(engine, [p], [params], on_step=swap)[0]
    assert out.versions == [3] * 8 + [4] * 12
    before = run(DecodeEngine(tiny(0), TOK), [p], [params])[0]
    assert out.token_ids[:8] == before.token_ids[:8]
    with torch.no_grad():  # what the old weights give these tokens: the first 8 logprobs, not the rest
        logits = tiny(0)(torch.tensor([p + out.token_ids])).logits[0, len(p) - 1:-1].float()
    old = torch.log_softmax(logits, -1).gather(1, torch.tensor(out.token_ids).unsqueeze(1)).squeeze(1)
    got = torch.tensor(out.logprobs)
    assert torch.allclose(got[:8], old[:8], atol=1e-4)
    assert (got[8:] - old[8:]).abs().min() > 1e-3


def test_weights_loaded_in_place_reach_the_next_batch():
    model = tiny(0)
    engine = DecodeEngine(model, TOK)
    params = [SamplingParams(max_new_tokens=12, temperature=0, ignore_eos=True)]
    before = run(engine, prompts(1), params)[0]
    engine.load_weights(dict(tiny(1).named_parameters()), version="9")
    after = run(engine, prompts(1), params)[0]
    assert after.token_ids == run(DecodeEngine(tiny(1), TOK), prompts(1), params)[0].token_ids != before.token_ids
    assert engine.weight_version == "9" and after.versions == ["9"] * 12


def test_prompt_logprobs_score_the_prompt():
    model = tiny()
    p = prompts(1)[0]
    out = run(DecodeEngine(model, TOK), [p], [SamplingParams(max_new_tokens=0, prompt_logprobs=2)])[0]
    assert out.token_ids == [] and out.prompt_logprobs[0] is None and len(out.prompt_logprobs) == len(p)
    with torch.no_grad():
        ref = torch.log_softmax(model(torch.tensor([p])).logits[0, :-1].float(), -1)
    for j, entry in enumerate(out.prompt_logprobs[1:]):
        lp, rank = entry[p[j + 1]]
        assert abs(lp - float(ref[j, p[j + 1]])) < 1e-4
        assert rank == int((ref[j] > ref[j, p[j + 1]]).sum()) + 1
        assert len(entry) <= 3


def test_a_prefill_in_chunks_of_rows_equals_one_prefill(monkeypatch):
    import servers.model.decoder as decoder

    ps = prompts()
    params = [SamplingParams(max_new_tokens=12, temperature=1.0, seed=20 + i, ignore_eos=True) for i in range(4)]
    whole = run(DecodeEngine(tiny(), TOK), ps, params)
    monkeypatch.setattr(decoder, "PREFILL_SCORES", 1)  # one row per chunk
    chunked = run(DecodeEngine(tiny(), TOK), ps, params)
    for a, b in zip(whole, chunked):
        assert a.token_ids == b.token_ids and max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < 1e-5
