"""Retrieval: the settings and the seed-and-expand pipeline on any graph backend (``pipeline``),
seeding and entity linking, the relation prior, ``extract``; one interface for every method
(``base.GraphRetriever``), the methods by name (``methods``: dense, K-hop, PPR, PPR+MMR, beam and
PCST in ``baselines``, SeedER in ``policy``), and the in-memory K-hop-with-filtering reference
(``memory``) re-exported here."""
from seeder_dgl.retrieval.memory import (
    GraphArrays,
    KHopSelection,
    attach_labels,
    dense_topk,
    induced_edges,
    khop_filter,
    khop_select,
)

__all__ = [
    "GraphArrays",
    "KHopSelection",
    "attach_labels",
    "dense_topk",
    "induced_edges",
    "khop_filter",
    "khop_select",
]
