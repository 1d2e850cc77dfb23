"""Non-learned first-stage retrievers (paper appendix "Baseline Methods"), all in memory.

Every retriever answers ``retrieve(query_emb, k) -> [(node_id, score), ...]``: at most ``k``
distinct ids, score descending, ties by smaller id (PPR+MMR: selection order, whose MMR values
are non-increasing). Similarities follow ``memory``'s float64 rules. Parameters the paper does
not state are marked "project choice" below and in the lead's notes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence, runtime_checkable

import numpy as np
import scipy.sparse as sp

from seeder_dgl.retrieval.memory import (
    GraphArrays,
    QueryScorer,
    dense_topk,
    induced_edges,
    khop_select,
    max_by_group,
    node_similarity,
    rank_by_score,
    rank_desc,
    relation_similarity,
    unit_query,
)

Ranking = list[tuple[int, float]]


@runtime_checkable
class Retriever(Protocol):
    name: str

    def retrieve(self, query_emb: np.ndarray, k: int) -> Ranking: ...


# ---------------------------------------------------------------------------------------------
# Shared: a bounded ego graph around the dense seeds
# ---------------------------------------------------------------------------------------------
@dataclass
class EgoGraph:
    node_ids: np.ndarray
    """int64 [n]: seeds (dense order), then each hop's nodes by similarity (desc, id asc)."""
    hop: np.ndarray
    """int8 [n]: BFS distance from the seed set."""
    sim: np.ndarray
    """float64 [n]: sim(q, v)."""
    src: np.ndarray
    """int64 [m]: local source of each edge; every edge in both directions."""
    dst: np.ndarray
    rel: np.ndarray

    @property
    def num_nodes(self) -> int:
        return int(self.node_ids.shape[0])


def _distinct(ids: np.ndarray, size: int) -> np.ndarray:
    """Sorted distinct ids: a dense mask for big inputs (hubs), a sort for small ones."""
    if ids.shape[0] * 16 < size:
        return np.unique(ids)
    mask = np.zeros(size, dtype=bool)
    mask[ids] = True
    return np.flatnonzero(mask)


def ego_graph(graph: GraphArrays, node_emb: np.ndarray, q_unit: np.ndarray, seeds: np.ndarray,
              seed_sim: np.ndarray, hops: int = 2, max_nodes: int = 2000) -> EgoGraph:
    """BFS ``hops`` levels from ``seeds`` (both edge directions), at most ``max_nodes`` nodes.

    When a level would overflow the bound, only its most query-similar nodes (ties by id) are
    kept (project choice: hub neighbourhoods would otherwise be whole-graph sized), and only the
    kept ones are expanded further.
    """
    scorer = QueryScorer(node_emb, q_unit)
    seen = np.zeros(graph.num_nodes, dtype=bool)
    seen[seeds] = True
    ids, hop, sims = [seeds], [np.zeros(seeds.shape[0], np.int8)], [seed_sim]
    frontier, total = seeds, seeds.shape[0]
    for h in range(1, hops + 1):
        room = max_nodes - total
        if room <= 0 or frontier.size == 0:
            break
        _, nbr, _ = graph.gather(frontier)
        new = _distinct(nbr[~seen[nbr]], graph.num_nodes)
        if new.size == 0:
            break
        keep, s, _ = scorer.select(new, room)  # the `room` most similar, float32-prefiltered
        frontier = new[keep]
        seen[frontier] = True
        ids.append(frontier)
        hop.append(np.full(frontier.shape[0], h, np.int8))
        sims.append(s)
        total += frontier.shape[0]
    node_ids = np.concatenate(ids)
    src, dst, rel = induced_edges(graph, node_ids)
    return EgoGraph(node_ids, np.concatenate(hop), np.concatenate(sims), src, dst, rel)


def seed_key(query_emb: np.ndarray) -> bytes:
    """How preset seeds are looked up: the query embedding's float32 bytes."""
    return np.ascontiguousarray(query_emb, dtype=np.float32).tobytes()


class _GraphBaseline:
    """Holds the graph and embeddings; seeds by exact dense top-k unless seeds were preset."""

    name = "base"

    def __init__(self, graph: GraphArrays, node_emb: np.ndarray, rel_emb: np.ndarray, num_seeds: int = 3):
        if node_emb.shape[0] != graph.num_nodes:
            raise ValueError(f"{node_emb.shape[0]} node embeddings for {graph.num_nodes} nodes")
        self.graph, self.node_emb, self.rel_emb = graph, node_emb, rel_emb
        self.num_seeds = num_seeds
        self.preset_seeds: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}
        """Seeds found elsewhere (Neo4j full-text entity linking) by ``seed_key``; other queries seed densely."""

    def seeds(self, query_emb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        found = self.preset_seeds.get(seed_key(query_emb))
        return found if found is not None else dense_topk(self.node_emb, query_emb, self.num_seeds)


# ---------------------------------------------------------------------------------------------
# Dense and K-hop-with-filtering
# ---------------------------------------------------------------------------------------------
class DenseRetriever:
    """Exact cosine top-k over all nodes."""

    name = "dense"

    def __init__(self, node_emb: np.ndarray):
        self.node_emb = node_emb

    def retrieve(self, query_emb: np.ndarray, k: int) -> Ranking:
        ids, sims = dense_topk(self.node_emb, query_emb, k)
        return [(int(i), float(s)) for i, s in zip(ids, sims)]


class KHopRetriever(_GraphBaseline):
    """K-hop-with-filtering from the dense seeds, one merged ranking of the subgraph.

    Rule: a seed's score is its similarity sim(q, v); every other node's score is the K-hop
    score it was selected with; all nodes ranked together by score (desc, id asc).
    """

    name = "khop"

    def __init__(self, graph, node_emb, rel_emb, num_seeds: int = 3, budgets: Sequence[int] = (50, 100)):
        super().__init__(graph, node_emb, rel_emb, num_seeds)
        self.budgets = list(budgets)

    def retrieve(self, query_emb: np.ndarray, k: int) -> Ranking:
        seeds, sims = self.seeds(query_emb)
        sel = khop_select(self.graph, self.node_emb, self.rel_emb, query_emb, seeds, self.budgets,
                          seed_scores=sims)
        return rank_by_score(sel.node_ids, sel.score, k)


# ---------------------------------------------------------------------------------------------
# Personalized PageRank, and MMR on top of it
# ---------------------------------------------------------------------------------------------
class PPRRetriever(_GraphBaseline):
    """Personalized PageRank on the 2-hop ego graph of the top-3 dense seeds.

    Restart distribution on the seeds proportional to max(sim, 0) (uniform if all are <= 0),
    restart probability 0.15, at most 20 power iterations (stop early at L1 change < 1e-12),
    random walk over the ego graph's distinct neighbours (parallel relations count once),
    dangling mass returns to the restart distribution. Final score
    ``w · ppr / max(ppr) + (1 - w) · sim(q, v)`` with ``w = ppr_weight`` (project choice 0.5:
    the paper gives no value).
    """

    name = "ppr"

    def __init__(self, graph, node_emb, rel_emb, num_seeds: int = 3, hops: int = 2, restart: float = 0.15,
                 iterations: int = 20, ppr_weight: float = 0.5, max_nodes: int = 2000, tol: float = 1e-12):
        super().__init__(graph, node_emb, rel_emb, num_seeds)
        self.hops, self.restart, self.iterations = hops, restart, iterations
        self.ppr_weight, self.max_nodes, self.tol = ppr_weight, max_nodes, tol

    def ppr(self, ego: EgoGraph, num_seeds: int) -> np.ndarray:
        """Stationary PPR vector over ``ego``'s nodes (sums to 1)."""
        n = ego.num_nodes
        adj = sp.csr_matrix((np.ones(ego.src.shape[0]), (ego.src, ego.dst)), shape=(n, n))
        adj.data[:] = 1.0  # collapse parallel relations between one pair
        deg = np.asarray(adj.sum(axis=1)).ravel()
        w = np.maximum(ego.sim[:num_seeds], 0.0)
        w = w / w.sum() if w.sum() > 0 else np.full(num_seeds, 1.0 / num_seeds)
        p0 = np.zeros(n)
        p0[:num_seeds] = w
        inv_deg = np.divide(1.0, deg, out=np.zeros(n), where=deg > 0)
        dangling = deg == 0
        x = p0.copy()
        for _ in range(self.iterations):
            # adj is symmetric, so adj @ (x / deg) is the walk step P^T x.
            walk = adj @ (x * inv_deg) + x[dangling].sum() * p0
            nxt = (1.0 - self.restart) * walk + self.restart * p0
            done = np.abs(nxt - x).sum() < self.tol
            x = nxt
            if done:
                break
        return x

    def scores(self, query_emb: np.ndarray) -> tuple[EgoGraph, np.ndarray, np.ndarray]:
        """(ego graph, PPR vector, combined score) for one query."""
        seeds, sims = self.seeds(query_emb)
        ego = ego_graph(self.graph, self.node_emb, unit_query(query_emb), seeds, sims, self.hops, self.max_nodes)
        if seeds.size == 0:
            return ego, np.zeros(0), np.zeros(0)
        pr = self.ppr(ego, seeds.shape[0])
        combined = self.ppr_weight * pr / pr.max() + (1.0 - self.ppr_weight) * ego.sim
        return ego, pr, combined

    def retrieve(self, query_emb: np.ndarray, k: int) -> Ranking:
        ego, _, combined = self.scores(query_emb)
        return rank_by_score(ego.node_ids, combined, k)


class PPRMMRRetriever(PPRRetriever):
    """PPR candidate pool (top ``pool`` by the combined PPR score) reranked by MMR.

    Relevance = combined PPR/dense score min-max normalised over the pool; redundancy =
    max(0, max cosine to an already picked node) with float64 unit node vectors; greedy pick of
    ``min(k, pick)`` nodes maximising ``λ·relevance − (1−λ)·redundancy`` (ties by smaller id).
    The returned score is that MMR value at pick time: non-increasing along the list.
    """

    name = "ppr_mmr"

    def __init__(self, graph, node_emb, rel_emb, pool: int = 250, pick: int = 20, lam: float = 0.78, **ppr_kw):
        super().__init__(graph, node_emb, rel_emb, **ppr_kw)
        self.pool, self.pick, self.lam = pool, pick, lam

    def retrieve(self, query_emb: np.ndarray, k: int) -> Ranking:
        ego, _, combined = self.scores(query_emb)
        top = rank_desc(combined, ego.node_ids, self.pool)
        ids, rel = ego.node_ids[top], combined[top]
        span = rel.max() - rel.min() if rel.size else 0.0
        rel = (rel - rel.min()) / span if span > 0 else np.ones_like(rel)
        emb = np.asarray(self.node_emb[ids], dtype=np.float64)
        norm = np.linalg.norm(emb, axis=1, keepdims=True)
        emb = emb / np.where(norm == 0, 1.0, norm)
        redundancy = np.zeros(ids.shape[0])
        free = np.ones(ids.shape[0], dtype=bool)
        out: Ranking = []
        for _ in range(min(int(k), self.pick, ids.shape[0])):
            value = self.lam * rel - (1.0 - self.lam) * redundancy
            cand = np.flatnonzero(free)
            best = cand[rank_desc(value[cand], ids[cand], 1)[0]]
            out.append((int(ids[best]), float(value[best])))
            free[best] = False
            redundancy = np.maximum(redundancy, np.maximum(emb @ emb[best], 0.0))
        return out


# ---------------------------------------------------------------------------------------------
# Beam traversal
# ---------------------------------------------------------------------------------------------
class BeamRetriever(_GraphBaseline):
    """Beam search from the top-3 dense seeds for 2 hops (BeamQA-style, not learned).

    Transition v -r-> u scores ``w_path·s(v) + w_node·sim(q,u) + w_rel·sim(q,r) − hop_penalty``
    with s(seed) = sim(q, seed); a node's score is the max over the transitions reaching it.
    Candidates at a hop are neighbours of the beam not already expanded (seeds, earlier beams);
    the best ``beam_width`` become the next beam. All reached nodes are ranked by their best
    score. Weights (0.5 / 0.35 / 0.15, penalty 0.02, width 20) are project choices.
    """

    name = "beam"

    def __init__(self, graph, node_emb, rel_emb, num_seeds: int = 3, hops: int = 2, beam_width: int = 20,
                 w_path: float = 0.5, w_node: float = 0.35, w_rel: float = 0.15, hop_penalty: float = 0.02):
        super().__init__(graph, node_emb, rel_emb, num_seeds)
        self.hops, self.beam_width = hops, beam_width
        self.w_path, self.w_node, self.w_rel, self.hop_penalty = w_path, w_node, w_rel, hop_penalty

    def retrieve(self, query_emb: np.ndarray, k: int) -> Ranking:
        q = unit_query(query_emb)
        rel_sim = relation_similarity(self.rel_emb, q)
        beam, beam_score = self.seeds(query_emb)
        expanded = np.zeros(self.graph.num_nodes, dtype=bool)
        expanded[beam] = True
        reached, reached_score = [beam], [beam_score]
        for _ in range(self.hops):
            if beam.size == 0:
                break
            pos, nbr, rel = self.graph.gather(beam)
            fresh = ~expanded[nbr]
            pos, nbr, rel = pos[fresh], nbr[fresh], rel[fresh]
            if nbr.size == 0:
                break
            cand, best = max_by_group(nbr, self.w_path * beam_score[pos] + self.w_rel * rel_sim[rel])
            score = best + self.w_node * node_similarity(self.node_emb, cand, q) - self.hop_penalty
            reached.append(cand)
            reached_score.append(score)
            keep = rank_desc(score, cand, self.beam_width)
            beam, beam_score = cand[keep], score[keep]
            expanded[beam] = True
        ids, scores = max_by_group(np.concatenate(reached), np.concatenate(reached_score))
        return rank_by_score(ids, scores, k)


# ---------------------------------------------------------------------------------------------
# G-Retriever's PCST stage
# ---------------------------------------------------------------------------------------------
class PCSTRetriever(_GraphBaseline):
    """Prize-collecting Steiner tree (``pcst_fast``, GW pruning, one tree) on the 2-hop ego graph.

    Node prizes by similarity rank: the top ``topk_nodes`` get ``topk_nodes, ..., 1``; edge
    prizes by triple similarity ``(sim(q,h) + sim(q,r) + sim(q,t)) / 3``: the top ``topk_edges``
    get ``topk_edges, ..., 1``. Edges cost ``edge_cost`` minus their prize; an edge whose prize
    exceeds the cost becomes a virtual node with prize ``prize − cost`` joined to both endpoints
    at zero cost (G-Retriever's construction). Ranking: tree nodes first (score 2 + sim),
    then the other ego nodes (score sim), each group by similarity.
    """

    name = "pcst"

    def __init__(self, graph, node_emb, rel_emb, num_seeds: int = 3, hops: int = 2, max_nodes: int = 2000,
                 topk_nodes: int = 10, topk_edges: int = 10, edge_cost: float = 0.5):
        super().__init__(graph, node_emb, rel_emb, num_seeds)
        self.hops, self.max_nodes = hops, max_nodes
        self.topk_nodes, self.topk_edges, self.edge_cost = topk_nodes, topk_edges, edge_cost

    def tree(self, ego: EgoGraph, rel_sim: np.ndarray) -> np.ndarray:
        """Local indices of the ego nodes in the PCST solution."""
        import pcst_fast  # optional dependency, needed only here

        n = ego.num_nodes
        prizes = np.zeros(n)
        top = rank_desc(ego.sim, ego.node_ids, self.topk_nodes)
        prizes[top] = np.arange(top.shape[0], 0, -1, dtype=np.float64)
        one_way = ego.src < ego.dst  # each undirected edge once (self loops carry no prize)
        u, v, r = ego.src[one_way], ego.dst[one_way], ego.rel[one_way]
        if u.size == 0:
            return top[:1]
        e_sim = (ego.sim[u] + rel_sim[r] + ego.sim[v]) / 3.0
        e_prize = np.zeros(u.shape[0])
        e_top = rank_desc(e_sim, np.arange(u.shape[0]), self.topk_edges)
        e_prize[e_top] = np.arange(e_top.shape[0], 0, -1, dtype=np.float64)
        real = e_prize <= self.edge_cost
        virt = np.flatnonzero(~real)
        vid = n + np.arange(virt.shape[0])
        edges = np.concatenate([np.stack([u[real], v[real]], 1),
                                np.stack([u[virt], vid], 1), np.stack([vid, v[virt]], 1)]).astype(np.int64)
        costs = np.concatenate([self.edge_cost - e_prize[real], np.zeros(2 * virt.shape[0])])
        all_prizes = np.concatenate([prizes, e_prize[virt] - self.edge_cost])
        vertices, _ = pcst_fast.pcst_fast(edges, all_prizes, costs, -1, 1, "gw", 0)
        vertices = np.asarray(vertices, dtype=np.int64)
        chosen = vertices[vertices < n]
        hit = vertices[vertices >= n] - n  # a virtual node brings both endpoints of its edge
        return np.unique(np.concatenate([chosen, u[virt][hit], v[virt][hit]]))

    def retrieve(self, query_emb: np.ndarray, k: int) -> Ranking:
        seeds, sims = self.seeds(query_emb)
        q = unit_query(query_emb)
        ego = ego_graph(self.graph, self.node_emb, q, seeds, sims, self.hops, self.max_nodes)
        if ego.num_nodes == 0:
            return []
        in_tree = np.zeros(ego.num_nodes, dtype=bool)
        in_tree[self.tree(ego, relation_similarity(self.rel_emb, q))] = True
        return rank_by_score(ego.node_ids, ego.sim + 2.0 * in_tree, k)
