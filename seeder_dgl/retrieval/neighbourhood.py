"""Bounded neighbourhoods of a question's seeds, on either graph backend.

PPR, PPR+MMR and PCST rank a region around the seeds (``EgoGraph``); beam search walks out from
them one hop at a time (``Neighbours``). Both are written twice, with one meaning:

* over arrays (``memory_ego_graph``, ``memory_best_neighbours``): what ``MemoryGraph`` answers,
  at the float64 precision of ``retrieval.memory``;
* on the live graph (``live_ego_graph``, ``live_best_neighbours``), through the K-hop hop
  statement (cypher/retrieval/khop_hop.cypher). That statement ranks the neighbours of a
  frontier by ``sim(q,u)/3 + max over edges v-r-u of (f(v) + w(r))/3``; with ``f`` and ``w``
  divided by ``node_weight`` its order is the order of ``node_weight·sim(q,u) + max(f(v) + w(r))``,
  so a hub's neighbourhood is still ranked inside Neo4j and only the kept rows leave it.
  Similarities agree with the arrays to ~1e-6 (Neo4j computes them from float32 vectors).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np

from seeder_dgl.graphstore.sketch import query_sketch
from seeder_dgl.retrieval.memory import (
    GraphArrays,
    QueryScorer,
    induced_edges,
    max_by_group,
    node_similarity,
    rank_desc,
    relation_similarity,
    unit_query,
)

if TYPE_CHECKING:
    from seeder_dgl.graphstore.live import LiveGraph

Seeds = list[tuple[int, float]]

WIDE_HOP = 512
"""Rows a live hop may keep (its limit plus the nodes it excludes) before it is split into
``WIDE_PARTITIONS`` queries. The hop statement was sized for K-hop budgets of a few hundred; its
memory grows much faster than the rows it keeps. Measured on MetaQA: the second hop of a
2,000-node ego graph (from the 1,137 films of 2010) ran out of a 1.4 GiB transaction pool in 1,
2 and 4 partitions and took 0.56 s in 16."""
WIDE_PARTITIONS = 16


@dataclass
class EgoGraph:
    """The seeds' BFS neighbourhood, with what the methods that rank it need."""

    node_ids: np.ndarray
    """int64 [n]: seeds (seed order), then each hop's nodes by similarity (desc, id asc)."""
    hop: np.ndarray
    """int8 [n]: BFS distance from the seed set."""
    sim: np.ndarray
    """float64 [n]: sim(q, v) (seeds: the similarity their seeding returned)."""
    src: np.ndarray
    """int64 [m]: local source of each edge; every edge in both directions, sorted (src, dst, rel)."""
    dst: np.ndarray
    rel: np.ndarray
    relation_sim: np.ndarray
    """float64 [R]: sim(q, r) of every relation id of the dataset."""

    @property
    def num_nodes(self) -> int:
        return int(self.node_ids.shape[0])


@dataclass
class Neighbours:
    """The best neighbours of a weighted frontier, ranked (score desc, id asc)."""

    ids: np.ndarray
    """int64 [n]."""
    sim: np.ndarray
    """float64 [n]: sim(q, u)."""
    score: np.ndarray
    """float64 [n]: ``node_weight·sim(q,u) + max over frontier edges v-r-u of (f(v) + relation_weight·sim(q,r))``."""

    def __len__(self) -> int:
        return int(self.ids.shape[0])


def _empty_neighbours() -> Neighbours:
    return Neighbours(np.zeros(0, np.int64), np.zeros(0), np.zeros(0))


# ---------------------------------------------------------------------------------------------
# Over arrays
# ---------------------------------------------------------------------------------------------
def _distinct(ids: np.ndarray, size: int) -> np.ndarray:
    """Sorted distinct ids: a dense mask for big inputs (hubs), a sort for small ones."""
    if ids.shape[0] * 16 < size:
        return np.unique(ids)
    mask = np.zeros(size, dtype=bool)
    mask[ids] = True
    return np.flatnonzero(mask)


def memory_ego_graph(graph: GraphArrays, node_emb: np.ndarray, rel_emb: np.ndarray, embedding: np.ndarray,
                     seeds: Seeds, hops: int = 2, max_nodes: int = 2000) -> EgoGraph:
    """BFS ``hops`` levels from ``seeds`` (both edge directions), at most ``max_nodes`` nodes.

    When a level would overflow the bound, only its most query-similar nodes (ties by id) are
    kept (project choice: hub neighbourhoods would otherwise be whole-graph sized), and only the
    kept ones are expanded further.
    """
    q = unit_query(embedding)
    seed_ids = np.asarray([s for s, _ in seeds], dtype=np.int64)
    scorer = QueryScorer(node_emb, q)
    seen = np.zeros(graph.num_nodes, dtype=bool)
    seen[seed_ids] = True
    ids = [seed_ids]
    hop = [np.zeros(seed_ids.shape[0], np.int8)]
    sims = [np.asarray([s for _, s in seeds], dtype=np.float64)]
    frontier, total = seed_ids, seed_ids.shape[0]
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
    return EgoGraph(node_ids, np.concatenate(hop), np.concatenate(sims), src, dst, rel,
                    relation_similarity(rel_emb, q))


def memory_best_neighbours(graph: GraphArrays, node_emb: np.ndarray, rel_emb: np.ndarray, embedding: np.ndarray,
                           frontier: Seeds, exclude: Sequence[int], limit: int, node_weight: float = 1.0,
                           relation_weight: float = 0.0) -> Neighbours:
    """The best ``limit`` neighbours (both edge directions) of the frontier ``(id, f(v))`` that are
    not in ``exclude``, scored as ``Neighbours.score`` says, at float64 precision."""
    if not frontier or limit <= 0:
        return _empty_neighbours()
    q = unit_query(embedding)
    ids = np.asarray([v for v, _ in frontier], dtype=np.int64)
    weight = np.asarray([w for _, w in frontier], dtype=np.float64)
    pos, nbr, rel = graph.gather(ids)
    fresh = ~np.isin(nbr, np.asarray(list(exclude), dtype=np.int64))
    pos, nbr, rel = pos[fresh], nbr[fresh], rel[fresh]
    if nbr.size == 0:
        return _empty_neighbours()
    cand, via = max_by_group(nbr, weight[pos] + relation_weight * relation_similarity(rel_emb, q)[rel])
    sim = node_similarity(node_emb, cand, q)
    score = via + node_weight * sim
    keep = rank_desc(score, cand, int(limit))
    return Neighbours(cand[keep], sim[keep], score[keep])


# ---------------------------------------------------------------------------------------------
# On the live graph
# ---------------------------------------------------------------------------------------------
def live_best_neighbours(live: "LiveGraph", embedding: np.ndarray, frontier: Seeds, exclude: Sequence[int],
                         limit: int, node_weight: float = 1.0, relation_weight: float = 0.0) -> Neighbours:
    """``memory_best_neighbours`` on the live graph: one K-hop hop (``LiveGraph.hop_neighbours``, partitioned
    by node id and exact), wide hops split into ``WIDE_PARTITIONS`` queries."""
    if not frontier or limit <= 0:
        return _empty_neighbours()
    if node_weight <= 0:
        raise ValueError(f"node_weight must be positive, not {node_weight}")
    vec = live.query_vector(embedding)
    relations = {t: relation_weight * s / node_weight for t, s in live.relation_similarity(embedding).items()}
    excluded = {int(i) for i in exclude}
    if limit + len(excluded) > WIDE_HOP:
        partitions = max(live.hop_partitions, WIDE_PARTITIONS)
    else:  # as K-hop: the first hop starts from a few seeds, later frontiers reach hubs
        partitions = 1 if len(frontier) <= 8 else live.hop_partitions
    rows = live.hop_neighbours(partitions, "walking the seeds' neighbourhood", excluded, int(limit),
                     frontier=[{"id": int(v), "similarity": float(w) / node_weight} for v, w in frontier],
                     relation_similarity=relations, embedding=vec, **query_sketch(vec))
    if not rows:
        return _empty_neighbours()
    ids, sim, hop_score = (np.asarray(col) for col in zip(*rows))
    # The statement's score is (node_weight·sim + max(f + w)) / (3·node_weight).
    return Neighbours(ids.astype(np.int64), sim.astype(np.float64), 3.0 * node_weight * hop_score.astype(np.float64))


def live_ego_graph(live: "LiveGraph", embedding: np.ndarray, seeds: Seeds, hops: int = 2,
                   max_nodes: int = 2000) -> EgoGraph:
    """``memory_ego_graph`` on the live graph: each level is the hop statement with no frontier
    or relation term, which ranks the new nodes by similarity alone."""
    ids = [int(s) for s, _ in seeds]
    hop = [0] * len(ids)
    sims = [float(s) for _, s in seeds]
    frontier = [(i, 0.0) for i in ids]
    for h in range(1, hops + 1):
        room = max_nodes - len(ids)
        if room <= 0 or not frontier:
            break
        found = live_best_neighbours(live, embedding, frontier, ids, room)
        if not len(found):
            break
        frontier = [(int(i), 0.0) for i in found.ids]
        ids.extend(int(i) for i in found.ids)
        hop.extend([h] * len(found))
        sims.extend(found.sim.tolist())
    node_ids = np.asarray(ids, dtype=np.int64)
    src, dst, rel = live.induced_edges(node_ids)
    order = np.lexsort((rel, dst, src))  # the arrays' edge order: PCST breaks ties by it
    by_type = live.relation_similarity(embedding)
    relation_sim = np.asarray([by_type[t] for t in live.info.relation_types], dtype=np.float64)
    return EgoGraph(node_ids, np.asarray(hop, dtype=np.int8), np.asarray(sims, dtype=np.float64),
                    src[order], dst[order], rel[order], relation_sim)


def ego_graph(graph, embedding: np.ndarray, seeds: Seeds, hops: int = 2, max_nodes: int = 2000) -> EgoGraph:
    """The seeds' BFS neighbourhood, each overflowing level cut to its most similar nodes (PPR,
    PCST): a ``MemoryGraph`` builds it over its arrays, the live graph through Cypher."""
    build = getattr(graph, "ego_graph", None)
    if build is not None:
        return build(embedding, seeds, hops, max_nodes)
    return live_ego_graph(graph, embedding, seeds, hops, max_nodes)


def best_neighbours(graph, embedding: np.ndarray, frontier: Seeds, exclude: Sequence[int], limit: int,
                    node_weight: float = 1.0, relation_weight: float = 0.0) -> Neighbours:
    """The best ``limit`` neighbours of a weighted frontier outside ``exclude`` (beam search), on
    either backend as ``ego_graph``."""
    find = getattr(graph, "best_neighbours", None)
    if find is not None:
        return find(embedding, frontier, exclude, limit, node_weight, relation_weight)
    return live_best_neighbours(graph, embedding, frontier, exclude, limit, node_weight, relation_weight)
