"""Policy checkpoints: atomic saving, safe reading, and the preprocessing that travels with the weights.

A checkpoint is a ``torch.save`` of plain data only (dicts, lists, strings, numbers, tensors),
so it loads with ``torch.load(weights_only=True)``: opening a checkpoint never runs pickled code.

What travels with the weights is everything inference needs to see the inputs exactly as the
policy saw them in training (``Preprocessing``):

* the PCA fitted on the training graph's node embeddings (mean and components, or none), applied
  to node and query embeddings, followed by L2 normalisation;
* the size of the training relation vocabulary. The policy has one relation slot more than
  that: relation ids the model never saw (relation types added to a live graph by upsert after
  training, or -1 for "unknown") are mapped to that last slot.

Loading a checkpoint for ranking is ``seeder_dgl.inference.load_policy``.
"""
from __future__ import annotations

import dataclasses
import io
import pickle
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import Tensor

from seeder_dgl.errors import SeederError
from seeder_dgl.fileio import atomic_write_bytes
from seeder_dgl.model.batch import SubgraphBatch, apply_pca, collate, fit_pca
from seeder_dgl.model.policy import SeederPolicy
from seeder_dgl.subgraph.record import QuerySubgraph
from seeder_dgl.training.config import TrainConfig

FORMAT = "seeder-dgl/policy"
FORMAT_VERSION = 1
REQUIRED_KEYS = ("format", "format_version", "model", "config", "in_dim", "dimension", "num_relations",
                 "relation_types", "pca_mean", "pca_components", "dataset", "embedding_model")
RELATION_TEXT_KEY = "encoder.relations.relation_text"


class CheckpointError(SeederError):
    """A checkpoint is missing, damaged, or was trained for another graph."""


def one_line(text: object, limit: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


# ---------------------------------------------------------------------------------------------
# Saving and reading
# ---------------------------------------------------------------------------------------------
def save_checkpoint(path: str | Path, state: dict) -> Path:
    """``torch.save(state)`` to ``path`` atomically: a temporary file in the same folder, fsync, rename.

    A run killed while saving leaves the previous checkpoint intact (and maybe a stray ``.tmp``).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    atomic_write_bytes(path, buffer.getvalue())
    return path


def read_checkpoint(path: str | Path, required: Sequence[str] = REQUIRED_KEYS) -> dict:
    """The checkpoint's dict (tensors on the CPU), or a one-line ``CheckpointError``."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}: train one with `seeder-dgl train <dataset>` "
                              "or pass the path of an existing best.pt")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, OSError, ValueError, KeyError, IndexError, TypeError, AttributeError,
            pickle.UnpicklingError, zipfile.BadZipFile) as exc:
        raise CheckpointError(f"checkpoint {path} is damaged or not a seeder-dgl checkpoint "
                              f"({exc.__class__.__name__}: {one_line(exc, 100)}): train again, or use the "
                              "run's other checkpoint (best.pt / last.pt)") from exc
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a seeder-dgl policy checkpoint: pass a best.pt or last.pt "
                              "written by `seeder-dgl train`")
    if state.get("format_version", 0) > FORMAT_VERSION:
        raise CheckpointError(f"checkpoint {path} has format version {state['format_version']}, newer than this "
                              f"seeder-dgl reads ({FORMAT_VERSION}): upgrade seeder-dgl")
    missing = [k for k in required if k not in state]
    if missing:
        raise CheckpointError(f"checkpoint {path} is incomplete (missing {', '.join(missing)}): train again, "
                              "or use the run's other checkpoint (best.pt / last.pt)")
    return state


def config_to_dict(cfg: TrainConfig) -> dict[str, Any]:
    """The config as plain data (tuples become lists) for weights-only checkpoints and JSON."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(cfg).items()}


def config_from_dict(data: dict[str, Any]) -> TrainConfig:
    """Inverse of ``config_to_dict``; fields this version does not know are ignored."""
    known = {f.name for f in dataclasses.fields(TrainConfig)}
    return TrainConfig(**{k: v for k, v in data.items() if k in known})


# ---------------------------------------------------------------------------------------------
# Preprocessing shared by training and inference
# ---------------------------------------------------------------------------------------------
class FeatureRows:
    """Feature rows addressed by global node id: what ``collate`` indexes as ``node_features[node_ids]``.

    Holds only the rows that the given subgraphs use (already transformed), so a large embedding
    matrix is read once, row by row, and never copied whole. ``types`` (optional) holds each row's
    node type id in the policy's type vocabulary; ``type_rows`` indexes it the same way.
    """

    def __init__(self, ids: np.ndarray, rows: np.ndarray, types: np.ndarray | None = None):
        self.ids = np.asarray(ids, dtype=np.int64)  # sorted, unique
        self.rows = np.asarray(rows, dtype=np.float32)
        self.types = None if types is None else np.asarray(types, dtype=np.int64)
        # Row of every id up to the largest, −1 where there is none: one gather per batch instead of
        # a binary search per node; only while that table is small next to the rows themselves.
        top = int(self.ids[-1]) + 1 if self.ids.size else 0
        self._row_of = None
        if self.ids.size and self.ids[0] >= 0 and top <= 4 * self.ids.size + 1_000_000:
            self._row_of = np.full(top, -1, dtype=np.int64)
            self._row_of[self.ids] = np.arange(self.ids.size)

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    def _positions(self, node_ids) -> np.ndarray:
        node_ids = np.asarray(node_ids, dtype=np.int64)
        if self._row_of is not None:
            inside = node_ids.size == 0 or (node_ids.min() >= 0 and node_ids.max() < self._row_of.shape[0])
            pos = self._row_of[node_ids] if inside else None
            if pos is None or (pos.size and pos.min() < 0):
                raise KeyError("node features were not prepared for some node ids of this batch")
            return pos
        pos = np.searchsorted(self.ids, node_ids)
        if node_ids.size and (pos.max(initial=0) >= self.ids.shape[0] or not np.array_equal(self.ids[pos], node_ids)):
            raise KeyError("node features were not prepared for some node ids of this batch")
        return pos

    def __getitem__(self, node_ids) -> np.ndarray:
        return self.rows[self._positions(node_ids)]

    @property
    def type_rows(self) -> "_TypeRows | None":
        return None if self.types is None else _TypeRows(self)


class _TypeRows:
    """``FeatureRows.types`` addressed by global node id (what ``collate`` reads as ``node_types``)."""

    def __init__(self, rows: FeatureRows):
        self._rows = rows

    def __getitem__(self, node_ids) -> np.ndarray:
        return self._rows.types[self._rows._positions(node_ids)]


@dataclass
class Preprocessing:
    """How raw inputs become model inputs; identical in training and at inference (stored in checkpoints)."""

    num_relations: int
    """Size of the training relation vocabulary; id ``num_relations`` is the slot of unknown relations."""
    pca_mean: np.ndarray | None = None
    """float32 [d] or None (no PCA)."""
    pca_components: np.ndarray | None = None
    """float32 [pca_dim, d] or None."""
    node_type_names: list[str] | None = None
    """The training node-type vocabulary (type id i is ``node_type_names[i]``; id ``len`` is the slot of
    types unseen in training); None: the policy takes no node types."""

    @classmethod
    def fit(cls, node_emb: np.ndarray, pca_dim: int | None, num_relations: int,
            node_type_names: Sequence[str] | None = None) -> "Preprocessing":
        """PCA on the node embedding matrix when ``pca_dim`` is set and smaller than d.

        All-zero rows (ids without a node in an export) are left out of the fit.
        """
        types = None if node_type_names is None else [str(t) for t in node_type_names]
        d = int(node_emb.shape[1])
        if not pca_dim or pca_dim >= d:
            return cls(num_relations, node_type_names=types)
        nonzero = np.concatenate([np.abs(np.asarray(node_emb[i:i + 65536])).max(axis=1) > 0
                                  for i in range(0, node_emb.shape[0], 65536)] or [np.zeros(0, bool)])
        matrix = node_emb if bool(nonzero.all()) else np.asarray(node_emb)[nonzero]
        if matrix.shape[0] < 2:
            raise SeederError("PCA needs at least two non-zero node embeddings: set pca_dim to None")
        mean, components = fit_pca(matrix, int(pca_dim))
        return cls(num_relations, mean, components, types)

    @property
    def unknown_relation(self) -> int:
        return self.num_relations

    @property
    def num_node_types(self) -> int:
        """Type slots of the policy: the vocabulary plus one for unknown types (0: no types)."""
        return 0 if self.node_type_names is None else len(self.node_type_names) + 1

    @property
    def unknown_type(self) -> int:
        return len(self.node_type_names or ())

    def type_ids(self, names: Sequence[str | None]) -> np.ndarray:
        """Type ids of type names; names outside the training vocabulary (or None) get the unknown slot."""
        index, unknown = {t: i for i, t in enumerate(self.node_type_names or ())}, self.unknown_type
        return np.fromiter((index.get(n, unknown) for n in names), dtype=np.int64, count=len(names))

    def type_table(self, codes: np.ndarray, names: Sequence[str]) -> np.ndarray:
        """Per global id, the type id of a graph whose node ``i`` has type ``names[codes[i]]`` (-1: none)."""
        lookup = np.append(self.type_ids(list(names)), self.unknown_type)  # code -1 -> last entry
        codes = np.asarray(codes, dtype=np.int64)
        return lookup[np.where(codes < 0, len(names), codes)]

    @property
    def in_dim(self) -> int | None:
        """The model's input width (None: the raw dimension, no PCA)."""
        return None if self.pca_components is None else int(self.pca_components.shape[0])

    def features(self, x: np.ndarray) -> np.ndarray:
        """PCA projection (if any), then L2 normalisation, of rows of ``x``."""
        return apply_pca(x, self.pca_mean, self.pca_components)

    def relations(self, rel: Tensor) -> Tensor:
        """Relation ids with every id outside the training vocabulary mapped to the unknown slot."""
        unknown = (rel < 0) | (rel >= self.num_relations)
        return torch.where(unknown, torch.full_like(rel, self.unknown_relation), rel)

    def _row_types(self, node_types, records: Sequence[QuerySubgraph], unique: np.ndarray) -> np.ndarray | None:
        """Type ids of the sorted ``unique`` node ids (None when the policy takes no types).

        ``node_types``: None (every type unknown); an int array indexed by global id holding type
        ids of this vocabulary (``type_table``); or one sequence of type names per record.
        """
        if self.node_type_names is None:
            return None
        if node_types is None:
            return np.full(unique.shape[0], self.unknown_type, dtype=np.int64)
        if isinstance(node_types, (list, tuple)):
            if len(node_types) != len(records):
                raise ValueError(f"{len(node_types)} node-type lists for {len(records)} records")
            ids = np.concatenate([np.asarray(r.node_ids, np.int64) for r in records] or [np.zeros(0, np.int64)])
            names = [t for per_record in node_types for t in per_record]
            if len(names) != ids.shape[0]:
                raise ValueError(f"{len(names)} node types for {ids.shape[0]} nodes")
            # A node in several records has the same type in each: its first occurrence gives it.
            seen, first = np.unique(ids, return_index=True)
            return self.type_ids(names)[first[np.searchsorted(seen, unique)]]
        table = np.asarray(node_types[unique], dtype=np.int64)
        return np.where((table < 0) | (table > self.unknown_type), self.unknown_type, table)

    def node_rows(self, node_features: np.ndarray | Sequence[np.ndarray] | Callable,
                  records: Sequence[QuerySubgraph], chunk: int = 65536, node_types=None) -> FeatureRows:
        """Transformed feature rows (and type ids) of every node of ``records``.

        ``node_features``: the [N, d] matrix indexed by global id (a memmap works); or one
        [n_i, d] array per record, aligned with its ``node_ids``; or a callable
        ``ids -> [len(ids), d]``. ``node_types``: see ``_row_types``.
        """
        if isinstance(node_features, (list, tuple)):
            if len(node_features) != len(records):
                raise ValueError(f"{len(node_features)} feature arrays for {len(records)} records")
            ids = [np.asarray(r.node_ids, dtype=np.int64) for r in records]
            for r, a, i in zip(records, node_features, ids):
                if np.shape(a)[0] != i.shape[0]:
                    raise ValueError(f"query {r.query_id}: {np.shape(a)[0]} feature rows for {i.shape[0]} nodes")
            all_ids = np.concatenate(ids) if ids else np.zeros(0, np.int64)
            if all_ids.size == 0:
                return FeatureRows(all_ids, np.zeros((0, self.in_dim or 0), np.float32),
                                   self._row_types(node_types, records, all_ids))
            dim = next(np.shape(a)[-1] for a in node_features if np.size(a))
            stacked = np.concatenate([np.asarray(a, np.float32).reshape(-1, dim) for a in node_features])
            unique, first = np.unique(all_ids, return_index=True)
            return FeatureRows(unique, self.features(stacked[first]), self._row_types(node_types, records, unique))
        unique = np.unique(np.concatenate([np.asarray(r.node_ids, np.int64) for r in records])
                           if records else np.zeros(0, np.int64))
        get = node_features if callable(node_features) else (lambda ids: node_features[ids])
        parts = [self.features(np.asarray(get(unique[i:i + chunk]), dtype=np.float32))
                 for i in range(0, unique.shape[0], chunk)]
        width = self.in_dim or (np.shape(node_features)[1] if not callable(node_features) else 0)
        rows = np.concatenate(parts) if parts else np.zeros((0, width), np.float32)
        return FeatureRows(unique, rows, self._row_types(node_types, records, unique))

    def batch(self, records: Sequence[QuerySubgraph], rows: FeatureRows, query_features: np.ndarray,
              device: torch.device | str = "cpu") -> SubgraphBatch:
        """``collate`` with the unknown-relation mapping, moved to ``device``."""
        batch = collate(list(records), rows, query_features, node_types=rows.type_rows)
        batch.rel = self.relations(batch.rel)
        return batch.to(device)

    def to_state(self) -> dict[str, Any]:
        tensor = (lambda a: None if a is None else torch.from_numpy(np.ascontiguousarray(a, np.float32)))
        return {"num_relations": int(self.num_relations), "pca_mean": tensor(self.pca_mean),
                "pca_components": tensor(self.pca_components),
                "node_type_names": None if self.node_type_names is None else list(self.node_type_names)}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> "Preprocessing":
        array = (lambda t: None if t is None else t.detach().cpu().numpy().astype(np.float32))
        types = state.get("node_type_names")
        return cls(int(state["num_relations"]), array(state["pca_mean"]), array(state["pca_components"]),
                   None if types is None else [str(t) for t in types])


def relation_text_table(relation_emb: np.ndarray, num_relations: int) -> Tensor:
    """Normalised relation-name embeddings [num_relations + 1, d]; the unknown slot gets a zero row."""
    emb = np.asarray(relation_emb, np.float32).reshape(-1, np.shape(relation_emb)[-1])
    if emb.shape[0] < num_relations:
        raise ValueError(f"{emb.shape[0]} relation embeddings for {num_relations} relations")
    emb = apply_pca(emb[:num_relations], None, None)
    return torch.from_numpy(np.concatenate([emb, np.zeros((1, emb.shape[1]), np.float32)]))


def build_policy(cfg: TrainConfig, in_dim: int, num_relations: int,
                 relation_text: Tensor | None = None, num_node_types: int = 0) -> SeederPolicy:
    """The policy for a training vocabulary of ``num_relations`` (+1 slot for unknown relations)
    and ``num_node_types`` type slots (``Preprocessing.num_node_types``)."""
    return SeederPolicy.from_config(cfg, in_dim, num_relations + 1, relation_text, num_node_types)
