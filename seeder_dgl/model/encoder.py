"""Query-conditioned sparse graph transformer (Exphormer-style, no expander edges, no virtual node).

Per layer, for edge j→i with relation embedding e_ij::

    Q_i = W_Q h_i,  K_j = W_K h_j,  V_j = W_V h_j,  (E^K_ij, E^V_ij) = MLP_e(e_ij)
    a_ij = Q_i·(K_j ⊙ E^K_ij)/√d_h,  α_ij = softmax_{j ∈ N(i)} a_ij
    h̄_i = Σ_j α_ij (V_j + E^V_ij)
    h_i ← Norm(h_i + W_O h̄_i);  h_i ← Norm(h_i + FFN(h_i))

The query enters every node before the first layer (``'add'``: z_v + W_q z_q; ``'concat'``:
[z_v ‖ W_q z_q ‖ cos(z_v, z_q)]; ``'product'``: [z_v ‖ z_v ⊙ W_q z_q ‖ cos(z_v, z_q)], where the
product lets every coordinate of the node interact with the query — with ``'concat'`` a linear
projection can only add the same query offset to every node), together with cheap structural
features and an optional node-type embedding, then one projection to the hidden width.

With ``query_relations`` the relation embeddings are conditioned on the query (FiLM:
e_{r,q} = e_r ⊙ (1 + W_γ z_q) + W_β z_q), so the question decides which relations the attention
follows — what multi-hop questions need, since the answer is a relation path away from the seed.
With ``edge_direction`` each edge's relation embedding also says which way its stored relationship
points (e_r + e_forward or e_r + e_backward): every relationship is in the subgraph both ways, and
"the successor of X" reads ``successor`` forward where "the predecessor of X" reads it backward.
The same encoder serves every expansion step and the final scoring.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seeder_dgl.model.batch import GraphView, SubgraphBatch
from seeder_dgl.model.ops import MessagePassingOps
from seeder_dgl.subgraph.record import NUM_DIRECTIONS

QUERY_INJECTIONS = ("add", "concat", "product")


class NodeInput(nn.Module):
    """Initial node state: query injection plus structural features, projected to ``hidden_dim``.

    Structural features (all free given the K-hop subgraph): seed flag, "already selected"
    flag (selected V_t vs frontier U_t: the policy must know which nodes it may still add),
    hop one-hot (clamped to ``num_hop_buckets - 1``) and the K-hop-with-filtering score. With
    ``num_node_types`` > 0 a learned embedding of the node's type is added after the projection.

    The projection is linear, so it splits into a part that depends on the node and its query
    only (``static``: computed once per batch of queries, shared by every trajectory and step)
    and a part that depends on the step (``forward``: the structural features).
    """

    def __init__(self, in_dim: int, hidden_dim: int, query_injection: str = "concat", num_hop_buckets: int = 4,
                 num_node_types: int = 0):
        super().__init__()
        if query_injection not in QUERY_INJECTIONS:
            raise ValueError(f"query_injection must be one of {QUERY_INJECTIONS}, not {query_injection!r}")
        self.query_injection = query_injection
        self.num_hop_buckets = num_hop_buckets
        self.in_dim = in_dim
        self.w_q = nn.Linear(in_dim, in_dim, bias=False)
        self.fused = in_dim if query_injection == "add" else 2 * in_dim + 1
        self.num_structural = 3 + num_hop_buckets
        self.proj = nn.Linear(self.fused + self.num_structural, hidden_dim)
        self.node_type = nn.Embedding(num_node_types, hidden_dim) if num_node_types > 0 else None
        if self.node_type is not None:
            nn.init.normal_(self.node_type.weight, std=0.1)

    def static(self, z_v: Tensor, query: Tensor, graph: Tensor) -> Tensor:
        """The query-injection part of the projection [n, hidden] (bias included) for nodes with
        embeddings ``z_v`` [n, d] in graphs ``graph`` [n] whose queries are ``query`` [G, d]."""
        w = self.proj.weight
        d = self.in_dim
        q = self.w_q(query)  # [G, d]: once per query, not per node
        if self.query_injection == "add":
            # (z_v + q) W^T = z_v W^T + (q W^T)[graph]
            return F.linear(z_v, w[:, :d], self.proj.bias) + F.linear(q, w[:, :d])[graph]
        cos = cosine_to_query(z_v, query, graph).unsqueeze(-1)
        out = F.linear(z_v, w[:, :d], self.proj.bias) + cos * w[:, 2 * d]
        if self.query_injection == "product":
            return out + F.linear(z_v * q[graph], w[:, d:2 * d])
        return out + F.linear(q, w[:, d:2 * d])[graph]

    def forward(self, static: Tensor, seed: Tensor, selected: Tensor, hop: Tensor, score: Tensor,
                node_type: Tensor | None = None) -> Tensor:
        """``static`` rows of the nodes [n, hidden] plus the structural part of the projection."""
        dtype = static.dtype
        # A comparison, not F.one_hot: that one checks the range of its input first (a sync and a
        # third of this method's time on the small graphs of a live query).
        buckets = torch.arange(self.num_hop_buckets, device=hop.device)
        hop_onehot = (hop.clamp(0, self.num_hop_buckets - 1).unsqueeze(-1) == buckets).to(dtype)
        structural = torch.cat([seed.to(dtype).unsqueeze(-1), selected.to(dtype).unsqueeze(-1),
                                hop_onehot, score.to(dtype).unsqueeze(-1)], dim=-1)
        h = static + F.linear(structural, self.proj.weight[:, self.fused:])
        if self.node_type is not None and node_type is not None:
            h = h + self.node_type(node_type)
        return h


def cosine_to_query(z_v: Tensor, query: Tensor, graph: Tensor, eps: float = 1e-8) -> Tensor:
    """cos(z_v, z_q) [n] of every node with its graph's query: ``F.cosine_similarity`` written as a
    dot product over norms, a quarter of its time on the CPU (it materialises more intermediates)."""
    q = query.index_select(0, graph)
    norms = torch.linalg.vector_norm(z_v, dim=-1) * torch.linalg.vector_norm(query, dim=-1).index_select(0, graph)
    return torch.linalg.vecdot(z_v, q) / norms.clamp_min(eps)


def relation_degrees(src: Tensor, rel: Tensor, num_nodes: int, num_relations: int) -> Tensor:
    """log(1 + number of edges of each relation type at each node) [n, R], over the whole subgraph.

    The encoder sees only G[V_t ∪ U_t], so without this a frontier node does not know what lies
    beyond it (a movie with a release year, a person who directed films). Attention normalises
    over neighbours and cannot count them; this gives the counts directly.
    """
    flat = src * num_relations + rel.clamp(0, num_relations - 1)
    counts = torch.bincount(flat, minlength=num_nodes * num_relations)[: num_nodes * num_relations]
    return torch.log1p(counts.reshape(num_nodes, num_relations).to(torch.float32))


def relation_path_scores(batch: SubgraphBatch) -> Tensor:
    """π [n]: how well the best K-hop path from a seed to each node follows the question's relations.

    π(seed) = 1 and, hop by hop, π(u) = max over edges v -r-> u from the previous hop of
    π(v) · p_h(r | q), with p the relation terms the subgraph's K-hop followed
    (``SubgraphBatch.relation_scores``, a learned relation prior's). A node reached only through
    relations the question does not ask for gets π near 0, an answer at the end of the asked-for
    path near 1. All zeros when the batch has no relation scores.
    """
    pi = torch.zeros(batch.num_nodes, dtype=torch.float32, device=batch.device)
    scores = batch.relation_scores
    if scores is None:
        return pi
    scores = scores.to(torch.float32)
    pi[batch.seed_mask] = 1.0
    hop = batch.hop.to(torch.int64)
    num_hops, num_rel = scores.shape[1], scores.shape[2]
    graph_of_edge = batch.graph_index[batch.dst]
    known = batch.rel < num_rel  # the unknown-relation slot and types added after fitting score 0
    for h in range(1, num_hops + 1):
        step = (hop[batch.src] == h - 1) & (hop[batch.dst] == h) & known
        if not bool(step.any()):
            continue
        src, dst = batch.src[step], batch.dst[step]
        value = pi[src] * scores[graph_of_edge[step], h - 1, batch.rel[step]]
        pi = pi.scatter_reduce(0, dst, value, reduce="amax", include_self=True)
    return pi


def path_end_scores(batch: SubgraphBatch, pi: Tensor) -> Tensor:
    """ρ [n]: how well a node *ends* the path the question asks for: ρ(u) = π(u) · stop_h(q) with
    h = hop(u) and stop_h(q) = 1 − max_r p_{h+1}(r | q), the prior's belief that the path does not go
    on past hop h (1 at the subgraph's last hop). π alone is highest near the seed, since every
    step multiplies it by a probability; ρ picks the hop the question stops at (a 1-hop question's
    answers, not its 2-hop neighbours). All zeros when the batch has no relation scores.
    """
    scores = batch.relation_scores
    if scores is None:
        return torch.zeros_like(pi)
    go_on = scores.to(torch.float32).amax(dim=2)  # [B, hops]: p that the path takes step h+1
    go_on = torch.cat([go_on, go_on.new_zeros(go_on.shape[0], 1)], dim=1)  # nothing past the last hop
    hop = batch.hop.to(torch.int64).clamp(0, go_on.shape[1] - 1)
    return pi * (1.0 - go_on[batch.graph_index, hop]).clamp_min(0.0)


class RelationEncoder(nn.Module):
    """One embedding per relation type: a learnable table, plus projected relation-name embeddings if given.

    Edge features depend only on the relation id, so the edge MLPs run on the [R, d] table and
    their output is gathered per edge (R is tens, edges are thousands).
    """

    def __init__(self, num_relations: int, dim: int, relation_text: Tensor | None = None,
                 query_dim: int | None = None, edge_direction: bool = False, edge_prior: bool = False):
        super().__init__()
        self.num_relations = num_relations
        self.table = nn.Embedding(num_relations, dim)
        # With ``edge_direction``: one more vector per direction an edge is read in (unknown, as
        # stored, against it), added to its relation's (``rows``), starting at zero.
        self.direction = nn.Embedding(NUM_DIRECTIONS, dim) if edge_direction else None
        if self.direction is not None:
            nn.init.zeros_(self.direction.weight)
        if edge_prior and not edge_direction:
            raise ValueError("edge_prior needs edge_direction (its rows are the direction-aware ones)")
        # With ``edge_prior``: [p, √p] of the prior's p_h(r | q) for the hop h the edge steps into,
        # projected and added to its row (``rows``), starting at zero.
        self.prior_step = nn.Linear(2, dim, bias=False) if edge_prior else None
        if self.prior_step is not None:
            nn.init.zeros_(self.prior_step.weight)
        # FiLM by the query (query_dim set): e_{r,q} = e_r ⊙ (1 + W_γ z_q) + W_β z_q, starting as e_r.
        self.film = nn.Linear(query_dim, 2 * dim) if query_dim else None
        if self.film is not None:
            nn.init.zeros_(self.film.weight)
            nn.init.zeros_(self.film.bias)
        if relation_text is not None:
            if relation_text.shape[0] != num_relations:
                raise ValueError(f"relation_text has {relation_text.shape[0]} rows for {num_relations} relations")
            self.register_buffer("relation_text", relation_text.detach().clone().float())
            self.text_proj = nn.Linear(relation_text.shape[1], dim)
        else:
            self.register_buffer("relation_text", None)
            self.text_proj = None

    def base(self) -> Tensor:
        """[R, d]: the relation embeddings before any query conditioning."""
        emb = self.table.weight
        if self.text_proj is not None:
            emb = emb + self.text_proj(self.relation_text.to(emb.dtype))
        return emb

    def forward(self, z_q: Tensor | None = None) -> Tensor:
        """[R, d], or [G, R, d] conditioned on the queries ``z_q`` [G, q] when built with ``query_dim``."""
        emb = self.base()
        if self.film is None or z_q is None:
            return emb
        gamma, beta = self.film(z_q).unsqueeze(1).chunk(2, dim=-1)  # [G, 1, d] each
        return emb.unsqueeze(0) * (1.0 + gamma) + beta

    def rows(self, rel: Tensor, direction: Tensor, graph: Tensor | None, z_q: Tensor | None,
             step: Tensor | None = None, scores: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Direction-aware relation embeddings for the edges: (rows [u, d], the row of each edge [m]).
        A row is e_r + e_direction, FiLM-ed by its graph's query when built with ``query_dim``.

        With ``edge_prior``, ``step`` [m] and ``scores`` [G, H, R'], a row is also per hop: plus the
        projection of [p, √p] with p = scores[graph, step − 1, r], the prior's belief that the
        question's path takes relation r at hop ``step`` (1..H; 0 for an edge that does not step from
        one hop to the next, or a relation the prior does not know: p = 0). The prior's reading of
        each hop enters the attention edge by edge, so a wording the policy never saw still follows
        the relations the prior reads in it, hop by hop.

        The whole [G, S, 3, R] table when it has no more rows than there are edges (a few relation
        types: sorting the edges would cost more than the spare rows); else only the (graph, hop,
        direction, relation) keys present, which on a graph of hundreds of relation types are a
        small part of the table. The rows hold the same values either way."""
        num_rel, num_dir = self.num_relations, self.direction.num_embeddings
        span = num_dir * num_rel
        conditioned = self.film is not None and z_q is not None and graph is not None
        prior = step is not None and scores is not None and self.prior_step is not None
        num_steps = scores.shape[1] + 1 if prior else 1
        key = direction.clamp(0, num_dir - 1) * num_rel + rel
        if prior:
            key = key + span * step
        num_graphs = 1
        if conditioned or prior:
            key = key + graph * (span * num_steps)
            num_graphs = z_q.shape[0] if conditioned else scores.shape[0]
        base = self.base()
        dim = base.shape[-1]
        if num_graphs * num_steps * span <= key.numel():
            emb = (base.unsqueeze(0) + self.direction.weight.unsqueeze(1)).reshape(1, 1, num_dir, num_rel, dim)
            if conditioned:
                gamma, beta = self.film(z_q).reshape(num_graphs, 1, 1, 1, 2 * dim).chunk(2, dim=-1)
                emb = emb * (1.0 + gamma) + beta
            if prior:
                known = min(scores.shape[2], num_rel)
                p = scores.new_zeros(num_graphs, num_steps, num_rel)
                p[:, 1:, :known] = scores[:, :, :known]
                p = p.to(emb.dtype).clamp_min(0.0)
                emb = emb + self.prior_step(torch.stack([p, p.sqrt()], dim=-1)).unsqueeze(2)  # [G, S, 1, R, d]
            return emb.expand(num_graphs, num_steps, num_dir, num_rel, dim).reshape(-1, dim), key
        unique, inverse = torch.unique(key, return_inverse=True)
        r = unique % num_rel
        emb = base.index_select(0, r) + self.direction(torch.div(unique, num_rel, rounding_mode="floor") % num_dir)
        g = torch.div(unique, span * num_steps, rounding_mode="floor")
        if conditioned:
            gamma, beta = self.film(z_q).index_select(0, g).chunk(2, dim=-1)
            emb = emb * (1.0 + gamma) + beta
        if prior:
            s = torch.div(unique, span, rounding_mode="floor") % num_steps
            known = (s > 0) & (r < scores.shape[2])
            p = scores[g, (s - 1).clamp_min(0), r.clamp_max(scores.shape[2] - 1)].to(emb.dtype)
            p = torch.where(known, p, torch.zeros_like(p)).clamp_min(0.0)
            emb = emb + self.prior_step(torch.stack([p, p.sqrt()], dim=-1))
        return emb, inverse


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
        # One matrix product for Q, K and V (their weights side by side) instead of three; the
        # edge MLP runs on the relation table, whose rows the attention reads per edge.
        weight = torch.cat([self.w_q.weight, self.w_k.weight, self.w_v.weight])
        bias = torch.cat([self.w_q.bias, self.w_k.bias, self.w_v.bias])
        h_bar = ops.attend_packed(graph, F.linear(h, weight, bias), self.edge_mlp(relation_emb), rel, self.heads)
        h = self.norm_attn(h + self.dropout(self.w_o(h_bar)))
        return self.norm_ffn(h + self.dropout(self.ffn(h)))


class SparseGraphTransformer(nn.Module):
    """Node input → ``num_layers`` × ``GraphTransformerLayer`` on an induced ``GraphView``."""

    def __init__(self, in_dim: int, num_relations: int, hidden_dim: int = 16, num_layers: int = 3, heads: int = 4,
                 dropout: float = 0.1, query_injection: str = "concat", relation_text: Tensor | None = None,
                 num_hop_buckets: int = 4, num_node_types: int = 0, query_relations: bool = False,
                 lookahead: bool = False, path_prior: bool = False, path_end: bool = False,
                 edge_direction: bool = False, edge_prior: bool = False):
        super().__init__()
        self.hidden_dim = hidden_dim
        self.node_input = NodeInput(in_dim, hidden_dim, query_injection, num_hop_buckets, num_node_types)
        # Relation-degree lookahead (``relation_degrees``), added to the static node input.
        self.lookahead = nn.Linear(num_relations, hidden_dim, bias=False) if lookahead else None
        # Relation-path score π (``relation_path_scores``) and its square root, added to the static
        # input; with ``path_end`` also the path-end score ρ (``path_end_scores``) and its root.
        self.path_end = bool(path_prior and path_end)
        self.path_prior = nn.Linear(4 if self.path_end else 2, hidden_dim, bias=False) if path_prior else None
        self.input_dropout = nn.Dropout(dropout)
        self.relations = RelationEncoder(num_relations, hidden_dim, relation_text,
                                         query_dim=in_dim if query_relations else None, edge_direction=edge_direction,
                                         edge_prior=edge_prior)
        self.layers = nn.ModuleList(GraphTransformerLayer(hidden_dim, heads, hidden_dim, dropout) for _ in range(num_layers))

    def static(self, batch: SubgraphBatch) -> Tensor:
        """``NodeInput.static`` of every node of ``batch`` [n, hidden]: compute it once per batch of
        queries and pass it to ``forward`` for every step and trajectory (``SubgraphBatch.origin``)."""
        out = self.node_input.static(batch.x, batch.query, batch.graph_index)
        if self.lookahead is not None:
            degrees = relation_degrees(batch.src, batch.rel, batch.num_nodes, self.lookahead.in_features)
            out = out + self.lookahead(degrees.to(out.dtype))
        if self.path_prior is not None:
            pi = relation_path_scores(batch)
            features = [pi, pi.sqrt()]
            if self.path_end:
                rho = path_end_scores(batch, pi)
                features += [rho, rho.sqrt()]
            out = out + self.path_prior(torch.stack(features, dim=-1).to(out.dtype))
        return out

    def forward(self, batch: SubgraphBatch, view: GraphView, selected: Tensor, ops: MessagePassingOps,
                static: Tensor | None = None) -> Tensor:
        """Embeddings [view.num_nodes, hidden_dim] of the view's nodes; ``selected`` [n] marks V_t.

        ``static``: ``self.static`` of the batch ``batch`` was replicated from (rows addressed by
        ``batch.origin``), or of ``batch`` itself; computed here when not given.
        """
        nodes = view.nodes
        if static is None:
            static, rows = self.static(batch), nodes
        else:
            rows = nodes if batch.origin is None else batch.origin[nodes]
        node_type = batch.node_type[nodes] if batch.node_type is not None else None
        h = self.node_input(static.index_select(0, rows), batch.hop[nodes] == 0, selected[nodes], batch.hop[nodes],
                            batch.score[nodes], node_type)
        h = self.input_dropout(h)
        graph = ops.prepare(view)  # one handle (a dgl.graph for DGLOps) shared by all layers
        rel = view.rel
        if self.relations.direction is not None:
            direction = view.direction if view.direction is not None else torch.zeros_like(rel)
            graph_of_edge = batch.graph_index[nodes[view.dst]]
            step = scores = None
            if self.relations.prior_step is not None:
                scores = batch.relation_scores
                if scores is None:  # subgraphs grown without a prior: p = 0 on every edge
                    scores = torch.zeros(batch.num_graphs, 1, 1, dtype=batch.x.dtype, device=batch.device)
                hop_src, hop_dst = batch.hop[nodes[view.src]].to(torch.int64), batch.hop[nodes[view.dst]].to(torch.int64)
                step = torch.maximum(hop_src, hop_dst)
                step = torch.where(((hop_src - hop_dst).abs() == 1) & (step <= scores.shape[1]), step,
                                   torch.zeros_like(step))
            relation_emb, rel = self.relations.rows(rel, direction, graph_of_edge, batch.query, step, scores)
        elif self.relations.film is not None:
            # One relation table per graph: edge e reads row (graph of e) * R + relation of e.
            relation_emb = self.relations(batch.query).reshape(-1, self.hidden_dim)
            rel = rel + self.relations.num_relations * batch.graph_index[nodes[view.dst]]
        else:
            relation_emb = self.relations()
        for layer in self.layers:
            h = layer(ops, graph, h, relation_emb, rel)
        return h
