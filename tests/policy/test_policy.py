"""The tiny policy: tokenizer, model build/save/load, pretraining."""
from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from components.data.synthetic import generate_problems
from components.policy.model import TinyPolicyConfig, build_policy, load_policy, save_policy
from components.policy.pretraining import collate_sft, cosine_lr, encode_sft_examples, pack_sft, pretrain_policy
from components.policy.tokenizer import CHARS, EOS, PAD, UNK, build_tokenizer, load_tokenizer, save_tokenizer

torch.set_num_threads(2)
SMALL = TinyPolicyConfig(layers=2, hidden=32, heads=2, kv_heads=2, ffn=64)
TEXTS = ["Compute 42+59-77+97-99.", " 42+59=101. 101-77=24. 24+97=121. 121-99=22. \\boxed{22}",
         " 12-59=-47. -47+30=-17. \\boxed{-17}", "Compute 1+2.\n\n  \\boxed{3}"]


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def test_vocab_and_special_ids(tok):
    assert tok.pad_token == PAD and tok.pad_token_id == 0
    assert tok.eos_token == EOS and tok.unk_token == UNK
    assert len({tok.pad_token_id, tok.eos_token_id, tok.unk_token_id}) == 3
    assert len(tok) == 3 + len(set(CHARS))


def test_one_token_per_character_and_roundtrip(tok):
    for s in TEXTS:
        ids = tok.encode(s, add_special_tokens=False)
        assert len(ids) == len(s)
        assert tok.unk_token_id not in ids
        assert tok.decode(ids) == s
        assert tok.decode(ids + [tok.eos_token_id, tok.pad_token_id], skip_special_tokens=True) == s
    # prefix of the text -> prefix of the ids (what cutting traces at step boundaries relies on)
    full = tok.encode(TEXTS[1], add_special_tokens=False)
    assert tok.encode(TEXTS[1][:12], add_special_tokens=False) == full[:12]
    assert tok.encode("a#", add_special_tokens=False) == [tok.unk_token_id] * 2
    assert tok("Compute 1+2.").input_ids == tok.encode("Compute 1+2.", add_special_tokens=False)


def test_tokenizer_save_load_and_auto_tokenizer(tok, tmp_path):
    save_tokenizer(tok, tmp_path / "tok")
    cfg = json.loads((tmp_path / "tok" / "tokenizer_config.json").read_text())
    assert cfg["tokenizer_class"] == "PreTrainedTokenizerFast"
    for loaded in (load_tokenizer(tmp_path / "tok"), AutoTokenizer.from_pretrained(str(tmp_path / "tok"))):
        assert loaded.pad_token_id == 0 and loaded.eos_token_id == tok.eos_token_id
        for s in TEXTS:
            assert loaded.encode(s, add_special_tokens=False) == tok.encode(s, add_special_tokens=False)


def test_build_is_seeded_and_leaves_global_rng_alone(tok):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    a = build_policy(SMALL, tok, seed=1)
    assert torch.equal(torch.rand(3), expected)
    b = build_policy(SMALL, tok, seed=1)
    c = build_policy(SMALL, tok, seed=2)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert not torch.equal(a.model.layers[0].mlp.up_proj.weight, c.model.layers[0].mlp.up_proj.weight)


def test_default_config_size_and_ids(tok):
    m = build_policy(TinyPolicyConfig(), tok, seed=0)
    n = sum(p.numel() for p in m.parameters())
    assert 700_000 < n < 900_000
    assert m.config.tie_word_embeddings and m.lm_head.weight is m.model.embed_tokens.weight
    assert m.config.pad_token_id == 0 and m.config.eos_token_id == tok.eos_token_id
    assert m.generation_config.eos_token_id == tok.eos_token_id
    assert m.generation_config.pad_token_id == 0


def test_save_load_roundtrip(tok, tmp_path):
    m = build_policy(SMALL, tok, seed=0).eval()
    save_policy(m, tok, tmp_path / "pol")
    assert (tmp_path / "pol" / "model.safetensors").is_file()
    x = torch.tensor([tok.encode(TEXTS[0] + TEXTS[1], add_special_tokens=False)])
    with torch.no_grad():
        ref = m(x).logits
        m2, tok2 = load_policy(tmp_path / "pol")
        assert torch.equal(m2(x).logits, ref)
        m3 = AutoModelForCausalLM.from_pretrained(str(tmp_path / "pol"))
        assert torch.equal(m3(x).logits, ref)
    assert tok2.encode(TEXTS[1], add_special_tokens=False) == tok.encode(TEXTS[1], add_special_tokens=False)
    # AutoTokenizer on the model directory (transformers 5 rebuilds it as Qwen2Tokenizer) agrees
    auto = AutoTokenizer.from_pretrained(str(tmp_path / "pol"))
    for s in TEXTS:
        ids = tok.encode(s, add_special_tokens=False)
        assert auto.encode(s, add_special_tokens=False) == ids and auto.decode(ids) == s


def test_sft_labels_mask_the_prompt(tok):
    probs = generate_problems(4, [2, 3], seed=0)
    ex = encode_sft_examples(tok, probs)
    ids, plen = ex[0]
    assert plen == len(probs[0].prompt) and ids[-1] == tok.eos_token_id
    assert len(ids) == len(probs[0].prompt) + len(probs[0].traces[0]) + 1
    b = collate_sft(ex, tok.pad_token_id)
    row = b["labels"][0]
    assert (row[:plen] == -100).all() and row[plen:len(ids)].tolist() == ids[plen:]
    assert (row[len(ids):] == -100).all()


def test_packed_batch_gives_the_padded_loss(tok):
    ex = encode_sft_examples(tok, generate_problems(40, {2: 1, 3: 1, 5: 1}, seed=0))
    m = build_policy(SMALL, tok, seed=0)
    padded, packed = collate_sft(ex, 0), pack_sft(ex, 0, 160)
    assert packed["input_ids"].numel() < padded["input_ids"].numel()
    assert int((packed["labels"] != -100).sum()) == int((padded["labels"] != -100).sum())
    with torch.no_grad():
        a = m(**padded, use_cache=False).loss
        b = m(**packed, use_cache=False).loss
    assert torch.allclose(a, b, atol=1e-5)


def test_cosine_schedule():
    assert cosine_lr(0, 100, 10, 1.0) == pytest.approx(0.1)
    assert cosine_lr(9, 100, 10, 1.0) == pytest.approx(1.0)
    assert cosine_lr(100, 100, 10, 1.0) == pytest.approx(0.1)
    assert cosine_lr(55, 100, 10, 1.0) == pytest.approx(0.55)


def test_pretrain_lowers_loss_and_is_deterministic(tok):
    probs = generate_problems(64, [2, 3], seed=0)
    logs = []
    runs = []
    for _ in range(2):
        m = build_policy(SMALL, tok, seed=0)
        m.eval()
        res = pretrain_policy(m, tok, probs, steps=30, batch_size=16, lr=1e-2, warmup=5, seed=3, progress=False,
                              log_fn=lambda s, met: logs.append((s, met)), log_every=10)
        assert not m.training   # train/eval state restored
        runs.append((res, m.state_dict()))
    (r1, s1), (r2, s2) = runs
    assert r1["final_loss"] == r2["final_loss"]
    assert all(torch.equal(s1[k], s2[k]) for k in s1)
    assert [s for s, _ in logs] == [10, 20, 30, 10, 20, 30]
    assert logs[2][1]["loss"] < logs[0][1]["loss"] * 0.8
    assert r1["final_loss"] < 3.0 and r1["steps"] == 30 and r1["tokens"] > 0
