"""The two heads on the shared encoder: expansion logits g(h_u, z_q) and final relevance scores."""
from __future__ import annotations

import torch
from torch import Tensor, nn


class QueryConditionedMLP(nn.Module):
    """MLP on [h ‖ P z_q ‖ h ⊙ P z_q]: the product term lets the head match node and query directly."""

    def __init__(self, hidden_dim: int, query_dim: int, out_dim: int, dropout: float = 0.0, out_bias: bool = True):
        super().__init__()
        self.query_proj = nn.Linear(query_dim, hidden_dim)
        self.mlp = nn.Sequential(nn.Linear(3 * hidden_dim, hidden_dim), nn.ReLU(), nn.Dropout(dropout),
                                 nn.Linear(hidden_dim, out_dim, bias=out_bias))

    def forward(self, h: Tensor, z_q: Tensor, graph: Tensor | None = None) -> Tensor:
        """``h`` [n, hidden]; ``z_q`` [n, d] (one query per node), or [G, d] with ``graph`` [n] naming
        each node's row (the projection then runs once per query instead of once per node)."""
        q = self.query_proj(z_q)
        if graph is not None:
            q = q[graph]
        return self.mlp(torch.cat([h, q, h * q], dim=-1))


class ExpansionHead(QueryConditionedMLP):
    """One logit l_t(u) per frontier node (no output bias: the frontier softmax is shift-invariant)."""

    def __init__(self, hidden_dim: int, query_dim: int, dropout: float = 0.0):
        super().__init__(hidden_dim, query_dim, 1, dropout, out_bias=False)

    def forward(self, h: Tensor, z_q: Tensor, graph: Tensor | None = None) -> Tensor:
        return super().forward(h, z_q, graph).squeeze(-1)


class ScoringHead(QueryConditionedMLP):
    """Two-class logits per node of V_T; the retrieval score is logit(v,1) − logit(v,0).

    No output bias: it would shift every score by the same constant, to which the ranking and
    the pairwise loss are blind (it would never receive a gradient).
    """

    def __init__(self, hidden_dim: int, query_dim: int, dropout: float = 0.0):
        super().__init__(hidden_dim, query_dim, 2, dropout, out_bias=False)

    @staticmethod
    def to_score(logits: Tensor) -> Tensor:
        return logits[..., 1] - logits[..., 0]
