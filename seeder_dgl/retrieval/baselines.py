"""Non-learned first-stage retrievers (paper appendix "Baseline Methods") on either graph backend.

Each is a ``GraphRetriever``: built on a graph backend and a profile's ``RetrievalSettings``, it
starts from the seeds the settings give (k0 of them, dense, full-text or hybrid) and returns at
most ``k`` distinct ids, score descending, ties by smaller id (PPR+MMR: selection order, whose
MMR values are non-increasing). Similarities follow ``memory``'s float64 rules on an export and
Neo4j's (to ~1e-6) on the live graph. Parameters the paper does not state are marked "project
choice" below and in the lead's notes.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from seeder_dgl.retrieval.base import GraphRetriever, Ranked
from seeder_dgl.retrieval.memory import max_by_group, rank_by_score, rank_desc
from seeder_dgl.retrieval.neighbourhood import EgoGraph, best_neighbours, ego_graph
from seeder_dgl.retrieval.pipeline import seed_and_expand


# ---------------------------------------------------------------------------------------------
# Dense and K-hop-with-filtering
# ---------------------------------------------------------------------------------------------
class DenseRetriever(GraphRetriever):
    """Top-k nodes by cosine: the backend's dense seeding asked for k nodes (exact in memory;
    the vector index on the live graph unless the settings ask for an exact scan)."""

    name = "dense"

    def rank(self, question: str, embedding: np.ndarray, k: int) -> Ranked:
        found = self.graph.dense_seeds(embedding, k, exact=self.settings.exact_seeds)
        return Ranked([(int(i), float(s)) for i, s in found], [], len(found))


class KHopRetriever(GraphRetriever):
    """K-hop-with-filtering from the seeds (the settings' budgets), one merged ranking of the subgraph.

    Rule: a seed's score is its similarity sim(q, v); every other node's score is the K-hop
    score it was selected with; all nodes ranked together by score (desc, id asc), at the
    precision the backend kept (float64 in memory and from Neo4j, the record's float32 where that is all).
    """

    name = "khop"

    def rank(self, question: str, embedding: np.ndarray, k: int) -> Ranked:
        seeds, sub = seed_and_expand(self.graph, question, embedding, self.settings)
        scores = sub.score if sub.exact_score is None else sub.exact_score
        return Ranked(rank_by_score(sub.node_ids, scores, k), seeds, sub.num_nodes)

    def options(self) -> dict:
        return {"budgets": list(self.settings.budgets)}


# ---------------------------------------------------------------------------------------------
# Personalized PageRank, and MMR on top of it
# ---------------------------------------------------------------------------------------------
class PPRRetriever(GraphRetriever):
    """Personalized PageRank on the 2-hop ego graph of the seeds (``retrieval.neighbourhood.ego_graph``).

    Restart distribution on the seeds proportional to max(sim, 0) (uniform if all are <= 0),
    restart probability 0.15, at most 20 power iterations (stop early at L1 change < 1e-12),
    random walk over the ego graph's distinct neighbours (parallel relations count once),
    dangling mass returns to the restart distribution. Final score
    ``w · ppr / max(ppr) + (1 - w) · sim(q, v)`` with ``w = ppr_weight`` (project choice 0.5:
    the paper gives no value).
    """

    name = "ppr"

    def __init__(self, graph, settings=None, *, hops: int = 2, restart: float = 0.15, iterations: int = 20,
                 ppr_weight: float = 0.5, max_nodes: int = 2000, tol: float = 1e-12):
        super().__init__(graph, settings)
        self.hops, self.restart, self.iterations = hops, restart, iterations
        self.ppr_weight, self.max_nodes, self.tol = ppr_weight, max_nodes, tol

    def options(self) -> dict:
        return {"hops": self.hops, "restart": self.restart, "iterations": self.iterations,
                "ppr_weight": self.ppr_weight, "max_nodes": self.max_nodes, "tol": self.tol}

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

    def scores(self, question: str, embedding: np.ndarray):
        """(seeds, ego graph, PPR vector, combined score) for one question."""
        seeds = self.seed(question, embedding)
        ego = ego_graph(self.graph, embedding, seeds, self.hops, self.max_nodes)
        if not seeds:
            return seeds, ego, np.zeros(0), np.zeros(0)
        pr = self.ppr(ego, len(seeds))
        combined = self.ppr_weight * pr / pr.max() + (1.0 - self.ppr_weight) * ego.sim
        return seeds, ego, pr, combined

    def rank(self, question: str, embedding: np.ndarray, k: int) -> Ranked:
        seeds, ego, _, combined = self.scores(question, embedding)
        return Ranked(rank_by_score(ego.node_ids, combined, k), seeds, ego.num_nodes)


class PPRMMRRetriever(PPRRetriever):
    """PPR candidate pool (top ``pool`` by the combined PPR score) reranked by MMR.

    Relevance = combined PPR/dense score min-max normalised over the pool; redundancy =
    max(0, max cosine to an already picked node) with float64 unit node vectors; greedy pick of
    ``min(k, pick)`` nodes maximising ``λ·relevance − (1−λ)·redundancy`` (ties by smaller id).
    The returned score is that MMR value at pick time: non-increasing along the list.
    """

    name = "ppr_mmr"

    def __init__(self, graph, settings=None, *, pool: int = 250, pick: int = 20, lam: float = 0.78, **ppr_kw):
        super().__init__(graph, settings, **ppr_kw)
        self.pool, self.pick, self.lam = pool, pick, lam

    def options(self) -> dict:
        return {**super().options(), "pool": self.pool, "pick": self.pick, "lam": self.lam}

    def rank(self, question: str, embedding: np.ndarray, k: int) -> Ranked:
        seeds, ego, _, combined = self.scores(question, embedding)
        top = rank_desc(combined, ego.node_ids, self.pool)
        ids, rel = ego.node_ids[top], combined[top]
        if ids.size == 0:
            return Ranked([], seeds, ego.num_nodes)
        span = rel.max() - rel.min()
        rel = (rel - rel.min()) / span if span > 0 else np.ones_like(rel)
        emb = np.asarray(self.graph.node_features(ids)[0], dtype=np.float64)
        norm = np.linalg.norm(emb, axis=1, keepdims=True)
        emb = emb / np.where(norm == 0, 1.0, norm)
        redundancy = np.zeros(ids.shape[0])
        free = np.ones(ids.shape[0], dtype=bool)
        out = []
        for _ in range(min(int(k), self.pick, ids.shape[0])):
            value = self.lam * rel - (1.0 - self.lam) * redundancy
            cand = np.flatnonzero(free)
            best = cand[rank_desc(value[cand], ids[cand], 1)[0]]
            out.append((int(ids[best]), float(value[best])))
            free[best] = False
            redundancy = np.maximum(redundancy, np.maximum(emb @ emb[best], 0.0))
        return Ranked(out, seeds, ego.num_nodes)


# ---------------------------------------------------------------------------------------------
# Beam traversal
# ---------------------------------------------------------------------------------------------
class BeamRetriever(GraphRetriever):
    """Beam search from the seeds for 2 hops (BeamQA-style, not learned).

    Transition v -r-> u scores ``w_path·s(v) + w_node·sim(q,u) + w_rel·sim(q,r) − hop_penalty``
    with s(seed) = sim(q, seed); a node's score is the max over the transitions reaching it.
    Candidates at a hop are neighbours of the beam not already expanded (seeds, earlier beams);
    the best ``beam_width`` become the next beam. Reached nodes are ranked by their best score.
    Weights (0.5 / 0.35 / 0.15, penalty 0.02, width 20) are project choices.

    Each hop asks the backend for its best ``max(k, beam_width)`` candidates only
    (``retrieval.neighbourhood.best_neighbours``): a node among the k best overall is among the k best of
    the hop that gave it its score, so the top k equal those of ranking every candidate.
    """

    name = "beam"

    def __init__(self, graph, settings=None, *, hops: int = 2, beam_width: int = 20, w_path: float = 0.5,
                 w_node: float = 0.35, w_rel: float = 0.15, hop_penalty: float = 0.02):
        super().__init__(graph, settings)
        self.hops, self.beam_width = hops, beam_width
        self.w_path, self.w_node, self.w_rel, self.hop_penalty = w_path, w_node, w_rel, hop_penalty

    def options(self) -> dict:
        return {"hops": self.hops, "beam_width": self.beam_width, "w_path": self.w_path, "w_node": self.w_node,
                "w_rel": self.w_rel, "hop_penalty": self.hop_penalty}

    def rank(self, question: str, embedding: np.ndarray, k: int) -> Ranked:
        seeds = self.seed(question, embedding)
        beam = seeds
        expanded = {i for i, _ in seeds}
        reached = [np.asarray([i for i, _ in seeds], dtype=np.int64)]
        reached_score = [np.asarray([s for _, s in seeds], dtype=np.float64)]
        for _ in range(self.hops):
            if not beam:
                break
            found = best_neighbours(self.graph, embedding, [(v, self.w_path * s) for v, s in beam], expanded,
                                    max(k, self.beam_width), self.w_node, self.w_rel)
            if not len(found):
                break
            score = found.score - self.hop_penalty
            reached.append(found.ids)
            reached_score.append(score)
            keep = rank_desc(score, found.ids, self.beam_width)
            beam = list(zip(found.ids[keep].tolist(), score[keep].tolist()))
            expanded.update(found.ids[keep].tolist())
        ids, scores = max_by_group(np.concatenate(reached), np.concatenate(reached_score))
        return Ranked(rank_by_score(ids, scores, k), seeds, int(ids.shape[0]))


# ---------------------------------------------------------------------------------------------
# G-Retriever's PCST stage
# ---------------------------------------------------------------------------------------------
class PCSTRetriever(GraphRetriever):
    """Prize-collecting Steiner tree (``pcst_fast``, GW pruning, one tree) on the 2-hop ego graph.

    Node prizes by similarity rank: the top ``topk_nodes`` get ``topk_nodes, ..., 1``; edge
    prizes by triple similarity ``(sim(q,h) + sim(q,r) + sim(q,t)) / 3``: the top ``topk_edges``
    get ``topk_edges, ..., 1``. Edges cost ``edge_cost`` minus their prize; an edge whose prize
    exceeds the cost becomes a virtual node with prize ``prize − cost`` joined to both endpoints
    at zero cost (G-Retriever's construction). Ranking: tree nodes first (score 2 + sim),
    then the other ego nodes (score sim), each group by similarity.
    """

    name = "pcst"

    def __init__(self, graph, settings=None, *, hops: int = 2, max_nodes: int = 2000, topk_nodes: int = 10,
                 topk_edges: int = 10, edge_cost: float = 0.5):
        super().__init__(graph, settings)
        self.hops, self.max_nodes = hops, max_nodes
        self.topk_nodes, self.topk_edges, self.edge_cost = topk_nodes, topk_edges, edge_cost

    def options(self) -> dict:
        return {"hops": self.hops, "max_nodes": self.max_nodes, "topk_nodes": self.topk_nodes,
                "topk_edges": self.topk_edges, "edge_cost": self.edge_cost}

    def tree(self, ego: EgoGraph) -> np.ndarray:
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
        e_sim = (ego.sim[u] + ego.relation_sim[r] + ego.sim[v]) / 3.0
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

    def rank(self, question: str, embedding: np.ndarray, k: int) -> Ranked:
        seeds = self.seed(question, embedding)
        ego = ego_graph(self.graph, embedding, seeds, self.hops, self.max_nodes)
        if ego.num_nodes == 0:
            return Ranked([], seeds, 0)
        in_tree = np.zeros(ego.num_nodes, dtype=bool)
        in_tree[self.tree(ego)] = True
        return Ranked(rank_by_score(ego.node_ids, ego.sim + 2.0 * in_tree, k), seeds, ego.num_nodes)
