"""SeedER's training signals as small batch-tensor functions.

* reward: Recall@Any of the final selected set V_T, optionally plus ``path_recall``: credit for the
  connector nodes on shortest seed-to-answer paths, so a trajectory that took the right first hops
  is told so even when its last step missed;
* ``reinforce_loss``: group-centred REINFORCE, L_RL = −1/M Σ_m Â^(m) Σ_t log π(a_t^(m));
* ``bpr_loss``: pairwise ranking of the final scores inside each retrieved set;
* ``listwise_loss``: softmax ranking of the final scores over each retrieved set.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from seeder_dgl.model.ops import scatter_softmax

BASELINES = ("group", "greedy", "none")


def recall_at_any(selected: Tensor, labels: Tensor, graph_index: Tensor, num_answers: Tensor) -> Tensor:
    """Per graph: answers inside ``selected`` ÷ |A(q)|, 0 when the query has no answers. Returns [G]."""
    hits = torch.zeros(num_answers.shape[0], dtype=torch.float32, device=selected.device)
    hits = hits.index_add(0, graph_index, (selected & labels).to(hits.dtype))
    denom = num_answers.to(hits.dtype)
    return torch.where(denom > 0, hits / denom.clamp(min=1), torch.zeros_like(hits))


def hop_distance(src: Tensor, dst: Tensor, start: Tensor, max_hops: int) -> Tensor:
    """Breadth-first hop counts [n] from the nodes of ``start`` (bool [n]) along the edges
    ``src → dst``, up to ``max_hops``; nodes farther away (or unreachable) get ``max_hops + 1``."""
    dist = torch.full(start.shape, max_hops + 1, dtype=torch.int64, device=start.device)
    dist[start] = 0
    for hop in range(1, max_hops + 1):
        reached = torch.zeros_like(start)
        reached[dst[dist[src] == hop - 1]] = True
        dist = torch.where(reached & (dist > hop), torch.full_like(dist, hop), dist)
    return dist


def shortest_path_nodes(src: Tensor, dst: Tensor, seeds: Tensor, labels: Tensor, graph_index: Tensor,
                        num_graphs: int, max_hops: int) -> Tensor:
    """bool [n]: the non-seed nodes on a shortest seed-to-answer path of at most ``max_hops`` edges,
    inside each graph (answers included). Edges must be present in both directions.

    v is on such a path iff d_seed(v) + d_answer(v) equals the graph's seed-to-answer distance D.
    """
    d_seed = hop_distance(src, dst, seeds, max_hops)
    d_answer = hop_distance(src, dst, labels, max_hops)
    far = max_hops + 1
    nearest = torch.full((num_graphs,), far, dtype=torch.int64, device=seeds.device)
    nearest = nearest.scatter_reduce(0, graph_index[labels], d_seed[labels], reduce="amin")
    target = nearest[graph_index]
    return (d_seed + d_answer == target) & (target < far) & ~seeds


def path_recall(selected: Tensor, on_path: Tensor, graph_index: Tensor, num_graphs: int) -> Tensor:
    """Per graph: the fraction of its ``on_path`` nodes inside ``selected`` (0 without any). [G]."""
    hits = torch.zeros(num_graphs, dtype=torch.float32, device=selected.device)
    hits = hits.index_add(0, graph_index, (selected & on_path).to(hits.dtype))
    total = torch.zeros_like(hits).index_add(0, graph_index, on_path.to(hits.dtype))
    return torch.where(total > 0, hits / total.clamp(min=1), torch.zeros_like(hits))


def group_advantage(reward: Tensor) -> Tensor:
    """Â^(m) = R^(m) − mean_j R^(j), per query; ``reward`` is [B, M]."""
    return reward - reward.mean(dim=1, keepdim=True)


def advantage(reward: Tensor, baseline: str = "group", baseline_reward: Tensor | None = None) -> Tensor:
    """Advantage of each trajectory [B, M] (no gradient) under the chosen baseline."""
    reward = reward.detach()
    if baseline == "group":
        return group_advantage(reward)
    if baseline == "greedy":
        if baseline_reward is None:
            raise ValueError("baseline='greedy' needs the greedy rollout's reward [B]")
        return reward - baseline_reward.detach().to(reward.dtype).view(-1, 1)
    if baseline == "none":
        return reward
    raise ValueError(f"baseline must be one of {BASELINES}, not {baseline!r}")


def reinforce_loss(logp: Tensor, reward: Tensor, baseline: str = "group",
                   baseline_reward: Tensor | None = None) -> Tensor:
    """−1/M Σ_m Â^(m) log π(τ^(m)), averaged over the B queries.

    ``logp`` [B, M] is each trajectory's log-probability Σ_t log π(a_t | s_t); ``reward`` [B, M].
    """
    adv = advantage(reward, baseline, baseline_reward).to(logp.dtype)
    return -(adv * logp).mean(dim=1).mean()


def bpr_loss(scores: Tensor, labels: Tensor, graph_index: Tensor, margin: float | None = None) -> Tensor:
    """Pairwise ranking loss over (positive, negative) pairs of the same graph.

    Per pair d = s_pos − s_neg: BPR −log σ(d) = softplus(−d), or with ``margin`` γ: softplus(γ − d).
    Averaged over the pairs of each graph, then over the graphs that have at least one pair.
    With no pair at all the result is a zero that still carries a graph to ``scores``.
    """
    if scores.numel() == 0:
        return scores.sum()
    num_graphs = int(graph_index.max()) + 1
    # Pad each graph's scores into one row of a [G, K] matrix; K (the retrieved set) is small.
    order = torch.sort(graph_index, stable=True).indices
    graph = graph_index[order]
    counts = torch.bincount(graph, minlength=num_graphs)
    position = torch.arange(graph.numel(), device=graph.device) - (torch.cumsum(counts, 0) - counts)[graph]
    width = int(counts.max())
    dense = scores.new_zeros(num_graphs, width)
    dense[graph, position] = scores[order]
    pos = torch.zeros(num_graphs, width, dtype=torch.bool, device=scores.device)
    neg = torch.zeros_like(pos)
    pos[graph, position] = labels[order].bool()
    neg[graph, position] = ~labels[order].bool()
    pair = pos.unsqueeze(2) & neg.unsqueeze(1)  # [G, K_pos, K_neg]
    diff = dense.unsqueeze(2) - dense.unsqueeze(1)
    per_pair = F.softplus(-diff) if margin is None else F.softplus(margin - diff)
    num_pairs = pair.sum(dim=(1, 2))
    per_graph = (per_pair * pair).sum(dim=(1, 2)) / num_pairs.clamp(min=1)
    has_pairs = num_pairs > 0
    if not bool(has_pairs.any()):
        return scores.sum() * 0.0
    return per_graph[has_pairs].mean()


def listwise_loss(scores: Tensor, labels: Tensor, graph_index: Tensor) -> Tensor:
    """Softmax ranking loss: −log(Σ_pos e^{s} / Σ_all e^{s}) per graph, averaged over the graphs
    that hold a positive and a negative.

    Where BPR averages over every (positive, negative) pair, and so rewards pushing any negative
    below any positive (a ranking's AUC), this loss falls only when the positives take the
    softmax mass of the whole retrieved set: what Hit@1 and MRR measure.
    With no such graph the result is a zero that still carries a graph to ``scores``.
    """
    if scores.numel() == 0:
        return scores.sum()
    num_graphs = int(graph_index.max()) + 1
    labels = labels.bool()
    prob = scatter_softmax(scores, graph_index, num_graphs)
    positive = prob.new_zeros(num_graphs).index_add(0, graph_index, torch.where(labels, prob, torch.zeros_like(prob)))
    npos = torch.zeros(num_graphs, dtype=torch.int64, device=scores.device).index_add(0, graph_index, labels.long())
    count = torch.bincount(graph_index, minlength=num_graphs)
    valid = (npos > 0) & (npos < count)
    if not bool(valid.any()):
        return scores.sum() * 0.0
    return -torch.log(positive[valid]).mean()
