"""SeedER's policy network: batch layout, message-passing ops, encoder, heads, policy.

Nothing here imports DGL at module level: ``DGLOps`` imports it when constructed, and
``select_ops`` falls back to the pure-torch ops where DGL is missing or lacks the device.
"""
from seeder_dgl.model.batch import GraphView, SubgraphBatch, apply_pca, collate, fit_pca
from seeder_dgl.model.encoder import SparseGraphTransformer
from seeder_dgl.model.heads import ExpansionHead, ScoringHead
from seeder_dgl.model.ops import DGLOps, MessagePassingOps, TorchOps, dgl_available, scatter_softmax, select_ops
from seeder_dgl.model.policy import Expansion, Frontier, NodeScores, SeederPolicy, capped_frontier

__all__ = [
    "GraphView", "SubgraphBatch", "apply_pca", "collate", "fit_pca", "SparseGraphTransformer", "ExpansionHead",
    "ScoringHead", "DGLOps", "MessagePassingOps", "TorchOps", "dgl_available", "scatter_softmax", "select_ops",
    "Expansion", "Frontier", "NodeScores", "SeederPolicy", "capped_frontier",
]
