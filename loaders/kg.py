"""In-memory form of a typed knowledge graph and its question set.

Every loader (STaRK, MetaQA, synthetic) produces these two objects; the Neo4j writer,
the in-memory reference retrievers and the tests all consume them. Node ids are the
dataset's own integer ids and are contiguous ``0..N-1`` (STaRK's are; MetaQA and the
synthetic graphs number their entities that way).
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from seeder_dgl.errors import SeederError


class DataError(SeederError, ValueError):
    """A data file is missing, truncated or malformed; the one-line message says which and what to do."""


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on success it replaces ``path`` in one step.

    Readers never see a half-written file: an interrupted writer leaves only its temp file,
    which is removed here when the body raises.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# Labels and relationship types are spliced into Cypher (they cannot be parameters),
# so they are normalised to this alphabet and validated again before use.
_IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")


def is_identifier(name: str) -> bool:
    """True when ``name`` is safe to splice into Cypher as a label or relationship type."""
    return isinstance(name, str) and _IDENTIFIER.fullmatch(name) is not None  # fullmatch: no trailing newline


def to_identifier(name: str) -> str:
    """Map a free-form type/relation name ('gene/protein', 'directed_by') to a Cypher identifier."""
    cleaned = re.sub(r"[^A-Za-z0-9_]+", "_", name.strip()).strip("_")
    if not cleaned:  # '!!!', '→': a stable identifier of its own
        cleaned = "T_" + hashlib.sha1(name.encode("utf-8", "replace")).hexdigest()[:8]
    if not cleaned[0].isalpha():
        cleaned = "T_" + cleaned
    return cleaned[:64]


def unique_identifiers(names: list[str]) -> list[str]:
    """``names`` with repeats numbered (``X``, ``X_2``, ...), so each maps back to one source name."""
    out: list[str] = []
    used: set[str] = set()
    for name in names:
        candidate, n = name, 1
        while candidate in used:
            n += 1
            candidate = f"{name[:58]}_{n}"
        used.add(candidate)
        out.append(candidate)
    return out


class TripleSet:
    """Distinct ``(head, relation, tail)`` triples of node ids as a loader reads them: relations are
    numbered in first-seen order, repeated triples are counted and dropped."""

    def __init__(self) -> None:
        self.relation_ids: dict[str, int] = {}
        self._seen: set[tuple[int, int, int]] = set()
        self._src: list[int] = []
        self._dst: list[int] = []
        self._rel: list[int] = []
        self.duplicates = 0

    def add(self, head: int, relation: str, tail: int) -> None:
        r = self.relation_ids.setdefault(relation, len(self.relation_ids))
        if (head, r, tail) in self._seen:
            self.duplicates += 1
            return
        self._seen.add((head, r, tail))
        self._src.append(head)
        self._dst.append(tail)
        self._rel.append(r)

    def __len__(self) -> int:
        return len(self._src)

    @property
    def relation_names(self) -> list[str]:
        return list(self.relation_ids)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """int64 edge_src, edge_dst, edge_rel."""
        return tuple(np.asarray(x, dtype=np.int64) for x in (self._src, self._dst, self._rel))


@dataclass
class KnowledgeGraph:
    """A typed multi-relational graph with node text.

    Edges are stored as given by the source (directed triples ``src -rel-> dst``);
    retrieval treats them as undirected, and the Neo4j writer stores each
    (undirected pair, relation) once.
    """

    name: str
    node_names: list[str]
    """Short display name of each node (entity name, paper title, product title)."""
    node_texts: list[str]
    """Document text of each node, the string that is embedded."""
    node_type: np.ndarray
    """int64 [N]: index into ``node_type_names``."""
    node_type_names: list[str]
    """Original node type names (e.g. 'gene/protein')."""
    edge_src: np.ndarray
    """int64 [E]: source node id of each triple."""
    edge_dst: np.ndarray
    """int64 [E]: target node id of each triple."""
    edge_rel: np.ndarray
    """int64 [E]: index into ``relation_names``."""
    relation_names: list[str]
    """Original relation names (e.g. 'directed_by', 'ppi')."""
    node_keys: list[str] | None = None
    """The source's own node ids (as text) when it has them (node tables), else None (names are ids)."""

    @property
    def num_nodes(self) -> int:
        return len(self.node_names)

    @property
    def num_edges(self) -> int:
        return int(self.edge_src.shape[0])

    def node_labels(self) -> list[str]:
        """Cypher labels for the node types, in ``node_type_names`` order (distinct)."""
        return unique_identifiers([to_identifier(t) for t in self.node_type_names])

    def relation_types(self) -> list[str]:
        """Cypher relationship types (upper snake case), in ``relation_names`` order; two names that
        clean to one type ('directed by', 'directed_by') get distinct ones (DIRECTED_BY, DIRECTED_BY_2)."""
        return unique_identifiers([to_identifier(r).upper() for r in self.relation_names])

    def validate(self) -> None:
        """Raise ValueError with a one-line reason when the arrays disagree."""
        n = self.num_nodes
        if len(self.node_texts) != n or self.node_type.shape[0] != n:
            raise ValueError(
                f"{self.name}: {n} names but {len(self.node_texts)} texts and "
                f"{self.node_type.shape[0]} node types"
            )
        if not (self.edge_src.shape == self.edge_dst.shape == self.edge_rel.shape):
            raise ValueError(f"{self.name}: edge_src/edge_dst/edge_rel lengths differ")
        if self.num_edges:
            lo = min(int(self.edge_src.min()), int(self.edge_dst.min()))
            hi = max(int(self.edge_src.max()), int(self.edge_dst.max()))
            if lo < 0 or hi >= n:
                raise ValueError(
                    f"{self.name}: edge refers to node id {hi if hi >= n else lo}, "
                    f"outside 0..{n - 1}"
                )
            if int(self.edge_rel.min()) < 0 or int(self.edge_rel.max()) >= len(self.relation_names):
                raise ValueError(f"{self.name}: edge relation id outside 0..{len(self.relation_names) - 1}")
        if self.node_keys is not None and len(self.node_keys) != n:
            raise ValueError(f"{self.name}: {n} nodes but {len(self.node_keys)} node keys")
        if n and (int(self.node_type.min()) < 0 or int(self.node_type.max()) >= len(self.node_type_names)):
            raise ValueError(f"{self.name}: node type id outside 0..{len(self.node_type_names) - 1}")


@dataclass
class Query:
    """One question with its gold answers (node ids)."""

    id: int
    text: str
    answers: list[int]
    topic: list[int] = field(default_factory=list)
    """Node ids of the topic entity when the dataset marks it (MetaQA's [brackets])."""
    hops: int | None = None
    """Number of hops when the dataset says (MetaQA 1/2/3), else None."""
    qtype: str | None = None
    """Question type / relation-path label where the dataset has one."""
    wording: str | None = None
    """'seen' or 'new': whether a training question has the same words with its topic masked
    (``evaluation.typed.mark_wording``, which ``eval`` groups results by); None: not known."""


@dataclass
class QASet:
    """Questions of a dataset and its splits (lists of query ids)."""

    name: str
    queries: dict[int, Query]
    splits: dict[str, list[int]]
    unknown_names: list[str] = field(default_factory=list)
    """Entity names in the question file that match no node (reported, not fatal)."""

    def sample(self, name: str, count: int | None, seed: int = 0) -> list[Query]:
        """A fixed random sample of ``count`` questions of a split, in split order (all if None).

        Splits may be ordered by hop count or type, so the first N questions are not a sample."""
        queries = self.split(name)
        if count is None or count >= len(queries):
            return queries
        pick = np.sort(np.random.default_rng(seed).choice(len(queries), size=count, replace=False))
        return [queries[i] for i in pick]

    def split(self, name: str) -> list[Query]:
        if name not in self.splits:
            raise KeyError(f"{self.name} has no split {name!r}; available: {sorted(self.splits)}")
        return [self.queries[i] for i in self.splits[name] if i in self.queries]
