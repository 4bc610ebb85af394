"""The stages' pretrained-model path (what the paper sweeps use for Qwen / Llama), on a
checkpoint in the real HF layout built offline (tests/support/hf_fixture.py): pretrain registers it
without copying, filter_hard and evaluate render prompts with its chat template and stop on
its stop ids. A hub id that is not in the offline cache fails with one line."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from components import lineage
from components.data.prompting import encode_prompt
from components.data.schema import DataError, read_problems
from components.hf_models import is_tiny_tokenizer, load_tokenizer_any, resolve_model, stop_token_ids
from hf_fixture import build_chat_model_dir

SMALL_DATA = {"pretrain_size": 8, "pool_size": 6, "heldout_pool_size": 4, "probe_per_level": 0}


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return tmp_path


def test_tokenizer_detection_and_stop_ids(tmp_path):
    from components.policy.model import build_policy, save_policy, TinyPolicyConfig
    from components.policy.tokenizer import build_tokenizer

    chat = build_chat_model_dir(tmp_path / "chat")
    tiny_tok = build_tokenizer()
    tiny = save_policy(build_policy(TinyPolicyConfig(layers=1, hidden=16, heads=2, kv_heads=2, ffn=16), tiny_tok),
                       tiny_tok, tmp_path / "tiny")
    assert is_tiny_tokenizer(tiny) and not is_tiny_tokenizer(chat)
    tok = load_tokenizer_any(chat)
    assert type(tok).__name__ == "Qwen2Tokenizer"          # what AutoTokenizer gives a Qwen2 checkpoint
    assert tok.padding_side == "left" and tok.eos_token == "<|im_end|>"
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(str(chat))
    ids = stop_token_ids(model, tok)
    assert ids == sorted({tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")})
    assert load_tokenizer_any(tiny).pad_token_id == 0


def test_hf_engine_stops_on_every_generation_eos(tmp_path):
    """A sample ends on <|endoftext|> too, not only on the tokenizer's eos."""
    import torch

    from components.engine.base import Request, SamplingParams
    from components.engine.hf import HFEngine
    from components.policy.model import load_policy

    model, tok = load_policy(build_chat_model_dir(tmp_path / "chat"))
    end = tok.convert_tokens_to_ids("<|endoftext|>")
    # make <|endoftext|> (not the tokenizer's eos) by far the likeliest next token
    model.lm_head.register_forward_hook(lambda m, i, o: o.index_fill(-1, torch.tensor([end]), 50.0))
    out = HFEngine(model, tok).generate([Request(tuple(tok.encode("hi")), n=3)], SamplingParams(1.0, 1.0, 20, seed=0))
    assert [c.token_ids for c in out[0]] == [(end,)] * 3
    assert all(c.finish_reason == "stop" for c in out[0])


def test_pretrained_model_through_the_stages_with_chat_template(home):
    src = build_chat_model_dir(home / "my-model")
    data = lineage.run_stage("prepare_data", SMALL_DATA, {}, sweep="hf")
    pre = lineage.run_stage("pretrain", {"model": str(src)}, {"data": data["uri"]}, sweep="hf")
    art = Path(pre["uri"])
    ref = json.loads((art / "model_ref.json").read_text())
    assert ref["path"] == str(src.resolve()) and "model.safetensors" in ref["files"]
    assert not (art / "model").exists()                      # registered, not copied
    assert ref["files"]["config.json"]["sha256"]

    hard = lineage.run_stage("filter_hard", {"k": 4, "c": 1, "round_size": 4, "max_new_tokens": 8,
                                             "prompt_template": "chat"},
                             {"data": data["uri"], "model": pre["uri"]}, sweep="hf")
    # every prompt went in through the chat template: the metered prompt tokens are exactly
    # the chat-rendered lengths (one round of 4 samples; each context prefilled once)
    tok = load_tokenizer_any(src)
    pools = [read_problems(Path(data["uri"]) / f) for f in ("train_pool.jsonl", "heldout_pool.jsonl")]
    rows = json.loads((Path(hard["uri"]) / "tokens.json").read_text())
    metered = sum(r["prompt_tokens"] for r in rows if r["purpose"] == "filter")
    assert metered == sum(len(encode_prompt(p, tok, "chat")) for pool in pools for p in pool)
    assert metered > sum(len(tok.encode(p.prompt)) for pool in pools for p in pool)

    ev = lineage.run_stage("evaluate", {"protocol": "vigor", "prompt_template": "chat", "max_new_tokens": 8,
                                        "label": "chat-base"},
                           {"model": pre["uri"], "hard": hard["uri"]}, sweep="hf")
    res = json.loads((Path(ev["uri"]) / "results.json").read_text())
    held = read_problems(Path(hard["uri"]) / "heldout.jsonl")
    assert res["samples_per_problem"] == 1 and res["problems"] == len(held)   # VIGOR protocol: 1 sample
    assert set(res["pass_at_k"]) == {"1"} and res["method"] == "base"
    # a teacher's evaluation (a pretrain output too) is its own tables row and its own cache entry
    ev2 = lineage.run_stage("evaluate", {"protocol": "vigor", "prompt_template": "chat", "max_new_tokens": 8,
                                         "label": "chat-teacher-t", "base_name": "teacher-t"},
                            {"model": pre["uri"], "hard": hard["uri"]}, sweep="hf")
    res2 = json.loads((Path(ev2["uri"]) / "results.json").read_text())
    assert res2["method"] == "teacher-t" and ev2["cache_key"] != ev["cache_key"]
    assert res2["mean_at_k"] == res["mean_at_k"]          # same model, same sampling seeds


def test_hub_id_offline_and_not_cached_is_one_line(home):
    with pytest.raises(DataError) as e:
        resolve_model("Qwen/Qwen2.5-7B-Instruct")
    msg = str(e.value)
    assert "\n" not in msg and "Qwen/Qwen2.5-7B-Instruct" in msg and "not in the local Hugging Face cache" in msg
    with pytest.raises(DataError, match="neither an existing directory nor a hub id"):
        resolve_model("no-such-dir")
    (home / "empty").mkdir()
    with pytest.raises(DataError, match="config.json missing"):
        resolve_model(str(home / "empty"))


def test_evaluate_protocol_presets_and_explicit_values_win():
    from components.stages.evaluate import PROTOCOLS, Params

    for name, preset in PROTOCOLS.items():
        p = Params(protocol=name)
        assert {k: getattr(p, k) for k in preset} == preset
    assert Params(protocol="vsr").samples_per_seed * len(Params(protocol="vsr").seeds) == 16
    assert Params(protocol="vigor", top_p=0.95).top_p == 0.95
    # no protocol: the dump (and so every existing cache key) is unchanged
    assert "protocol" not in Params().model_dump()


OPENR1_BASE = {"solution": "s", "problem_type": "Algebra", "question_type": "math-word-problem",
               "correctness_llama": None, "messages": [], "correctness_count": 1, "source": "olympiads"}


def _openr1_rows(n):
    rows = []
    for i in range(n):
        ok = i % 3 != 0                  # every third problem has no verified, complete R1 trace
        rows.append({**OPENR1_BASE, "problem": f"What is {i} plus {i}?", "answer": str(2 * i), "uuid": f"u{i}",
                     "generations": [f"Add: {i}+{i}={2 * i}. \\boxed{{{2 * i}}}", "guess \\boxed{0}"],
                     "correctness_math_verify": [ok, False], "is_reasoning_complete": [True, True],
                     "finish_reasons": ["stop", "stop"]})
    return rows


def test_openr1_filter_seed_and_train_with_a_pretrained_chat_model(home):
    """The VSR data path on OpenR1-schema data with a chat model: pass@k <= c filtering,
    one verified R1 trace per kept prompt (the SFT set is exactly those), then two VSR
    updates with chat-rendered prompts and replayed expert prefixes."""
    src = home / "openr1.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in _openr1_rows(12)))
    model = build_chat_model_dir(home / "chat")
    data = lineage.run_stage("prepare_data", {"source": "openr1", "path": str(src), "heldout_fraction": 0.25},
                             {}, sweep="hf")
    pre = lineage.run_stage("pretrain", {"model": str(model)}, {"data": data["uri"]}, sweep="hf")
    hard = lineage.run_stage("filter_hard", {"k": 4, "c": 1, "max_new_tokens": 6, "prompt_template": "chat"},
                             {"data": data["uri"], "model": pre["uri"]}, sweep="hf")
    kept = read_problems(Path(hard["uri"]) / "train.jsonl")
    assert kept and all(p.meta["base_successes"] <= 1 for p in kept)
    seeded = lineage.run_stage("seed_prefixes", {}, {"hard": hard["uri"]}, sweep="hf")
    sft = read_problems(Path(seeded["uri"]) / "sft.jsonl")
    verified = {p.uid for p in kept if p.traces}
    assert {p.uid for p in sft} == verified
    assert all(len(p.traces) == 1 and "\\boxed{0}" not in p.traces[0] for p in sft)

    train = lineage.run_stage("train", {"method": "vsr", "steps": 2, "batch_prompts": 4, "max_new_tokens": 6,
                                        "prompt_template": "chat", "val_size": 0, "ckpt_every": 1,
                                        "method_config": {"n": 4, "rho": 0.5}},
                              {"model": pre["uri"], "hard": hard["uri"], "prefixes": seeded["uri"]}, sweep="hf")
    out = Path(train["uri"])
    hist = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [h for h in hist if "reward/mean" in h]
    assert [h["step"] for h in steps] == [1, 2]
    # the random policy never solves a prompt: VSR fills its groups from the expert prefixes
    assert any(h["groups/replay_frac"] > 0 for h in steps)
    tok = load_tokenizer_any(out / "model")
    assert type(tok).__name__ == "Qwen2Tokenizer"            # the trained model keeps its tokenizer


def test_engine_param_keeps_old_keys_and_vllm_fails_with_one_line_here(tmp_path):
    from components.engine.base import TokenMeter
    from components.stages import evaluate, filter_hard
    from components.stages.common import open_engine

    for mod in (evaluate, filter_hard):
        assert "engine" not in mod.Params().model_dump()            # default hf: cache keys unchanged
        assert mod.Params(engine="vllm").model_dump()["engine"] == "vllm"
    model = build_chat_model_dir(tmp_path / "chat")
    engine, tok = open_engine(model, TokenMeter(), "hf")
    assert type(engine).__name__ == "HFEngine" and tok.eos_token == "<|im_end|>"
    with pytest.raises(ImportError) as e:                               # no vllm in the CPU environment
        open_engine(model, TokenMeter(), "vllm")
    assert "vllm is not installed" in str(e.value) and "\n" not in str(e.value)


def test_gguf_specs_fail_in_one_line_when_the_file_is_not_there(tmp_path):
    """A GGUF model is named by a ``.gguf`` path or ``pkg:<distribution>`` (SmolLM2 itself runs
    in tests/scale, where its wheel is installed)."""
    from components.hf_models import gguf_source

    assert gguf_source("Qwen/Qwen2.5-7B-Instruct") is None and gguf_source(str(tmp_path)) is None
    for spec, msg in [(str(tmp_path / "m.gguf"), "no such GGUF file"),
                      ("pkg:no-such-dist-rlvr", "Python package 'no-such-dist-rlvr' is not installed"),
                      ("pkg:pytest", "package ships 0 .gguf files")]:
        with pytest.raises(DataError) as e:
            resolve_model(spec)
        assert msg in str(e.value) and "\n" not in str(e.value)
