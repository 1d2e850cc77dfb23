"""In-memory retrieval: the K-hop-with-filtering reference and the non-learned baselines."""
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
