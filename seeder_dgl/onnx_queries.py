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
against the torch model on a probe sentence before use. ``onnx-int8`` runs a copy of the export with
8-bit weights instead (ONNX Runtime's dynamic quantization, made once beside it): about a quarter of
the float32 graph's time for a short question (0.8 against 3.0 ms), refused where its probe
embeddings keep less than ``INT8_MIN_COSINE`` of cosine to the model's. It is not the default: the
relation prior reads its templates as well as before (MetaQA), but a question's nearest nodes by
dense similarity move (the same first for 95% of MetaQA's validation questions, 90% of the first
ten), which datasets seeded densely would feel. Models whose sentence-transformers
pipeline is more than a transformer, mean or CLS pooling and an optional normalisation are refused
in one line with ``onnx`` and left on torch with ``auto``: their embeddings would not be the ones
the graph was indexed with.
"""
from __future__ import annotations

import hashlib
import logging
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
INT8_PROBES = (PROBE, "what movies did Tom Hanks star in", "who is the successor of the leader of X?")
"""The sentences the int8 copy must embed close to the model (``INT8_MIN_COSINE``)."""
INT8_MIN_COSINE = 0.99
"""Smallest cosine allowed between the int8 copy's probe embeddings and the model's: all-MiniLM-L6-v2
keeps 0.992-0.996 (MetaQA's validation Hit@1 through the live API 0.9840 against 0.9835 in float32,
2,000 questions); a model that loses more to 8-bit weights is refused in one line."""


class OnnxQueries:
    """The transformer of a loaded ``SentenceTransformer`` as an ONNX Runtime session, with its pooling.

    ``encode(texts)`` returns (unit sentence embeddings float32 [n, d], token embeddings [T_i, d]
    each): what ``TextEncoder.encode_queries`` and ``encode_query_tokens`` return from torch.
    """

    def __init__(self, model: Any, folder: Path, identity: str, threads: int = 1, int8: bool = False):
        try:
            import onnxruntime
        except ImportError:
            raise SeederError("SEEDER_ENCODER_BACKEND=onnx needs ONNX Runtime: pip install 'seeder-dgl[onnx]', "
                              "or unset it") from None
        self.int8 = bool(int8)
        self.tokenizer = model.tokenizer
        self.max_length = int(model.max_seq_length)
        self.pooling, self.normalize = _pipeline(model)
        path = folder / f"{hashlib.sha1(identity.encode()).hexdigest()[:16]}.onnx"
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = max(int(threads), 1), 1
        # Idle threads sleep instead of spinning: they share the cores with Neo4j and the policy.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        target = path.with_name(f"{path.stem}-int8.onnx") if self.int8 else path
        self.session = _cached_session(onnxruntime, target, options)
        if self.session is None:  # made once per model: the export, and its 8-bit copy from it
            if target == path or _cached_session(onnxruntime, path, options) is None:
                try:
                    _export(model, path)
                except Exception as exc:
                    raise SeederError(f"could not export the encoder to ONNX ({type(exc).__name__}: "
                                      f"{str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ''}): "
                                      "unset SEEDER_ENCODER_BACKEND") from None
            if self.int8:
                _quantize(path, target)
            self.session = onnxruntime.InferenceSession(str(target), options, providers=["CPUExecutionProvider"])
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
        probes = list(INT8_PROBES if self.int8 else [PROBE])
        expected = np.asarray(model.encode(probes, convert_to_numpy=True, show_progress_bar=False), np.float32)
        got = self.encode(probes)[0]
        if not self.normalize:  # TextEncoder normalises either way; compare directions
            expected = expected / np.linalg.norm(expected, axis=1, keepdims=True)
            got = got / np.linalg.norm(got, axis=1, keepdims=True)
        if self.int8:
            cosine = float(np.min(np.sum(expected * got, axis=1) / np.maximum(
                np.linalg.norm(expected, axis=1) * np.linalg.norm(got, axis=1), 1e-12)))
            if cosine < INT8_MIN_COSINE:
                raise SeederError(f"the 8-bit copy of this encoder keeps only {cosine:.3f} cosine to it on a probe "
                                  "sentence: set SEEDER_ENCODER_BACKEND=onnx")
            return
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


def _cached_session(onnxruntime, path: Path, options):
    """A session of the graph the cache holds at ``path``, or None: not there, or damaged or foreign
    (then removed, to be made again)."""
    if not path.is_file():
        return None
    try:
        return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception:
        path.unlink(missing_ok=True)
        return None


def _quantize(path: Path, out: Path) -> None:
    """Write to ``out``, atomically, the 8-bit copy of the export ``path``: weights of the matrix
    products in int8, one scale per output channel, activations quantized as they come (ONNX
    Runtime's dynamic quantization)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quiet = logging.getLogger()
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # its advice to pre-process the graph first is noise to a user
    try:
        with atomic_write(out) as tmp:
            quantize_dynamic(str(path), str(tmp), per_channel=True, weight_type=QuantType.QInt8)
    finally:
        quiet.setLevel(level)


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

