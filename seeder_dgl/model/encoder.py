"""Query-conditioned sparse graph transformer (Exphormer-style, no expander edges, no virtual node).

Per layer, for edge j→i with relation embedding e_ij::

    Q_i = W_Q h_i,  K_j = W_K h_j,  V_j = W_V h_j,  (E^K_ij, E^V_ij) = MLP_e(e_ij)
    a_ij = Q_i·(K_j ⊙ E^K_ij)/√d_h,  α_ij = softmax_{j ∈ N(i)} a_ij
    h̄_i = Σ_j α_ij (V_j + E^V_ij)
    h_i ← Norm(h_i + W_O h̄_i);  h_i ← Norm(h_i + FFN(h_i))

The query enters every node before the first layer (``'add'``: z_v + W_q z_q; ``'concat'``:
[z_v ‖ W_q z_q ‖ cos(z_v, z_q)]), together with cheap structural features, then one projection
to the hidden width. The same encoder serves every expansion step and the final scoring.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seeder_dgl.model.batch import GraphView, SubgraphBatch
from seeder_dgl.model.ops import MessagePassingOps

QUERY_INJECTIONS = ("add", "concat")


class NodeInput(nn.Module):
    """Initial node state: query injection plus structural features, projected to ``hidden_dim``.

    Structural features (all free given the K-hop subgraph): seed flag, "already selected"
    flag (selected V_t vs frontier U_t: the policy must know which nodes it may still add),
    hop one-hot (clamped to ``num_hop_buckets - 1``) and the K-hop-with-filtering score.
    """

    def __init__(self, in_dim: int, hidden_dim: int, query_injection: str = "concat", num_hop_buckets: int = 4):
        super().__init__()
        if query_injection not in QUERY_INJECTIONS:
            raise ValueError(f"query_injection must be one of {QUERY_INJECTIONS}, not {query_injection!r}")
        self.query_injection = query_injection
        self.num_hop_buckets = num_hop_buckets
        self.w_q = nn.Linear(in_dim, in_dim, bias=False)
        fused = in_dim if query_injection == "add" else 2 * in_dim + 1
        self.num_structural = 3 + num_hop_buckets
        self.proj = nn.Linear(fused + self.num_structural, hidden_dim)

    def forward(self, z_v: Tensor, z_q: Tensor, seed: Tensor, selected: Tensor, hop: Tensor, score: Tensor) -> Tensor:
        q = self.w_q(z_q)
        if self.query_injection == "add":
            fused = z_v + q
        else:
            fused = torch.cat([z_v, q, F.cosine_similarity(z_v, z_q, dim=-1).unsqueeze(-1)], dim=-1)
        hop_onehot = F.one_hot(hop.clamp(0, self.num_hop_buckets - 1), self.num_hop_buckets).to(z_v.dtype)
        structural = torch.cat([seed.to(z_v.dtype).unsqueeze(-1), selected.to(z_v.dtype).unsqueeze(-1),
                                hop_onehot, score.to(z_v.dtype).unsqueeze(-1)], dim=-1)
        return self.proj(torch.cat([fused, structural], dim=-1))


class RelationEncoder(nn.Module):
    """One embedding per relation type: a learnable table, plus projected relation-name embeddings if given.

    Edge features depend only on the relation id, so the edge MLPs run on the [R, d] table and
    their output is gathered per edge (R is tens, edges are thousands).
    """

    def __init__(self, num_relations: int, dim: int, relation_text: Tensor | None = None):
        super().__init__()
        self.table = nn.Embedding(num_relations, dim)
        if relation_text is not None:
            if relation_text.shape[0] != num_relations:
                raise ValueError(f"relation_text has {relation_text.shape[0]} rows for {num_relations} relations")
            self.register_buffer("relation_text", relation_text.detach().clone().float())
            self.text_proj = nn.Linear(relation_text.shape[1], dim)
        else:
            self.register_buffer("relation_text", None)
            self.text_proj = None

    def forward(self) -> Tensor:
        emb = self.table.weight
        if self.text_proj is not None:
            emb = emb + self.text_proj(self.relation_text.to(emb.dtype))
        return emb


class GraphTransformerLayer(nn.Module):
    """One sparse attention layer over the observed edges, then a feed-forward block."""

    def __init__(self, hidden_dim: int, heads: int, relation_dim: int, dropout: float):
        super().__init__()
        if hidden_dim % heads:
            raise ValueError(f"hidden_dim {hidden_dim} is not divisible by heads {heads}")
        self.heads, self.head_dim = heads, hidden_dim // heads
        self.w_q = nn.Linear(hidden_dim, hidden_dim)
        self.w_k = nn.Linear(hidden_dim, hidden_dim)
        self.w_v = nn.Linear(hidden_dim, hidden_dim)
        self.edge_mlp = nn.Sequential(nn.Linear(relation_dim, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, 2 * hidden_dim))
        self.w_o = nn.Linear(hidden_dim, hidden_dim)
        self.norm_attn = nn.LayerNorm(hidden_dim)
        self.ffn = nn.Sequential(nn.Linear(hidden_dim, 2 * hidden_dim), nn.ReLU(), nn.Dropout(dropout),
                                 nn.Linear(2 * hidden_dim, hidden_dim))
        self.norm_ffn = nn.LayerNorm(hidden_dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, ops: MessagePassingOps, graph: Any, h: Tensor, relation_emb: Tensor, rel: Tensor) -> Tensor:
        n, shape = h.shape[0], (-1, self.heads, self.head_dim)
        q, k, v = self.w_q(h).view(shape), self.w_k(h).view(shape), self.w_v(h).view(shape)
        e_k, e_v = self.edge_mlp(relation_emb)[rel].view(-1, 2, self.heads, self.head_dim).unbind(1)
        h_bar = ops.attend(graph, q, k, v, e_k, e_v).reshape(n, -1)
        h = self.norm_attn(h + self.dropout(self.w_o(h_bar)))
        return self.norm_ffn(h + self.dropout(self.ffn(h)))


class SparseGraphTransformer(nn.Module):
    """Node input → ``num_layers`` × ``GraphTransformerLayer`` on an induced ``GraphView``."""

    def __init__(self, in_dim: int, num_relations: int, hidden_dim: int = 16, num_layers: int = 3, heads: int = 4,
                 dropout: float = 0.1, query_injection: str = "concat", relation_text: Tensor | None = None,
                 num_hop_buckets: int = 4):
        super().__init__()
        self.hidden_dim = hidden_dim
        self.node_input = NodeInput(in_dim, hidden_dim, query_injection, num_hop_buckets)
        self.input_dropout = nn.Dropout(dropout)
        self.relations = RelationEncoder(num_relations, hidden_dim, relation_text)
        self.layers = nn.ModuleList(GraphTransformerLayer(hidden_dim, heads, hidden_dim, dropout) for _ in range(num_layers))

    def forward(self, batch: SubgraphBatch, view: GraphView, selected: Tensor, ops: MessagePassingOps) -> Tensor:
        """Embeddings [view.num_nodes, hidden_dim] of the view's nodes; ``selected`` [n] marks V_t."""
        nodes = view.nodes
        h = self.node_input(batch.x[nodes], batch.query[batch.graph_index[nodes]], batch.hop[nodes] == 0,
                            selected[nodes], batch.hop[nodes], batch.score[nodes])
        h = self.input_dropout(h)
        graph = ops.prepare(view)  # one handle (a dgl.graph for DGLOps) shared by all layers
        relation_emb = self.relations()
        for layer in self.layers:
            h = layer(ops, graph, h, relation_emb, view.rel)
        return h
