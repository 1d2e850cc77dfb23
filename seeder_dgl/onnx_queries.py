"""Questions through ONNX Runtime: the same embeddings as sentence-transformers, a third of the time.

A live query embeds one short question (and its template, for the relation prior) at a time.
At that size sentence-transformers spends most of its time in Python and torch's dispatch, not in
arithmetic: all-MiniLM-L6-v2 took 10-12 ms a question through ``SentenceTransformer.encode`` and
3-6 ms as the same graph exported to ONNX and run by ONNX Runtime, with embeddings equal within
2e-7 (``benchmarks/bench_query_encoder.py``). In batches of 64 the two are nearly even, so node
texts stay on torch and only questions and their templates take this path.

Where the ``onnx`` extra (onnxruntime and onnx) is installed it is the default
(``SEEDER_ENCODER_BACKEND=auto``; ``torch`` turns it off, ``onnx`` insists on it): the model's
transformer is exported once per model into the cache (written atomically, about 3 s) and checked
against the torch model on a probe sentence before use. Models whose sentence-transformers
pipeline is more than a transformer, mean or CLS pooling and an optional normalisation are refused
in one line with ``onnx`` and left on torch with ``auto``: their embeddings would not be the ones
the graph was indexed with.
"""
from __future__ import annotations

import hashlib
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from seeder_dgl.errors import SeederError
from loaders.kg import atomic_write

PROBE = "which films did the director of this movie also write"
"""The sentence both backends embed before the ONNX one is used."""
TOLERANCE = 1e-4
"""Largest difference allowed between the two backends' probe embeddings."""


class OnnxQueries:
    """The transformer of a loaded ``SentenceTransformer`` as an ONNX Runtime session, with its pooling.

    ``encode(texts)`` returns (unit sentence embeddings float32 [n, d], token embeddings [T_i, d]
    each): what ``TextEncoder.encode_queries`` and ``encode_query_tokens`` return from torch.
    """

    def __init__(self, model: Any, folder: Path, identity: str, threads: int = 1):
        try:
            import onnxruntime
        except ImportError:
            raise SeederError("SEEDER_ENCODER_BACKEND=onnx needs ONNX Runtime: pip install 'seeder-dgl[onnx]', "
                              "or unset it") from None
        self.tokenizer = model.tokenizer
        self.max_length = int(model.max_seq_length)
        self.pooling, self.normalize = _pipeline(model)
        path = folder / f"{hashlib.sha1(identity.encode()).hexdigest()[:16]}.onnx"
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = max(int(threads), 1), 1
        # Idle threads sleep instead of spinning: they share the cores with Neo4j and the policy.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        if path.is_file():
            try:
                self.session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            except Exception:  # a damaged or foreign file in the cache: export it again
                path.unlink(missing_ok=True)
        if not path.is_file():
            try:
                _export(model, path)
            except Exception as exc:
                raise SeederError(f"could not export the encoder to ONNX ({type(exc).__name__}: "
                                  f"{str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ''}): "
                                  "unset SEEDER_ENCODER_BACKEND") from None
            self.session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.input_names = [i.name for i in self.session.get_inputs()]
        self._check(model)

    def encode(self, texts: list[str]) -> tuple[np.ndarray, list[np.ndarray]]:
        batch = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="np")
        hidden = self.session.run(None, {n: np.asarray(batch[n], dtype=np.int64) for n in self.input_names})[0]
        mask = np.asarray(batch["attention_mask"], dtype=bool)
        if self.pooling == "cls":
            sentences = hidden[:, 0]
        else:
            weights = mask[..., None].astype(np.float32)
            sentences = (hidden * weights).sum(1) / np.maximum(weights.sum(1), 1e-9)
        if self.normalize:
            sentences = sentences / np.maximum(np.linalg.norm(sentences, axis=1, keepdims=True), 1e-12)
        tokens = [np.asarray(h[m], dtype=np.float32) for h, m in zip(hidden, mask)]
        return np.asarray(sentences, dtype=np.float32), tokens

    def _check(self, model) -> None:
        expected = np.asarray(model.encode([PROBE], convert_to_numpy=True, show_progress_bar=False), np.float32)
        got = self.encode([PROBE])[0]
        if not self.normalize:  # TextEncoder normalises either way; compare directions
            expected = expected / np.linalg.norm(expected, axis=1, keepdims=True)
            got = got / np.linalg.norm(got, axis=1, keepdims=True)
        diff = float(np.abs(expected - got).max())
        if diff > TOLERANCE:
            raise SeederError(f"the ONNX export of this encoder differs from it by {diff:.2g} on a probe sentence: "
                              "unset SEEDER_ENCODER_BACKEND")


def _pipeline(model) -> tuple[str, bool]:
    """(pooling 'mean' or 'cls', whether the embeddings are normalised) of a SentenceTransformer
    made of a Transformer, a Pooling and optionally a Normalize module; else a one-line error."""
    kinds = [type(m).__name__ for m in model]
    pooling = model[1] if len(kinds) > 1 else None
    mode = getattr(pooling, "pooling_mode", None)  # sentence-transformers 5+: 'mean', 'cls', ...
    if not isinstance(mode, str) and hasattr(pooling, "get_pooling_mode_str"):  # older releases
        mode = pooling.get_pooling_mode_str()
    if kinds[:2] != ["Transformer", "Pooling"] or kinds[2:] not in ([], ["Normalize"]) or mode not in ("mean", "cls"):
        raise SeederError(f"SEEDER_ENCODER_BACKEND=onnx runs a transformer with mean or CLS pooling; this encoder "
                          f"is {' + '.join(kinds)} ({mode or 'unknown'} pooling): unset it")
    return mode, kinds[2:] == ["Normalize"]


def _export(model, path: Path) -> None:
    """Export the model's transformer (token embeddings out) to ``path`` atomically."""
    import torch

    transformer = model[0].auto_model.eval()
    example = model.tokenizer([PROBE], return_tensors="pt")
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in example]

    class Hidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = transformer

        def forward(self, *inputs):
            return self.transformer(**dict(zip(names, inputs))).last_hidden_state

    path.parent.mkdir(parents=True, exist_ok=True)
    axes = {n: {0: "batch", 1: "tokens"} for n in [*names, "hidden"]}
    # The tracer warns about every shape-dependent branch of the model's Python: noise to a user.
    with atomic_write(path) as tmp, torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Hidden(), tuple(example[n] for n in names), str(tmp), dynamo=False, input_names=names,
                          output_names=["hidden"], dynamic_axes=axes, opset_version=17)

