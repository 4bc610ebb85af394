"""HFEngine: the CPU rollout engine's own sampling loop against model.generate."""
from __future__ import annotations

import pytest
import torch

from components.engine.base import Request, RolloutEngine, SamplingParams, TokenMeter
from components.engine.hf import HFEngine
from components.policy.model import TinyPolicyConfig, build_policy
from components.policy.tokenizer import build_tokenizer

torch.set_num_threads(2)
PROMPTS = ["Compute 1+2.", "Compute 42+59-77+97-99.", "C", "Compute 12+13. 12+13=25. ", "Compute 5-3+2."]


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def _sharp_model(tok, seed=0):
    """A random tiny model with large weights: peaked, varied next-token distributions, so
    greedy outputs differ across contexts and EOS shows up sometimes."""
    m = build_policy(TinyPolicyConfig(layers=2, hidden=64, heads=4, kv_heads=2, ffn=128), tok, seed=seed)
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() > 1:
                p.mul_(20)
    return m.eval()


@pytest.fixture(scope="module")
def model(tok):
    return _sharp_model(tok)


def _eos_prone_model(tok):
    """EOS is likely at every step (its logit boosted through the bias-free tied head)."""
    m = _sharp_model(tok, seed=1)
    with torch.no_grad():
        m.model.embed_tokens.weight[tok.eos_token_id] *= 0.0
        m.model.embed_tokens.weight[tok.eos_token_id] += m.model.norm.weight.sign() * 0.6
    return m


def _reqs(tok, n=1, prompts=PROMPTS):
    return [Request(tuple(tok.encode(p, add_special_tokens=False)), n=n, tag=p) for p in prompts]


def test_implements_protocol(model, tok):
    eng = HFEngine(model, tok)
    assert isinstance(eng, RolloutEngine) and isinstance(eng.meter, TokenMeter)


def test_counts_and_n_zero(model, tok):
    eng = HFEngine(model, tok)
    reqs = [Request((5, 6, 7), n=3), Request((8,), n=0), Request((9, 10), n=1)]
    out = eng.generate(reqs, SamplingParams(max_new_tokens=5, seed=0))
    assert [len(o) for o in out] == [3, 0, 1]
    for c in out[0] + out[2]:
        assert 1 <= len(c.token_ids) <= 5
    assert eng.generate([], SamplingParams(seed=0)) == []
    assert eng.generate([Request((5,), n=0)], SamplingParams(seed=0)) == [[]]


def test_greedy_matches_model_generate_with_left_padding(model, tok):
    eng = HFEngine(model, tok, compact_fraction=0.0)   # compact at every finish: hardest case
    reqs = _reqs(tok)
    out = eng.generate(reqs, SamplingParams(temperature=0.0, max_new_tokens=30))
    ctxs = [list(r.context_ids) for r in reqs]
    enc = tok.pad([{"input_ids": c} for c in ctxs], return_tensors="pt", padding_side="left")
    with torch.no_grad():
        ref = model.generate(**enc, do_sample=False, max_new_tokens=30)[:, enc["input_ids"].shape[1]:]
    for o, r in zip(out, ref.tolist()):
        if tok.eos_token_id in r:
            r = r[:r.index(tok.eos_token_id) + 1]
        assert list(o[0].token_ids) == r
    assert len({o[0].token_ids for o in out}) > 1   # the model is not degenerate


def test_eos_stops_and_max_new_tokens(tok):
    m = _eos_prone_model(tok)
    eng = HFEngine(m, tok)
    out = eng.generate(_reqs(tok, n=16), SamplingParams(max_new_tokens=12, seed=0))
    comps = [c for cs in out for c in cs]
    stops = [c for c in comps if c.finish_reason == "stop"]
    lengths = [c for c in comps if c.finish_reason == "length"]
    assert stops and lengths, "test model should produce both outcomes"
    for c in stops:
        assert c.token_ids[-1] == tok.eos_token_id and tok.eos_token_id not in c.token_ids[:-1]
        assert c.text == tok.decode(c.token_ids, skip_special_tokens=True)
    for c in lengths:
        assert len(c.token_ids) == 12 and tok.eos_token_id not in c.token_ids
    assert len({len(c.token_ids) for c in stops}) > 1   # finished at different steps


def test_seed_determinism_and_chunking(model, tok):
    eng = HFEngine(model, tok)
    p = SamplingParams(temperature=1.0, max_new_tokens=20, seed=7)
    a = eng.generate(_reqs(tok, n=4), p)
    b = eng.generate(_reqs(tok, n=4), p)
    c = eng.generate(_reqs(tok, n=4), SamplingParams(temperature=1.0, max_new_tokens=20, seed=8))
    assert a == b
    assert a != c
    assert len({x.token_ids for x in a[1]}) > 1   # the n samples of one request differ
    small = HFEngine(model, tok, max_batch_sequences=3)   # splits requests across chunks
    d = small.generate(_reqs(tok, n=4), p)
    assert [len(x) for x in d] == [4] * len(PROMPTS)
    assert d == small.generate(_reqs(tok, n=4), p)


def test_no_global_rng_use_and_train_state_restored(model, tok):
    eng = HFEngine(model, tok)
    model.train()
    torch.manual_seed(0)
    expected = torch.rand(2)
    torch.manual_seed(0)
    eng.generate(_reqs(tok, n=2), SamplingParams(max_new_tokens=5, seed=1))
    eng.generate(_reqs(tok, n=2), SamplingParams(max_new_tokens=5))          # unseeded too
    assert torch.equal(torch.rand(2), expected)
    assert model.training
    model.eval()


def test_top_p_tiny_is_greedy(model, tok):
    eng = HFEngine(model, tok)
    greedy = eng.generate(_reqs(tok), SamplingParams(temperature=0.0, max_new_tokens=15))
    nucleus = eng.generate(_reqs(tok, n=3), SamplingParams(temperature=1.0, top_p=1e-6, max_new_tokens=15, seed=3))
    for g, ns in zip(greedy, nucleus):
        assert all(x.token_ids == g[0].token_ids for x in ns)


def test_meter_totals_match(model, tok):
    meter = TokenMeter(sweep="t")
    eng = HFEngine(model, tok, meter=meter)
    reqs = _reqs(tok, n=3) + [Request((4, 5), n=0)]
    with meter.tagged(step=2):
        out = eng.generate(reqs, SamplingParams(max_new_tokens=9, seed=0), purpose="filter")
    assert len(meter.records) == 1
    rec = meter.records[0]
    assert rec.purpose == "filter" and rec.tags == {"sweep": "t", "step": 2}
    assert rec.prompt_tokens == sum(len(p) for p in PROMPTS)    # each context once; n=0 not run
    assert rec.generated_tokens == sum(len(c.token_ids) for cs in out for c in cs)
    assert rec.sequences == 3 * len(PROMPTS) and rec.requests == len(reqs)
    with pytest.raises(ValueError):
        eng.generate(reqs, SamplingParams(), purpose="nonsense")


def test_mixed_context_lengths_match_single_runs(model, tok):
    """Batching (left padding, fan-out, compaction, trimming) does not change greedy output."""
    eng = HFEngine(model, tok, compact_fraction=0.0)
    long_ctx = "Compute 42+59-77+97-99. 42+59=101. 101-77=24. 24+97=121. "
    prompts = ["C", long_ctx, "Compute 3+4.", long_ctx[:30]]
    p = SamplingParams(temperature=0.0, max_new_tokens=25)
    together = eng.generate(_reqs(tok, n=2, prompts=prompts), p)
    for prompt, got in zip(prompts, together):
        alone = eng.generate(_reqs(tok, n=1, prompts=[prompt]), p)[0][0]
        assert got[0] == alone and got[1] == alone


def test_max_new_tokens_zero(model, tok):
    out = HFEngine(model, tok).generate(_reqs(tok, n=2), SamplingParams(max_new_tokens=0))
    assert all(c.token_ids == () and c.finish_reason == "length" for cs in out for c in cs)


def test_reserved_cache_equals_transformers_dynamic_cache(model, tok, monkeypatch):
    """The reserved-capacity KV layer (in-place writes, geometric growth, re-reserve after
    compaction and left-padding trims) samples exactly what DynamicCache's torch.cat does."""
    import components.engine.hf as hf
    from transformers.cache_utils import DynamicLayer

    eos_model = _eos_prone_model(tok)          # rows finish early: compaction + trimming happen
    p = SamplingParams(temperature=1.0, max_new_tokens=40, seed=11)
    for m in (model, eos_model):
        ours = HFEngine(m, tok, compact_fraction=0.05).generate(_reqs(tok, n=6), p)
        monkeypatch.setattr(hf, "_ReservedLayer", DynamicLayer)
        ref = HFEngine(m, tok, compact_fraction=0.05).generate(_reqs(tok, n=6), p)
        monkeypatch.undo()
        assert ours == ref
    assert any(c.finish_reason == "stop" for cs in ours for c in cs)   # the eos model did retire rows


def test_buckets_by_context_length_results_in_request_order(model, tok):
    """A long prompt gets its own bucket; completions come back in request order and equal
    the one-padded-batch run (greedy), with the same meter counts."""
    long_ctx = "Compute 42+59-77+97-99. 42+59=101. 101-77=24. 24+97=121. " * 3
    prompts = [long_ctx, "C", "Compute 3+4.", long_ctx[:40], "Compute 1+2."]
    reqs = _reqs(tok, n=16, prompts=prompts)   # enough rows that padding them costs more than a bucket
    bucketed = HFEngine(model, tok)
    chunks = bucketed._chunks(reqs, 20)
    assert len(chunks) > 1 and [ri for ri, _ in chunks[-1]] == [0]      # the long prompt alone
    widths = [max(len(reqs[ri].context_ids) for ri, _ in c) for c in chunks]
    assert widths == sorted(widths)
    plain = HFEngine(model, tok, bucket=False)
    assert len(plain._chunks(reqs, 20)) == 1
    p = SamplingParams(temperature=0.0, max_new_tokens=20)
    a, b = bucketed.generate(reqs, p), plain.generate(reqs, p)
    assert a == b
    for prompt, got in zip(prompts, a):
        assert got[0] == bucketed.generate(_reqs(tok, prompts=[prompt]), p)[0][0]
    assert bucketed.meter.records[0].prompt_tokens == plain.meter.records[0].prompt_tokens
    assert bucketed.meter.records[0].generated_tokens == plain.meter.records[0].generated_tokens


def test_bucket_row_limit_and_split_requests(model, tok):
    eng = HFEngine(model, tok, max_batch_sequences=4)
    reqs = _reqs(tok, n=3) + [Request((5, 6), n=9)]
    chunks = eng._chunks(reqs, 10)
    assert all(sum(k for _, k in c) <= 4 for c in chunks)
    got = {}
    for c in chunks:
        for ri, k in c:
            got[ri] = got.get(ri, 0) + k
    assert got == {i: r.n for i, r in enumerate(reqs)}
    out = eng.generate(reqs, SamplingParams(max_new_tokens=6, seed=0))
    assert [len(o) for o in out] == [r.n for r in reqs]


def test_engine_attention_only_inside_a_call(model, tok):
    """The engine's GQA attention equals the model's sdpa (greedy ids), and the model is back
    on its own implementation after a call, also after one that raised."""
    from components.engine.attention import ENGINE_ATTENTION

    impl = model.config._attn_implementation
    p = SamplingParams(temperature=0.0, max_new_tokens=25)
    ours = HFEngine(model, tok).generate(_reqs(tok, n=2), p)
    assert model.config._attn_implementation == impl != ENGINE_ATTENTION
    assert ours == HFEngine(model, tok, attention="model").generate(_reqs(tok, n=2), p)
    with pytest.raises(ValueError):
        HFEngine(model, tok).generate([Request((5,), n=1)], SamplingParams(max_new_tokens=-1))
    assert model.config._attn_implementation == impl


def test_prefill_in_length_groups_equals_one_padded_prefill(model, tok):
    """Contexts of very different lengths are prefilled in separate groups and copied into one
    left-padded cache: the last-position logits and every non-padding key/value equal the one
    padded prefill's, and the padding columns are zeros (finite under the mask)."""
    import components.engine.hf as hf

    ctxs = [tuple(tok.encode(p, add_special_tokens=False)) for p in
            ["C", "Compute 1+2.", "Compute 42+59-77+97-99. 42+59=101. 101-77=24. 24+97=121. " * 4]]
    grouped, plain = HFEngine(model, tok), HFEngine(model, tok, bucket=False)
    lens = [len(c) for c in ctxs]
    assert len(hf._cheapest_cuts(3, lambda i, j: grouped.cost.prefill(j - i, max(lens[i:j])))) > 1
    with torch.inference_mode():
        lg, cg, mg, pg = grouped._prefill(ctxs, torch.device("cpu"))
        lp, cp, mp, pp = plain._prefill(ctxs, torch.device("cpu"))
    assert torch.equal(mg, mp) and torch.equal(pg, pp)
    torch.testing.assert_close(lg, lp, atol=1e-4, rtol=1e-4)
    keep = mg.bool()[:, None, :, None]
    for a, b in zip(cg.layers, cp.layers):
        torch.testing.assert_close(a.keys * keep, b.keys * keep, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(a.values * keep, b.values * keep, atol=1e-4, rtol=1e-4)
        assert not a.keys.masked_select(~keep).any() and not a.values.masked_select(~keep).any()


def test_categorical_draws_follow_the_probabilities_and_never_a_zero():
    """The engine's sampler (inverse of the float64 CDF at a uniform): frequencies within
    binomial noise of the probabilities, masked (zero) entries never drawn, seeded draws
    repeat."""
    from components.engine.hf import _categorical

    g = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(40, generator=g) * 2, dim=-1)
    p[[0, 7, 39]] = 0.0                        # top-p's dropped tokens, also at both ends
    n = 200_000
    draws = _categorical(p.expand(n, -1), torch.Generator().manual_seed(1))
    freq = torch.bincount(draws, minlength=40).double() / n
    target = p.double() / p.sum()
    sd = (target * (1 - target) / n).sqrt()
    assert freq[[0, 7, 39]].sum() == 0
    assert ((freq - target).abs() <= 5 * sd + 1e-12).all(), (freq - target).abs().max()
    again = _categorical(p.expand(n, -1), torch.Generator().manual_seed(1))
    assert torch.equal(draws, again)
