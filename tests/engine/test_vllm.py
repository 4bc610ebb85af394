"""The vLLM engine without vLLM: our params -> vLLM kwargs, vLLM-shaped outputs -> our
Completions and meter rows, request bookkeeping (n = 0, order), and the missing-package error."""
from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import pytest

from components.engine import vllm as ve
from components.engine.base import Completion, Request, RolloutEngine, SamplingParams, TokenMeter


def _ro(prompt_ids, outs):
    """A vLLM ``RequestOutput``'s attributes: ``.prompt_token_ids`` and ``.outputs[i]`` with
    ``.text / .token_ids / .finish_reason`` (a ``CompletionOutput``)."""
    return SimpleNamespace(prompt_token_ids=list(prompt_ids),
                           outputs=[SimpleNamespace(text=t, token_ids=list(ids), finish_reason=fr) for t, ids, fr in outs])


def test_sampling_kwargs_map_our_params():
    p = SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=32, seed=5)
    kw = ve.sampling_kwargs(p, n=8, index=3, stop=["</s>"], stop_token_ids=[1])
    assert {k: kw[k] for k in ("n", "temperature", "top_p", "max_tokens", "stop", "stop_token_ids")} == \
           {"n": 8, "temperature": 0.7, "top_p": 0.9, "max_tokens": 32, "stop": ["</s>"], "stop_token_ids": [1]}
    # per-request seed: a function of (seed, request index), different across requests
    assert kw["seed"] == ve.request_seed(5, 3) == ve.sampling_kwargs(p, 8, 3)["seed"]
    assert len({ve.sampling_kwargs(p, 1, i)["seed"] for i in range(16)}) == 16
    assert ve.sampling_kwargs(p, 1, 0)["seed"] != ve.sampling_kwargs(SamplingParams(seed=6), 1, 0)["seed"]
    free = ve.sampling_kwargs(SamplingParams(), n=1)
    assert "seed" not in free and "stop" not in free and "stop_token_ids" not in free
    for bad, msg in [(SamplingParams(temperature=-1), "temperature"), (SamplingParams(top_p=0), "top_p"),
                     (SamplingParams(max_new_tokens=0), "max_new_tokens")]:
        with pytest.raises(ValueError, match=msg):
            ve.sampling_kwargs(bad, n=1)


def test_prompt_input_is_the_context_token_ids():
    r = Request(context_ids=(5, 6, 7, 8), n=2, prompt_len=2)   # prompt + replayed prefix, as is
    assert ve.prompt_input(r) == {"prompt_token_ids": [5, 6, 7, 8]}


def test_outputs_become_completions_and_meter_counts():
    reqs = [Request((1, 2, 3), n=2), Request((4,), n=0), Request((5, 6), n=1)]
    outs = [_ro([1, 2, 3], [("ab", [10, 11], "stop"), ("abc", [10, 11, 12], "length")]),
            _ro([5, 6], [("x", [13], "abort")])]
    comps = ve.to_completions(outs)
    assert comps == [[Completion((10, 11), "ab", "stop"), Completion((10, 11, 12), "abc", "length")],
                     [Completion((13,), "x", "stop")]]
    live = [reqs[0], reqs[2]]
    assert ve.meter_counts(live, outs) == {"prompt_tokens": 5, "generated_tokens": 6, "sequences": 3,
                                           "requests": 2}


def test_generate_keeps_request_order_skips_n0_and_meters():
    """``VLLMEngine.generate``'s bookkeeping on a stand-in for ``vllm.LLM`` that answers each
    prompt with its ids reversed (the default environment has no vLLM; the real engine runs in
    tests/scale/test_vllm_cpu.py)."""
    calls = []

    class FakeLLM:
        def generate(self, prompts, sps, use_tqdm=False):
            calls.append((prompts, sps))
            return [_ro(p["prompt_token_ids"], [(f"s{j}", p["prompt_token_ids"][::-1][: j + 1], "stop")
                                                for j in range(sp["n"])]) for p, sp in zip(prompts, sps)]

    eng = object.__new__(ve.VLLMEngine)
    eng._vllm = SimpleNamespace(SamplingParams=lambda **kw: kw)
    eng.llm, eng.tokenizer, eng.meter, eng.step_budget = FakeLLM(), None, TokenMeter(), 1_000
    eng.stop, eng.stop_token_ids = ("\n\n",), (1,)
    assert isinstance(eng, RolloutEngine)
    reqs = [Request((1, 2, 3), n=2), Request((9,), n=0), Request((4, 5), n=3)]
    out = eng.generate(reqs, SamplingParams(max_new_tokens=4, seed=1), purpose="eval")
    assert [[c.token_ids for c in o] for o in out] == [[(3,), (3, 2)], [], [(5,), (5, 4), (5, 4)]]
    (prompts, sps), = calls
    assert prompts == [{"prompt_token_ids": [1, 2, 3]}, {"prompt_token_ids": [4, 5]}]
    assert [sp["seed"] for sp in sps] == [ve.request_seed(1, 0), ve.request_seed(1, 2)]   # index in the call
    assert all(sp["stop"] == ["\n\n"] and sp["stop_token_ids"] == [1] for sp in sps)
    assert eng.meter.totals("eval") == {"prompt_tokens": 5, "generated_tokens": 8, "sequences": 5, "requests": 3}
    with pytest.raises(ValueError, match="unknown token purpose"):
        eng.generate(reqs, SamplingParams(), purpose="nope")


def test_step_batches_keep_each_piece_within_one_steps_budget():
    reqs = [Request((1,) * 10, n=4), Request((2,) * 30, n=1), Request((3,), n=0), Request((4,) * 20, n=2)]
    # prompt tokens x n: 40, 30, 0, 40
    assert ve.step_batches(reqs, [0, 1, 3], budget=80) == [[0, 1], [3]]
    assert ve.step_batches(reqs, [0, 1, 3], budget=200) == [[0, 1, 3]]
    with pytest.raises(ValueError, match="request 0: 10 prompt tokens x n=4 exceeds max_num_batched_tokens=39"):
        ve.step_batches(reqs, [0], budget=39)


def test_constructing_without_vllm_names_the_package_and_the_image():
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here (the scale environment): nothing to check")
    with pytest.raises(ImportError) as e:
        ve.VLLMEngine("/some/model")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("vllm is not installed") and "trainer image" in msg
