"""One retrieval pipeline over two graph backends.

"Seed, then K-hop-with-filtering" is written once (``seed_and_expand``) and runs over any
``GraphBackend``:

* ``graphstore.live.LiveGraph`` — the dataset as it is in Neo4j now (Cypher); what ``query``,
  the API and the server use;
* ``MemoryGraph`` — an export of that dataset as arrays, with the in-memory reference K-hop
  (``retrieval.memory``, tested equal to the Cypher statements) and exact dense seeding; what
  ``extract``, ``eval`` and coverage use to process tens of thousands of questions. The full-text
  index, names and triples are read from the live graph it was exported from, when it has one.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np

from seeder_dgl.errors import SeederError
from seeder_dgl.graphstore.seeding import seed
from seeder_dgl.retrieval.memory import GraphArrays, dense_topk, khop_filter
from seeder_dgl.subgraph.record import QuerySubgraph

Seeds = list[tuple[int, float]]
"""(node id, cos(q, v)) per seed, best first."""


class GraphBackend(Protocol):
    """What retrieval needs from a graph."""

    def check_ready(self) -> None:
        """Raise a one-line error when the dataset cannot be queried (missing, half-ingested)."""

    def dense_seeds(self, embedding: np.ndarray, k: int, exact: bool = False) -> Seeds:
        """The ``k`` nodes most similar to the question embedding."""

    def fulltext_hits(self, question: str, embedding: np.ndarray, candidates: int = 50) -> list[dict]:
        """Nodes whose names match the question's words: dicts with id, name, text_score, similarity."""

    def khop_filter(self, embedding: np.ndarray, seeds: Seeds, budgets: list[int]) -> QuerySubgraph:
        """K-hop-with-filtering from ``seeds``: the best ``budgets[h]`` new nodes at hop h+1."""


@dataclass(frozen=True)
class RetrievalSettings:
    """How a question becomes a subgraph; subgraphs cached with other values are not reused."""

    seeds: int = 3
    """k0: seeds per question."""
    budgets: tuple[int, ...] = (50, 97)
    """b_h: nodes added at each hop; B = seeds + sum(budgets)."""
    exact_seeds: bool = False
    """Dense seeds by an exact scan instead of the vector index (live graphs; memory is always exact)."""
    seeding: str = "dense"
    """dense, fulltext or hybrid (graphstore.seeding)."""

    @property
    def budget(self) -> int:
        return self.seeds + sum(self.budgets)


def seed_and_expand(graph: GraphBackend, question: str, embedding: np.ndarray,
                    settings: RetrievalSettings) -> tuple[Seeds, QuerySubgraph]:
    """The seeds of ``question`` and the K-hop-with-filtering subgraph grown from them."""
    seeds = seed(graph, question, embedding, settings.seeds, settings.seeding, exact=settings.exact_seeds)
    return seeds, graph.khop_filter(embedding, seeds, list(settings.budgets))


@dataclass
class MemoryGraph:
    """A dataset as arrays (an export of the live graph, or arrays built in a test)."""

    arrays: GraphArrays
    node_emb: np.ndarray
    """float32 [N, d] (the dataset's node embeddings, unit length)."""
    rel_emb: np.ndarray
    """float32 [R, d] (relation-name embeddings)."""
    node_type: np.ndarray | None = None
    """int64 [N]: index into ``node_type_names`` (-1: no node with that id); None: types unknown."""
    node_type_names: list[str] | None = None
    live: object | None = None
    """The LiveGraph this was exported from: its full-text index serves text seeding."""

    @classmethod
    def from_export(cls, export, live=None) -> "MemoryGraph":
        """From ``graphstore.export.GraphExport`` (relationships of unknown type are left out)."""
        keep = np.asarray(export.rel) >= 0
        arrays = GraphArrays.from_arrays(export.num_nodes, export.src[keep], export.dst[keep], export.rel[keep])
        return cls(arrays, export.node_emb, np.asarray(export.relation_emb, dtype=np.float32),
                   np.asarray(export.node_type, dtype=np.int64), list(export.node_type_names), live)

    @property
    def info(self):
        if self.live is None:
            raise SeederError("this in-memory graph was not exported from a live dataset")
        return self.live.info

    def check_ready(self) -> None:
        if self.live is not None:
            self.live.check_ready()

    def dense_seeds(self, embedding: np.ndarray, k: int, exact: bool = True) -> Seeds:
        ids, sims = dense_topk(self.node_emb, embedding, k)
        return list(zip(ids.tolist(), sims.tolist()))

    def fulltext_hits(self, question: str, embedding: np.ndarray, candidates: int = 50) -> list[dict]:
        if self.live is None:
            raise SeederError("full-text seeding needs the live graph's name index: "
                              "build the in-memory graph with MemoryGraph.from_export(export, live)")
        return self.live.fulltext_hits(question, embedding, candidates)

    def khop_filter(self, embedding: np.ndarray, seeds: Seeds, budgets: Sequence[int],
                    query_id: int = -1) -> QuerySubgraph:
        return khop_filter(self.arrays, self.node_emb, self.rel_emb, embedding, [s for s, _ in seeds], list(budgets),
                           seed_scores=[v for _, v in seeds], query_id=query_id)

    def type_table(self, policy) -> np.ndarray | None:
        """Type ids of every node in ``policy``'s (``LoadedPolicy``) type vocabulary, or None."""
        prep = getattr(policy, "preprocessing", None)
        if prep is None or prep.node_type_names is None or self.node_type is None:
            return None
        return prep.type_table(self.node_type, self.node_type_names or [])
