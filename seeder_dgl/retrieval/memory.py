"""In-memory reference retrieval over numpy/scipy arrays: dense top-k and K-hop-with-filtering.

This is the ground truth the Cypher statements (``cypher/retrieval/khop_hop.cypher``) are
checked against, and the fast path for offline subgraph extraction and baselines.

Numeric rules (a Cypher implementation must reproduce them to agree on node sets and scores):

* every similarity is computed in float64: stored float32 vectors are cast to float64 first;
* the query is made a unit vector in float64: ``q̂ = q / ‖q‖``;
* ``sim(q, v) = z_v · q̂`` with ``z_v`` the stored (float32, L2-normalised) node vector cast to
  float64 and NOT renormalised (the embeddings are unit vectors up to float32 rounding);
* ``sim(q, r) = (e_r / ‖e_r‖) · q̂``, relation vectors renormalised in float64 (as ``LiveGraph``);
* K-hop score, evaluated in exactly this order:
  ``via(u) = max_{frontier edges v-r-u} (sim(q,v) + sim(q,r)) / 3.0`` then
  ``score(u) = sim(q,u) / 3.0 + via(u)``;
* ranking: score descending, then node id ascending (dense top-k: similarity descending, then id).

Neo4j's vector similarity functions work in float32 (Lucene): the Cypher statements take
``cos = 1 - d²/2`` from ``vector.similarity.euclidean`` of unit vectors, which agrees with this
reference to ~1e-6 (tests compare at that tolerance and require identical node sets).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np

from seeder_dgl.subgraph.record import BACKWARD, FORWARD, QuerySubgraph

if TYPE_CHECKING:  # loaders is importable in the project; only its type is needed here
    from loaders.kg import KnowledgeGraph

# Rows gathered per block when casting embeddings to float64 (bounds the temporary memory).
_CHUNK = 32_768
# Candidate sets up to this size get float64 similarities directly; larger ones are prefiltered
# in float32 and only entries within _PREFILTER_TOL of the k-th estimated score are rescored.
_EXACT_LIMIT = 4_096
_PREFILTER_TOL = 1e-4


# ---------------------------------------------------------------------------------------------
# Graph
# ---------------------------------------------------------------------------------------------
def _sort_rows(*keys: np.ndarray) -> np.ndarray:
    """Stable argsort by several non-negative int64 keys, most significant first.

    Packs the keys into one int64 when their ranges allow (one sort instead of a multi-key
    lexsort, faster on millions of edges), else falls back to ``np.lexsort``.
    """
    if keys[0].shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    spans = [int(k.max()) + 1 for k in keys]
    if float(np.prod([float(x) for x in spans])) < 2.0**62:
        packed = np.zeros(keys[0].shape[0], dtype=np.int64)
        for k, span in zip(keys, spans):
            packed *= span
            packed += k
        return np.argsort(packed, kind="stable")
    return np.lexsort(keys[::-1])


def unique_undirected(src: np.ndarray, dst: np.ndarray, rel: np.ndarray) -> np.ndarray:
    """Indices of the first triple of every distinct ``(min(u,v), max(u,v), rel)``, sorted by that key.

    The same collapse as the Neo4j writer (``graphstore.writer.undirected_unique``): each
    undirected pair is stored once per relation, self loops once.
    """
    src, dst, rel = (np.asarray(a, dtype=np.int64) for a in (src, dst, rel))
    lo, hi = np.minimum(src, dst), np.maximum(src, dst)
    # Stable sort on (rel, lo, hi): among duplicates the earliest triple comes first.
    order = _sort_rows(rel, lo, hi)
    first = np.ones(order.shape[0], dtype=bool)
    if order.shape[0] > 1:
        r, a, b = rel[order], lo[order], hi[order]
        first[1:] = (r[1:] != r[:-1]) | (a[1:] != a[:-1]) | (b[1:] != b[:-1])
    return order[first]


@dataclass(frozen=True)
class GraphArrays:
    """Undirected CSR of a typed graph; every stored triple is traversable in both directions.

    ``indices[indptr[v]:indptr[v+1]]`` are the neighbours of ``v`` (sorted by neighbour id, then
    relation) and ``rel`` the relation id of each adjacency entry. Each distinct
    (unordered pair, relation) is one undirected edge, giving two adjacency entries
    (``u -> v`` and ``v -> u``); a self loop therefore appears twice in its node's row, the same
    as the live graph's induced edges (each stored relationship read in both directions).
    """

    num_nodes: int
    indptr: np.ndarray
    """int64 [N+1]."""
    indices: np.ndarray
    """int32 (int64 beyond 2**31 nodes) [2M]: neighbour of each adjacency entry."""
    rel: np.ndarray
    """int32 [2M]: relation id of each adjacency entry."""
    edge_u: np.ndarray
    """int64 [M]: smaller endpoint of each undirected edge (as collapsed)."""
    edge_v: np.ndarray
    """int64 [M]: larger endpoint of each undirected edge."""
    edge_rel: np.ndarray
    """int64 [M]: relation id of each undirected edge."""
    direction: np.ndarray
    """int8 [2M]: per adjacency entry, ``FORWARD`` where the stored triple goes from the row's node
    to the neighbour, ``BACKWARD`` where it goes the other way (a self loop has one of each)."""

    @classmethod
    def from_arrays(cls, num_nodes: int, src, dst, rel) -> "GraphArrays":
        src, dst, rel = (np.asarray(a, dtype=np.int64).reshape(-1) for a in (src, dst, rel))
        if not (src.shape == dst.shape == rel.shape):
            raise ValueError("src, dst and rel must have the same length")
        if src.size and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= num_nodes):
            raise ValueError(f"edge endpoint outside 0..{num_nodes - 1}")
        if rel.size and rel.min() < 0:
            raise ValueError("negative relation id")
        keep = unique_undirected(src, dst, rel)
        u, v, r = np.minimum(src, dst)[keep], np.maximum(src, dst)[keep], rel[keep]
        # Both directions; rows sorted by (source, neighbour, relation) so slices are deterministic.
        a, b, t = np.concatenate([u, v]), np.concatenate([v, u]), np.concatenate([r, r])
        # The kept triple's own direction: u -> v when its source is the smaller end (a self loop's
        # first entry is its forward reading, the second its backward one).
        u_to_v = src[keep] == u
        fwd = np.where(u_to_v, FORWARD, BACKWARD).astype(np.int8)
        d = np.concatenate([fwd, (FORWARD + BACKWARD - fwd).astype(np.int8)])
        order = _sort_rows(a, b, t)
        a, b, t, d = a[order], b[order], t[order], d[order]
        indptr = np.zeros(num_nodes + 1, dtype=np.int64)
        np.cumsum(np.bincount(a, minlength=num_nodes), out=indptr[1:])
        idx_type = np.int32 if num_nodes < 2**31 else np.int64
        return cls(int(num_nodes), indptr, b.astype(idx_type), t.astype(np.int32), u, v, r, d)

    @classmethod
    def from_kg(cls, kg: "KnowledgeGraph") -> "GraphArrays":
        return cls.from_arrays(kg.num_nodes, kg.edge_src, kg.edge_dst, kg.edge_rel)

    @property
    def num_edges(self) -> int:
        """Distinct undirected (pair, relation) edges."""
        return int(self.edge_u.shape[0])

    @property
    def degree(self) -> np.ndarray:
        return np.diff(self.indptr)

    def neighbors(self, v: int) -> tuple[np.ndarray, np.ndarray]:
        """(neighbour ids, relation ids) of one node."""
        lo, hi = self.indptr[v], self.indptr[v + 1]
        return self.indices[lo:hi].astype(np.int64), self.rel[lo:hi].astype(np.int64)

    def gather(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """All adjacency entries of ``nodes`` at once: (position in ``nodes``, neighbour, relation)."""
        owner, flat = self._entries(nodes)
        return owner, self.indices[flat].astype(np.int64), self.rel[flat].astype(np.int64)

    def _entries(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(position in ``nodes``, adjacency entry) of every entry of ``nodes``."""
        nodes = np.asarray(nodes, dtype=np.int64)
        starts = self.indptr[nodes]
        lengths = self.indptr[nodes + 1] - starts
        total = int(lengths.sum())
        owner = np.repeat(np.arange(nodes.shape[0], dtype=np.int64), lengths)
        # Entry j of the output reads indices[starts[owner[j]] + (j - first output slot of owner[j])].
        shift = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
        return owner, shift + np.arange(total, dtype=np.int64)


# ---------------------------------------------------------------------------------------------
# Similarities
# ---------------------------------------------------------------------------------------------
def unit_query(query_emb: np.ndarray) -> np.ndarray:
    """float64 unit vector of the query (what ``LiveGraph.query_vector`` sends to Neo4j)."""
    q = np.asarray(query_emb, dtype=np.float64).reshape(-1)
    norm = np.linalg.norm(q)
    if not np.isfinite(norm) or norm == 0:
        raise ValueError("query embedding is zero or not finite")
    return q / norm


def node_similarity(node_emb: np.ndarray, ids: np.ndarray, q_unit: np.ndarray) -> np.ndarray:
    """float64 ``sim(q, v) = float64(z_v) · q̂`` for the given node ids (blockwise gather)."""
    ids = np.asarray(ids, dtype=np.int64)
    out = np.empty(ids.shape[0], dtype=np.float64)
    for lo in range(0, ids.shape[0], _CHUNK):
        block = ids[lo:lo + _CHUNK]
        out[lo:lo + block.shape[0]] = np.asarray(node_emb[block], dtype=np.float64) @ q_unit
    return out


def relation_similarity(rel_emb: np.ndarray, q_unit: np.ndarray) -> np.ndarray:
    """float64 ``sim(q, r)`` for every relation: relation vectors renormalised in float64."""
    e = np.asarray(rel_emb, dtype=np.float64)
    if e.shape[0] == 0:
        return np.zeros(0, dtype=np.float64)
    norm = np.linalg.norm(e, axis=1, keepdims=True)
    return (e / np.where(norm == 0, 1.0, norm)) @ q_unit


def rank_desc(score: np.ndarray, ids: np.ndarray, k: int | None = None) -> np.ndarray:
    """Positions of the best ``k`` entries by (score descending, id ascending), in that order.

    Partial selection first (``np.partition``), so only the entries tied with or above the k-th
    score are fully sorted: a hub with 10^5 candidates costs O(n) plus O(k log k).
    """
    n = score.shape[0]
    if k is None or k >= n:
        return np.lexsort((ids, -score))
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    kth = np.partition(score, n - k)[n - k]  # the k-th largest score
    pool = np.flatnonzero(score >= kth)  # includes every entry tied with the k-th
    return pool[np.lexsort((ids[pool], -score[pool]))[:k]]


def rank_by_score(ids: np.ndarray, scores: np.ndarray, k: int) -> list[tuple[int, float]]:
    """The top ``k`` of ``ids`` by score (descending), ties by the smaller id: how every graph
    baseline, and ``query --method khop``, turns scores into a ranking."""
    order = rank_desc(np.asarray(scores, dtype=np.float64), np.asarray(ids, dtype=np.int64), max(int(k), 0))
    return [(int(i), float(s)) for i, s in zip(ids[order], scores[order])]


def max_by_group(keys: np.ndarray, values: np.ndarray, size: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(sorted unique keys, max of values per key); ``size`` bounds the keys (enables the dense path).

    Many keys (a hub's neighbourhood): scatter-max into a dense scratch array, O(E + size).
    Few keys: sort-based, O(E log E) without touching ``size`` memory.
    """
    if size is not None and keys.shape[0] * 16 >= size:
        best = np.full(size, -np.inf)
        np.maximum.at(best, keys, values)
        uniq = np.flatnonzero(best > -np.inf)
        return uniq, best[uniq]
    uniq, inv = np.unique(keys, return_inverse=True)
    best = np.full(uniq.shape[0], -np.inf)
    np.maximum.at(best, inv, values)
    return uniq, best


class QueryScorer:
    """sim(q, ·) for one query, with a float32 prefilter that keeps big selections cheap.

    ``select`` returns the exact float64 top-k of ``score = sim / 3.0 + via`` (or of ``sim``):
    above ``_EXACT_LIMIT`` candidates it ranks a float32 estimate first and rescores in float64
    only the entries within ``_PREFILTER_TOL`` (1e-4, i.e. 3e-4 in similarity) of the estimated
    k-th score. For unit-norm vectors (docs/method.md: cosine) a float32 dot product is off by ~1e-7
    (worst case ~d * 6e-8), so the result equals a full float64 pass; vectors with norms far
    above 1 would need a wider tolerance.
    """

    def __init__(self, node_emb: np.ndarray, q_unit: np.ndarray):
        self.node_emb, self.q = node_emb, q_unit
        self.q32 = q_unit.astype(np.float32)
        self._all32: np.ndarray | None = None

    def exact(self, ids: np.ndarray) -> np.ndarray:
        return node_similarity(self.node_emb, ids, self.q)

    def approx(self, ids: np.ndarray) -> np.ndarray:
        # Past ~1/4 of the graph one full float32 matvec is cheaper than a row gather.
        if ids.shape[0] * 4 >= self.node_emb.shape[0]:
            if self._all32 is None:
                self._all32 = np.asarray(self.node_emb, dtype=np.float32) @ self.q32
            return self._all32[ids].astype(np.float64)
        return (np.asarray(self.node_emb[ids], dtype=np.float32) @ self.q32).astype(np.float64)

    @staticmethod
    def _score(sim: np.ndarray, via: np.ndarray | None) -> np.ndarray:
        return sim if via is None else sim / 3.0 + via  # the K-hop score, in the documented order

    def select(self, ids: np.ndarray, k: int, via: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(positions in ``ids`` of the top k, their float64 sims, their float64 scores), ranked."""
        n = ids.shape[0]
        if n <= max(_EXACT_LIMIT, k):
            pool = np.arange(n)
        else:
            est = self._score(self.approx(ids), via)
            kth = np.partition(est, n - k)[n - k]
            pool = np.flatnonzero(est >= kth - _PREFILTER_TOL)
        sim = self.exact(ids[pool])
        score = self._score(sim, None if via is None else via[pool])
        order = rank_desc(score, ids[pool], k)
        return pool[order], sim[order], score[order]


def dense_topk(node_emb: np.ndarray, query_emb: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k nodes by ``sim(q, v)`` (float64), ties by smaller id: (ids int64, sims float64).

    One float32 pass over all rows, then float64 rescoring of the entries near the k-th score
    (see ``QueryScorer``): the result equals a full float64 scan for unit-norm embeddings.
    """
    n = node_emb.shape[0]
    k = int(min(max(k, 0), n))
    if k == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
    ids = np.arange(n, dtype=np.int64)
    pick, sims, _ = QueryScorer(node_emb, unit_query(query_emb)).select(ids, k)
    return ids[pick], sims


# ---------------------------------------------------------------------------------------------
# K-hop-with-filtering
# ---------------------------------------------------------------------------------------------
@dataclass
class KHopSelection:
    """What K-hop-with-filtering selected, at full float64 precision."""

    node_ids: np.ndarray
    """int64 [n]: seeds in seed order, then each hop's picks in rank order."""
    hop: np.ndarray
    """int8 [n]: 0 for seeds, h for hop h."""
    score: np.ndarray
    """float64 [n]: seeds: their similarity (``seed_scores`` when given); others: K-hop score."""
    similarity: np.ndarray
    """float64 [n]: sim(q, v) used for v as a frontier node (seeds: ``seed_scores`` when given)."""


def khop_select(graph: GraphArrays, node_emb: np.ndarray, rel_emb: np.ndarray, query_emb: np.ndarray,
                seeds: Sequence[int], budgets: Sequence[int], *,
                seed_scores: Sequence[float] | None = None,
                relation_scores: np.ndarray | None = None) -> KHopSelection:
    """K-hop-with-filtering (docs/method.md, K-hop-with-filtering) at float64 precision; see the module docstring.

    Frontier = seeds. At hop h every neighbour u (both edge directions) of the frontier that is
    not yet selected gets ``score(u) = sim(q,u)/3 + max_{v-r-u, v in frontier}(sim(q,v) + sim(q,r))/3``;
    the best ``budgets[h-1]`` by (score desc, id asc) are selected and become the next frontier.
    Expansion stops at the first hop whose budget is <= 0 or whose frontier is empty (as
    ``LiveGraph.khop_filter``). Duplicate seeds are kept once (first occurrence). ``seed_scores``
    (e.g. the similarities the seeding step returned) replace the seeds' computed similarity,
    both as their score and as ``sim(q, v)`` in the hop-1 frontier term. ``relation_scores``
    [hops, R] (a ``RelationPrior``'s) replace ``sim(q, r)`` with row ``h-1`` at hop ``h``.
    """
    q = unit_query(query_emb)
    seeds = np.asarray(seeds, dtype=np.int64).reshape(-1)
    if seeds.size and (seeds.min() < 0 or seeds.max() >= graph.num_nodes):
        raise ValueError(f"seed id outside 0..{graph.num_nodes - 1}")
    if seed_scores is not None:
        seed_sim = np.asarray(seed_scores, dtype=np.float64).reshape(-1)
        if seed_sim.shape != seeds.shape:
            raise ValueError("seed_scores must have one value per seed")
    else:
        seed_sim = node_similarity(node_emb, seeds, q)
    _, first = np.unique(seeds, return_index=True)
    first = np.sort(first)
    seeds, seed_sim = seeds[first], seed_sim[first]
    rel_sim = relation_similarity(rel_emb, q)
    if relation_scores is not None:
        relation_scores = np.asarray(relation_scores, dtype=np.float64)
        if relation_scores.ndim != 2 or relation_scores.shape[0] < len(budgets) or relation_scores.shape[1] != rel_sim.shape[0]:
            raise ValueError(f"relation_scores of shape {relation_scores.shape} for {len(budgets)} hops and "
                             f"{rel_sim.shape[0]} relations")
    scorer = QueryScorer(node_emb, q)

    selected = np.zeros(graph.num_nodes, dtype=bool)
    selected[seeds] = True
    ids, hops, scores, sims = [seeds], [np.zeros(seeds.shape[0], np.int8)], [seed_sim], [seed_sim]
    frontier, frontier_sim = seeds, seed_sim
    for h, budget in enumerate(budgets, start=1):
        if frontier.size == 0 or budget <= 0:
            break
        pos, nbr, rel = graph.gather(frontier)
        fresh = ~selected[nbr]
        pos, nbr, rel = pos[fresh], nbr[fresh], rel[fresh]
        if nbr.size == 0:
            break
        hop_rel = rel_sim if relation_scores is None else relation_scores[h - 1]
        cand, best = max_by_group(nbr, frontier_sim[pos] + hop_rel[rel], graph.num_nodes)
        pick, frontier_sim, score = scorer.select(cand, int(budget), via=best / 3.0)
        frontier = cand[pick]
        selected[frontier] = True
        ids.append(frontier)
        hops.append(np.full(frontier.shape[0], h, dtype=np.int8))
        scores.append(score)
        sims.append(frontier_sim)
    return KHopSelection(np.concatenate(ids), np.concatenate(hops), np.concatenate(scores), np.concatenate(sims))


def induced_edges(graph: GraphArrays, node_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(src_local, dst_local, rel) of every edge among ``node_ids``, each in both directions.

    Local indices point into ``node_ids``; edges are sorted by (src_local, dst_local, rel).
    A self loop appears twice (once per direction), like ``LiveGraph.induced_edges``.
    """
    return directed_induced_edges(graph, node_ids)[:3]


def directed_induced_edges(graph: GraphArrays, node_ids: np.ndarray
                           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``induced_edges`` and the direction of each edge (int8: ``FORWARD`` when the stored triple goes
    src -> dst, ``BACKWARD`` when it goes dst -> src), as ``LiveGraph.directed_induced_edges``."""
    node_ids = np.asarray(node_ids, dtype=np.int64).reshape(-1)
    local = np.full(graph.num_nodes, -1, dtype=np.int64)
    local[node_ids] = np.arange(node_ids.shape[0], dtype=np.int64)
    pos, flat = graph._entries(node_ids)
    dst = local[graph.indices[flat]]
    inside = dst >= 0
    src, dst, flat = pos[inside], dst[inside], flat[inside]
    rel = graph.rel[flat].astype(np.int64)
    order = np.lexsort((rel, dst, src))
    return src[order], dst[order], rel[order], graph.direction[flat][order]


def khop_filter(graph: GraphArrays, node_emb: np.ndarray, rel_emb: np.ndarray, query_emb: np.ndarray,
                seeds: Sequence[int], budgets: Sequence[int], *, seed_scores: Sequence[float] | None = None,
                query_id: int = -1, with_edges: bool = True,
                relation_scores: np.ndarray | None = None) -> QuerySubgraph:
    """K-hop-with-filtering as a ``QuerySubgraph`` (scores stored float32 per the record's contract).

    Use ``khop_select`` when the float64 scores are needed.
    """
    sel = khop_select(graph, node_emb, rel_emb, query_emb, seeds, budgets, seed_scores=seed_scores,
                      relation_scores=relation_scores)
    if with_edges:
        src, dst, rel, direction = directed_induced_edges(graph, sel.node_ids)
    else:
        src = dst = rel = np.zeros(0, dtype=np.int64)
        direction = np.zeros(0, dtype=np.int8)
    return QuerySubgraph(query_id=query_id, node_ids=sel.node_ids, hop=sel.hop,
                         score=sel.score.astype(np.float32), src=src, dst=dst, rel=rel, direction=direction)


def attach_labels(subgraph: QuerySubgraph, answers: Sequence[int]) -> QuerySubgraph:
    """Fill ``labels`` (node is a gold answer) and ``num_answers`` (distinct answers, in or out)."""
    gold = np.unique(np.asarray(list(answers), dtype=np.int64))
    subgraph.labels = np.isin(subgraph.node_ids, gold)
    subgraph.num_answers = int(gold.shape[0])
    return subgraph
