"""SeedER's policy network: shared encoder + expansion head + scoring head, and the frontier rule.

The rollout loop (sampling, log-probabilities, trajectories) lives in
``seeder_dgl.training.rollout``; this module answers the two per-step questions:
``expand`` — which frontier nodes exist at step t and what are their logits — and ``score`` —
how relevant is each selected node once expansion is over.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torch import Tensor, nn

from seeder_dgl.model.batch import SubgraphBatch
from seeder_dgl.model.encoder import SparseGraphTransformer
from seeder_dgl.model.heads import ExpansionHead, ScoringHead
from seeder_dgl.model.ops import MessagePassingOps, select_ops


@dataclass
class Frontier:
    """U_t of every graph in the batch, grouped by graph, best K-hop score first within a graph."""

    nodes: Tensor
    """int64 [f]: batch-node index of each frontier node."""
    graph: Tensor
    """int64 [f]: its graph."""
    position: Tensor
    """int64 [f]: its rank inside its graph's frontier (0 = highest K-hop score)."""
    num_graphs: int
    width: int
    """Largest frontier over the graphs: the width of the padded [G, width] layout."""

    def to_dense(self, values: Tensor, fill: float | int) -> Tensor:
        """Scatter per-frontier-node ``values`` [f] into a padded [G, width] matrix."""
        out = values.new_full((self.num_graphs, self.width), fill)
        out[self.graph, self.position] = values
        return out


@dataclass
class Expansion:
    frontier: Frontier
    logits: Tensor
    """float [f]: l_t(u) for each frontier node, in ``frontier.nodes`` order."""


@dataclass
class NodeScores:
    nodes: Tensor
    """int64 [k]: batch-node index of each scored node (the selected ones), increasing."""
    graph: Tensor
    """int64 [k]: its graph."""
    logits: Tensor
    """float [k, 2]: two-class logits."""
    scores: Tensor
    """float [k]: s_v = logit(v,1) − logit(v,0)."""


def capped_frontier(batch: SubgraphBatch, selected: Tensor, cap: int | None) -> Frontier:
    """``U = N(V) \\ V`` inside each subgraph, keeping per graph the ``cap`` nodes of highest K-hop score.

    Edges are stored in both directions, so following ``src → dst`` from V reaches every neighbour.
    Ties in score keep the lower local index (the K-hop selection order) thanks to stable sorts.
    """
    reached = torch.zeros_like(selected)
    reached[batch.dst[selected[batch.src]]] = True
    # Read the candidates in the batch's frontier order: grouped by graph, best score first inside.
    order = batch.frontier_order
    nodes = order[torch.nonzero((reached & ~selected).index_select(0, order), as_tuple=False).squeeze(1)]
    graph = batch.graph_index[nodes]
    counts = torch.bincount(graph, minlength=batch.num_graphs)
    position = torch.arange(nodes.numel(), device=nodes.device) - (torch.cumsum(counts, 0) - counts)[graph]
    if cap is not None:
        keep = position < cap
        nodes, graph, position = nodes[keep], graph[keep], position[keep]
        counts = counts.clamp(max=cap)
    width = int(counts.max()) if counts.numel() else 0
    return Frontier(nodes=nodes, graph=graph, position=position, num_graphs=batch.num_graphs, width=width)


class SeederPolicy(nn.Module):
    """Encoder + expansion head g(h_u, z_q) + scoring head φ(h_v, z_q).

    ``expansion_sizes`` (c_t) and ``frontier_caps`` (cap_t) define the horizon T = len(c).
    """

    def __init__(self, in_dim: int, num_relations: int, hidden_dim: int = 16, num_layers: int = 3, heads: int = 4,
                 dropout: float = 0.1, expansion_sizes: Sequence[int] = (7, 10),
                 frontier_caps: Sequence[int | None] | None = (20, 50), query_injection: str = "concat",
                 relation_text: Tensor | None = None, num_hop_buckets: int = 4, num_node_types: int = 0,
                 query_relations: bool = False, lookahead: bool = False, path_prior: bool = False,
                 path_end: bool = False, edge_direction: bool = False, edge_prior: bool = False):
        super().__init__()
        self.expansion_sizes = tuple(int(c) for c in expansion_sizes)
        caps = tuple(frontier_caps) if frontier_caps is not None else (None,) * len(self.expansion_sizes)
        if len(caps) != len(self.expansion_sizes):
            raise ValueError(f"{len(caps)} frontier caps for {len(self.expansion_sizes)} expansion steps")
        self.frontier_caps = caps
        self.encoder = SparseGraphTransformer(in_dim, num_relations, hidden_dim, num_layers, heads, dropout,
                                              query_injection, relation_text, num_hop_buckets, num_node_types,
                                              query_relations, lookahead, path_prior, path_end, edge_direction,
                                              edge_prior)
        self.expansion_head = ExpansionHead(hidden_dim, in_dim, dropout)
        self.scoring_head = ScoringHead(hidden_dim, in_dim, dropout)

    @classmethod
    def from_config(cls, cfg, in_dim: int, num_relations: int,
                    relation_text: Tensor | None = None, num_node_types: int = 0) -> "SeederPolicy":
        """The policy a ``training.config.TrainConfig`` describes (read by field: the model layer does
        not import training). ``num_node_types``: type slots (vocabulary + unknown); used only when
        ``cfg.node_types``."""
        if cfg.relation_text and relation_text is None:
            raise ValueError("cfg.relation_text is set: pass the [num_relations, d] relation-name embeddings")
        return cls(in_dim, num_relations, hidden_dim=cfg.hidden_dim, num_layers=cfg.num_layers, heads=cfg.heads,
                   dropout=cfg.dropout, expansion_sizes=cfg.expansion_sizes, frontier_caps=cfg.frontier_caps,
                   query_injection=cfg.query_injection, relation_text=relation_text if cfg.relation_text else None,
                   num_node_types=num_node_types if cfg.node_types else 0, query_relations=cfg.query_relations,
                   lookahead=cfg.lookahead, path_prior=cfg.path_prior, path_end=cfg.path_end,
                   edge_direction=cfg.edge_direction, edge_prior=cfg.edge_prior)

    @property
    def num_steps(self) -> int:
        return len(self.expansion_sizes)

    def frontier(self, batch: SubgraphBatch, selected: Tensor, step: int) -> Frontier:
        return capped_frontier(batch, selected, self.frontier_caps[step])

    def expand(self, batch: SubgraphBatch, selected: Tensor, step: int,
               ops: MessagePassingOps | None = None, static: Tensor | None = None) -> Expansion:
        """Frontier U_t of ``selected`` (= V_t, bool [n]) and its logits, encoding G_t = G[V_t ∪ U_t].

        ``static``: ``self.encoder.static`` of the batch ``batch`` was replicated from (see there).
        """
        ops = ops or select_ops(batch.device)
        frontier = self.frontier(batch, selected, step)
        active = selected.clone()
        active[frontier.nodes] = True
        view = batch.induced(active)
        h = self.encoder(batch, view, selected, ops, static)
        local = torch.searchsorted(view.nodes, frontier.nodes)  # view.nodes is increasing
        logits = self.expansion_head(h[local], batch.query, frontier.graph)
        return Expansion(frontier=frontier, logits=logits)

    def score(self, batch: SubgraphBatch, selected: Tensor, ops: MessagePassingOps | None = None,
              static: Tensor | None = None) -> NodeScores:
        """Final scores of the nodes of ``selected`` (= V_T), encoding G[V_T]."""
        ops = ops or select_ops(batch.device)
        view = batch.induced(selected)
        h = self.encoder(batch, view, selected, ops, static)
        graph = batch.graph_index[view.nodes]
        logits = self.scoring_head(h, batch.query, graph)
        return NodeScores(nodes=view.nodes, graph=graph, logits=logits, scores=ScoringHead.to_score(logits))
