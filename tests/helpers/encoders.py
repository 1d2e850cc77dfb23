"""A stand-in for a SentenceTransformer, so encoder tests need no model and can count its calls."""
from __future__ import annotations

import hashlib

import numpy as np

from seeder_dgl.embeddings import TextEncoder


class CountingModel:
    """Deterministic vectors (not unit length), and a record of every batch it is asked to encode."""

    def __init__(self, dim: int = 8):
        self.dim = dim
        self.calls: list[list[str]] = []

    def encode(self, texts, **kwargs):
        self.calls.append(list(texts))
        seeds = [int.from_bytes(hashlib.sha1(t.encode()).digest()[:4], "little") for t in texts]
        out = np.stack([np.random.default_rng(s).normal(size=self.dim) for s in seeds])
        return out.astype(np.float32) * 3.0  # deliberately not unit length

    def get_sentence_embedding_dimension(self):
        return self.dim


def counting_encoder(cache_dir, model=None) -> tuple[TextEncoder, CountingModel]:
    """A TextEncoder whose model is a CountingModel (or ``model``)."""
    encoder = TextEncoder(model="fake-model", cache_dir=cache_dir)
    encoder._model = model or CountingModel()
    return encoder, encoder._model


def counted(calls: list[list[str]]) -> int:
    """Texts encoded over all calls."""
    return sum(len(c) for c in calls)
