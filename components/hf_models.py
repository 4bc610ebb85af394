"""Pretrained base policies: resolve a model spec (local directory or Hugging Face id) to a
directory of HF files, and load its tokenizer the right way.

Why a separate resolver: the pretrain stage must not copy a multi-GB checkpoint into its
artifact; it records *which* files the run used (``model_ref.json``: the resolved
directory, the hub revision when there is one, and a digest of the small files), and every
later stage loads the model from there. The tiny from-scratch policy keeps its own path
(``components.policy``); ``load_tokenizer_any`` tells the two apart by the tokenizer file.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from components.data.schema import DataError

MODEL_REF = "model_ref.json"
# Files hashed into model_ref.json; weights are identified by name and size (hashing 15 GB on
# every pretrain run would cost minutes; a hub revision pins their content anyway).
SMALL_FILE_BYTES = 32 * 1024 * 1024
TINY_SPECIALS = ("<pad>", "<eos>", "<unk>")


def is_tiny_tokenizer(model_dir: str | Path) -> bool:
    """True for the character tokenizer of ``components.policy`` (specials <pad>,<eos>,<unk> = 0,1,2)."""
    f = Path(model_dir) / "tokenizer.json"
    if not f.is_file():
        return False
    try:
        added = json.loads(f.read_text(encoding="utf-8")).get("added_tokens", [])
    except (OSError, ValueError):
        return False
    ids = {t.get("content"): t.get("id") for t in added}
    return all(ids.get(s) == i for i, s in enumerate(TINY_SPECIALS))


def load_tokenizer_any(model_dir: str | Path):
    """The tiny tokenizer as saved, or ``AutoTokenizer`` for any other model (left padding,
    pad = eos when the model has no pad token: generation pads on the left)."""
    if is_tiny_tokenizer(model_dir):
        from components.policy import load_tokenizer
        return load_tokenizer(model_dir)
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(str(model_dir))
    except (OSError, ValueError) as e:
        raise DataError(f"{model_dir}: cannot load a tokenizer ({' '.join(str(e).split())[:200]})") from None
    if tok.eos_token_id is None:
        raise DataError(f"{model_dir}: tokenizer has no eos token")
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok


def stop_token_ids(model, tokenizer) -> list[int]:
    """Ids that end a sample: the tokenizer's eos plus the generation config's eos ids
    (chat models stop on e.g. <|im_end|> and <|endoftext|>)."""
    ids = {int(tokenizer.eos_token_id)}
    gen = getattr(model, "generation_config", None)
    extra = getattr(gen, "eos_token_id", None) if gen is not None else None
    if isinstance(extra, int):
        ids.add(extra)
    elif isinstance(extra, (list, tuple)):
        ids.update(int(i) for i in extra)
    return sorted(ids)


def _digest_dir(d: Path) -> dict[str, Any]:
    files = {}
    for p in sorted(d.rglob("*")):
        if not p.is_file() or ".cache" in p.parts:
            continue
        rel, size = p.relative_to(d).as_posix(), p.stat().st_size
        if size <= SMALL_FILE_BYTES:
            files[rel] = {"size": size, "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}
        else:
            files[rel] = {"size": size}
    return files


def resolve_model(spec: str, revision: str | None = None) -> dict[str, Any]:
    """``spec`` (a directory, or a hub id such as ``Qwen/Qwen2.5-7B-Instruct``) -> the
    ``model_ref.json`` record: {"spec", "path", "revision", "files"}.

    A hub id is fetched with ``huggingface_hub.snapshot_download`` into HF_HOME (the
    model-cache volume on the cluster). Offline (HF_HUB_OFFLINE=1, or no network) it must
    already be in that cache; otherwise a one-line DataError says so."""
    local = Path(spec).expanduser()
    if local.exists():
        if not (local / "config.json").is_file():
            raise DataError(f"{local}: model: not a model directory (config.json missing)")
        path, rev = local.resolve(), revision
    else:
        if spec.count("/") != 1 or spec.startswith((".", "/", "~")):
            raise DataError(f"model: {spec!r} is neither an existing directory nor a hub id 'org/name'")
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import HFValidationError

        offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")
        try:
            path = Path(snapshot_download(spec, revision=revision, local_files_only=offline,
                                          allow_patterns=["*.json", "*.safetensors", "*.model", "*.txt",
                                                          "*.jinja", "*.tiktoken"]))
        except HFValidationError as e:
            raise DataError(f"model: {spec!r}: {' '.join(str(e).split())[:200]}") from None
        except Exception as e:  # noqa: BLE001 - offline / network / auth errors all end here
            why = "not in the local Hugging Face cache and the hub is not reachable" \
                if offline or "offline" in str(e).lower() or "connect" in str(e).lower() else \
                " ".join(str(e).split())[:200]
            raise DataError(f"model: {spec!r}: {why} (HF_HOME={os.environ.get('HF_HOME', '~/.cache/huggingface')})") from None
        rev = path.name  # snapshot_download returns .../snapshots/<commit sha>
    if not (path / "config.json").is_file():
        raise DataError(f"{path}: model: config.json missing")
    return {"spec": spec, "path": str(path), "revision": rev, "files": _digest_dir(path)}


def model_dir_of(artifact: Path) -> Path:
    """The directory holding HF files for a stage artifact: ``<artifact>/model`` (tiny policy,
    trained models), the ``path`` of ``<artifact>/model_ref.json`` (a pretrained base policy),
    or the artifact itself."""
    ref = artifact / MODEL_REF
    if ref.is_file():
        path = Path(json.loads(ref.read_text())["path"])
        if not (path / "config.json").is_file():
            raise DataError(f"{ref}: points to {path}, which holds no model (config.json missing)")
        return path
    d = artifact / "model" if (artifact / "model").is_dir() else artifact
    if not (d / "config.json").is_file():
        raise DataError(f"{d}: no model here (config.json missing)")
    return d
