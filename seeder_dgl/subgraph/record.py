"""The query subgraph: what K-hop-with-filtering extracts and what the policy trains on.

A record holds only ids, structure and scores; node features are gathered from the
dataset's embedding matrix (or from Neo4j at query time) when a batch is built, so the
on-disk cache stays small. ``to_dgl`` turns a record into a ``dgl.graph``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

FORWARD, BACKWARD = 1, 2
"""Edge directions (``QuerySubgraph.direction``): the stored relationship goes src -> dst, or
dst -> src. 0 stands for unknown (a subgraph extracted before directions were kept)."""
NUM_DIRECTIONS = 3


@dataclass
class QuerySubgraph:
    query_id: int
    node_ids: np.ndarray
    """int64 [n]: global node ids; seeds first, then nodes in the order K-hop selected them."""
    hop: np.ndarray
    """int8 [n]: 0 for seeds, h for nodes added at hop h."""
    score: np.ndarray
    """float32 [n]: seeds: cos(q, v); others: the K-hop-with-filtering score when selected."""
    src: np.ndarray
    """int64 [m]: local index of each edge's source; every edge appears in both directions."""
    dst: np.ndarray
    """int64 [m]: local index of each edge's target."""
    rel: np.ndarray
    """int64 [m]: relation id of each edge (the dataset's relation vocabulary)."""
    labels: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    """bool [n]: node is a gold answer (empty at query time)."""
    num_answers: int = 0
    """|A(q)|, also counting answers outside the subgraph (Recall divides by it)."""
    relation_scores: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.float32))
    """float32 [hops, R]: the relation terms K-hop followed, hop by hop (a learned relation prior's,
    ``retrieval.relation_prior``); empty when it followed sim(q, r)."""
    answer_types: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float32))
    """float32 [T]: the relation prior's answer-type head for the question (``answer_type_names``'
    order, ``RelationPrior.answer_types``); empty without one. The ranking multiplies it in."""
    answer_type_names: tuple[str, ...] = ()
    """The node types ``answer_types`` stands for."""
    direction: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int8))
    """int8 [m]: ``FORWARD`` where the stored relationship goes src -> dst, ``BACKWARD`` where it goes
    dst -> src (each relationship appears once of each); empty: not known (read as 0). Without it
    "the successor of X" and "the predecessor of X" follow the same edges."""
    exact_score: np.ndarray | None = field(default=None, repr=False)
    """float64 [n]: ``score`` before rounding to float32, as the backend computed it (in memory, or
    Neo4j's doubles on the live graph); rankings by score use it, so that rounding never decides an
    order. Not cached."""
    features: tuple | None = field(default=None, repr=False, compare=False)
    """(embeddings float32 [n, d], types, names) of ``node_ids``, row for row, when the backend read
    them with the subgraph (``khop_filter(..., with_features=True)`` through seeder-dgl's procedures);
    None: ask ``node_features``. Not cached."""

    @property
    def num_nodes(self) -> int:
        return int(self.node_ids.shape[0])

    @property
    def seed_mask(self) -> np.ndarray:
        return self.hop == 0

    def to_dgl(self, node_features: np.ndarray | None = None):
        """A ``dgl.graph`` with ndata ``nid, hop, score, seed, label`` (and ``x``) and edata ``rel``
        (and ``direction`` where known)."""
        import dgl  # kept local: the model must import without DGL
        import torch

        g = dgl.graph((torch.from_numpy(self.src), torch.from_numpy(self.dst)), num_nodes=self.num_nodes)
        g.ndata["nid"] = torch.from_numpy(self.node_ids)
        g.ndata["hop"] = torch.from_numpy(self.hop.astype(np.int64))
        g.ndata["score"] = torch.from_numpy(self.score.astype(np.float32))
        g.ndata["seed"] = torch.from_numpy(self.seed_mask)
        if self.labels.shape[0] == self.num_nodes:
            g.ndata["label"] = torch.from_numpy(self.labels.astype(bool))
        g.edata["rel"] = torch.from_numpy(self.rel)
        if self.direction.shape[0] == self.src.shape[0]:
            g.edata["direction"] = torch.from_numpy(self.direction.astype(np.int64))
        if node_features is not None:
            g.ndata["x"] = torch.from_numpy(np.ascontiguousarray(node_features[self.node_ids], dtype=np.float32))
        return g


def stack_relation_scores(records: list[QuerySubgraph]) -> np.ndarray | None:
    """float32 [B, hops, R]: the records' relation scores, when every record carries them in one
    shape (a split grown with one relation prior), else None."""
    shapes = {r.relation_scores.shape for r in records}
    if len(shapes) != 1 or not records or records[0].relation_scores.size == 0:
        return None
    return np.stack([r.relation_scores for r in records]).astype(np.float32)


def stack_answer_types(records: list[QuerySubgraph]) -> tuple[np.ndarray, tuple[str, ...]] | None:
    """(float32 [B, T], type names): the records' answer types, when every record carries them over
    the same types (a split grown with one relation prior), else None."""
    if not records or records[0].answer_types.size == 0:
        return None
    names = records[0].answer_type_names
    if any(r.answer_type_names != names or r.answer_types.shape != (len(names),) for r in records):
        return None
    return np.stack([r.answer_types for r in records]).astype(np.float32), names
