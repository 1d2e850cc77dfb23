"""In-memory K-hop-with-filtering reference: hand-built graphs, ties, hubs, and a naive twin."""
from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seeder_dgl.retrieval.memory import (
    GraphArrays,
    _sort_rows,
    attach_labels,
    dense_topk,
    induced_edges,
    khop_filter,
    khop_select,
    unique_undirected,
)
from tests.helpers.graphs import random_embeddings, random_kg


# ---------------------------------------------------------------------------------------------
# A deliberately naive twin: dicts, sets and Python loops, written from docs/method.md, K-hop-with-filtering.
# ---------------------------------------------------------------------------------------------
def naive_khop(src, dst, rel, node_emb, rel_emb, query, seeds, budgets, seed_scores=None):
    q = [float(x) for x in query]
    qn = math.sqrt(sum(x * x for x in q))
    q = [x / qn for x in q]

    def dot(a, b):
        return sum(float(x) * y for x, y in zip(a, b))

    rel_sim = []
    for e in rel_emb:
        e = [float(x) for x in e]
        en = math.sqrt(sum(x * x for x in e)) or 1.0
        rel_sim.append(dot([x / en for x in e], q))
    adj = defaultdict(set)
    for s, d, r in zip(src, dst, rel):
        adj[int(s)].add((int(d), int(r)))
        adj[int(d)].add((int(s), int(r)))

    ids, hops, scores, seen = [], [], [], set()
    frontier = {}
    for i, s in enumerate(seeds):
        s = int(s)
        if s in seen:
            continue
        sim = float(seed_scores[i]) if seed_scores is not None else dot(node_emb[s], q)
        seen.add(s)
        ids.append(s), hops.append(0), scores.append(sim)
        frontier[s] = sim
    for h, budget in enumerate(budgets, start=1):
        if not frontier or budget <= 0:
            break
        best = {}
        for v, sim_v in frontier.items():
            for u, r in adj[v]:
                if u in seen:
                    continue
                value = sim_v + rel_sim[r]
                if u not in best or value > best[u]:
                    best[u] = value
        scored = []
        for u, value in best.items():
            sim_u = dot(node_emb[u], q)
            scored.append((sim_u / 3.0 + value / 3.0, u, sim_u))
        scored.sort(key=lambda t: (-t[0], t[1]))
        frontier = {}
        for score, u, sim_u in scored[:budget]:
            seen.add(u)
            ids.append(u), hops.append(h), scores.append(score)
            frontier[u] = sim_u
    return ids, hops, scores


def assert_same(sel, naive, tol=1e-9):
    ids, hops, scores = naive
    assert sel.node_ids.tolist() == ids
    assert sel.hop.tolist() == hops
    np.testing.assert_allclose(sel.score, scores, rtol=0, atol=tol)


def basis(dim, i, scale=1.0):
    v = np.zeros(dim, dtype=np.float32)
    v[i] = scale
    return v


# ---------------------------------------------------------------------------------------------
# GraphArrays
# ---------------------------------------------------------------------------------------------
def test_graph_arrays_undirected_and_collapsed():
    # (0,1,r0) twice in both orientations, (0,1,r1) distinct, a self loop twice.
    g = GraphArrays.from_arrays(4, [0, 1, 0, 2, 2, 3], [1, 0, 1, 2, 2, 1], [0, 0, 1, 0, 0, 2])
    assert g.num_edges == 4  # (0,1,0) (0,1,1) (2,2,0) (1,3,2)
    assert g.indptr.tolist() == [0, 2, 5, 7, 8]
    n0, r0 = g.neighbors(0)
    assert list(zip(n0.tolist(), r0.tolist())) == [(1, 0), (1, 1)]
    n1, r1 = g.neighbors(1)
    assert list(zip(n1.tolist(), r1.tolist())) == [(0, 0), (0, 1), (3, 2)]
    n2, _ = g.neighbors(2)
    assert n2.tolist() == [2, 2]  # a self loop reads in both directions
    pos, nbr, rel = g.gather(np.array([3, 0]))
    assert pos.tolist() == [0, 1, 1] and nbr.tolist() == [1, 1, 1] and rel.tolist() == [2, 0, 1]


def test_collapse_matches_the_neo4j_writer():
    writer = pytest.importorskip("seeder_dgl.graphstore.writer")
    kg = random_kg("dups", 30, 400, seed=3, num_relations=3)  # many repeated pairs
    kg.edge_dst[:50] = kg.edge_src[50:100]  # reversed copies of other triples
    kg.edge_src[:50] = kg.edge_dst[50:100]
    kg.edge_rel[:50] = kg.edge_rel[50:100]
    ours = unique_undirected(kg.edge_src, kg.edge_dst, kg.edge_rel)
    theirs = writer.undirected_unique(kg.edge_src, kg.edge_dst, kg.edge_rel)
    assert sorted(ours.tolist()) == sorted(theirs.tolist())
    g = GraphArrays.from_kg(kg)
    assert g.num_edges == theirs.shape[0]
    assert g.indices.shape[0] == 2 * g.num_edges


def test_from_arrays_rejects_bad_ids():
    with pytest.raises(ValueError):
        GraphArrays.from_arrays(3, [0], [3], [0])
    with pytest.raises(ValueError):
        GraphArrays.from_arrays(3, [0], [1], [-1])


# ---------------------------------------------------------------------------------------------
# Hand-built graphs
# ---------------------------------------------------------------------------------------------
def test_hand_built_scores_and_order():
    # dim 4, query = e0. sims: node i -> its e0 coordinate.
    dim = 4
    node_emb = np.stack([basis(dim, 0, 1.0), basis(dim, 0, 0.5), basis(dim, 0, 0.25),
                         basis(dim, 1), basis(dim, 0, -0.5)])
    rel_emb = np.stack([basis(dim, 0, 2.0), basis(dim, 1)])  # sim(q, r0) = 1 (renormalised), r1 = 0
    # 0 -r0- 1, 0 -r1- 2, 2 -r0- 3 (stored reversed), 1 -r1- 4
    g = GraphArrays.from_arrays(5, [0, 0, 3, 1], [1, 2, 2, 4], [0, 1, 0, 1])
    sel = khop_select(g, node_emb, rel_emb, basis(dim, 0, 3.0), [0], [1, 2])
    # hop 1: u=1: 0.5/3 + (1+1)/3 = 0.8333; u=2: 0.25/3 + (1+0)/3 = 0.41667 -> keep 1
    # hop 2 from {1}: u=4 via r1: -0.5/3 + (0.5+0)/3 = 0 ; 2 is not adjacent to 1.
    assert sel.node_ids.tolist() == [0, 1, 4]
    assert sel.hop.tolist() == [0, 1, 2]
    np.testing.assert_allclose(sel.score, [1.0, 0.5 / 3 + 2 / 3, -0.5 / 3 + 0.5 / 3], atol=1e-12)
    np.testing.assert_allclose(sel.similarity, [1.0, 0.5, -0.5], atol=1e-12)


def test_max_over_frontier_edges_with_relation():
    dim = 3
    node_emb = np.stack([basis(dim, 0, 0.5), basis(dim, 0, 0.25), basis(dim, 0, 0.0)])
    rel_emb = np.stack([basis(dim, 0), basis(dim, 1)])  # r0: 1, r1: 0
    # node 2 reached from 0 via r1 (0.5+0) and from 1 via r0 (0.25+1): the max is the r0 edge.
    g = GraphArrays.from_arrays(3, [0, 1], [2, 2], [1, 0])
    sel = khop_select(g, node_emb, rel_emb, basis(dim, 0), [0, 1], [5])
    assert sel.node_ids.tolist() == [0, 1, 2]
    assert sel.score[2] == pytest.approx(0.0 / 3 + 1.25 / 3, abs=1e-15)


def test_ties_break_by_smaller_id():
    # Star: centre 0, leaves 1..9 with identical embeddings and relation -> identical scores.
    dim = 2
    node_emb = np.tile(basis(dim, 0, 0.5), (10, 1))
    rel_emb = np.stack([basis(dim, 0)])
    leaves = np.array([7, 3, 9, 1, 5, 2, 8, 4, 6])
    g = GraphArrays.from_arrays(10, np.zeros(9, np.int64), leaves, np.zeros(9, np.int64))
    sel = khop_select(g, node_emb, rel_emb, basis(dim, 0), [0], [4])
    assert sel.node_ids.tolist() == [0, 1, 2, 3, 4]
    assert len(set(sel.score[1:].tolist())) == 1
    # A tie straddling the budget boundary inside a larger candidate set (partial selection path).
    node_emb[[2, 6]] = basis(dim, 0, 0.75)  # two clear winners, then seven tied leaves
    sel = khop_select(g, node_emb, rel_emb, basis(dim, 0), [0], [5])
    assert sel.node_ids.tolist() == [0, 2, 6, 1, 3, 4]


def test_ties_on_the_prefilter_path():
    # 5000 tied leaves (> 4096 candidates: float32 prefilter, then float64 rescoring).
    n = 5001
    node_emb = np.tile(basis(2, 0, 0.5), (n, 1))
    rel_emb = np.stack([basis(2, 0)])
    leaves = np.random.default_rng(0).permutation(np.arange(1, n))
    g = GraphArrays.from_arrays(n, np.zeros(n - 1, np.int64), leaves, np.zeros(n - 1, np.int64))
    sel = khop_select(g, node_emb, rel_emb, basis(2, 0), [0], [10])
    assert sel.node_ids.tolist() == list(range(11))


def test_sort_rows_fallback_matches_lexsort():
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 2**40, 500), rng.integers(0, 3, 500)
    c = rng.integers(0, 2**40, 500)
    assert _sort_rows(b, a, c).tolist() == np.lexsort((c, a, b)).tolist()  # too wide to pack
    assert _sort_rows(b, c % 7).tolist() == np.lexsort((c % 7, b)).tolist()  # packed


def test_hub_with_thousands_of_neighbours():
    rng = np.random.default_rng(7)
    n = 6001
    leaves = np.arange(1, n)
    # hub 0 plus a few leaf-leaf edges so hop 2 has work to do
    extra = rng.integers(1, n, size=(20000, 2))
    src = np.concatenate([np.zeros(n - 1, np.int64), extra[:, 0]])
    dst = np.concatenate([leaves, extra[:, 1]])
    rel = rng.integers(0, 4, src.shape[0])
    node_emb = random_embeddings(n, 16, seed=1)
    rel_emb = random_embeddings(4, 16, seed=2)
    q = random_embeddings(1, 16, seed=3)[0]
    g = GraphArrays.from_arrays(n, src, dst, rel)
    sel = khop_select(g, node_emb, rel_emb, q, [0], [25, 40])
    naive = naive_khop(src, dst, rel, node_emb, rel_emb, q, [0], [25, 40])
    assert_same(sel, naive)
    assert (sel.hop == 1).sum() == 25 and (sel.hop == 2).sum() == 40


def test_disconnected_seeds_expand_both_components():
    # two paths 0-1-2 and 3-4-5, no edge between them
    dim = 4
    node_emb = random_embeddings(6, dim, seed=5)
    rel_emb = random_embeddings(2, dim, seed=6)
    q = random_embeddings(1, dim, seed=7)[0]
    src, dst, rel = [0, 1, 3, 4], [1, 2, 4, 5], [0, 1, 1, 0]
    g = GraphArrays.from_arrays(6, src, dst, rel)
    sel = khop_select(g, node_emb, rel_emb, q, [0, 3], [2, 2])
    assert sel.node_ids.tolist()[:2] == [0, 3]
    assert sorted(sel.node_ids.tolist()) == [0, 1, 2, 3, 4, 5]
    assert_same(sel, naive_khop(src, dst, rel, node_emb, rel_emb, q, [0, 3], [2, 2]))


def test_budget_larger_than_reachable_and_isolated_seed():
    node_emb = random_embeddings(8, 4, seed=1)
    rel_emb = random_embeddings(1, 4, seed=2)
    q = random_embeddings(1, 4, seed=3)[0]
    g = GraphArrays.from_arrays(8, [0, 1], [1, 2], [0, 0])  # 3..7 isolated
    sel = khop_select(g, node_emb, rel_emb, q, [0], [100, 100, 100])
    assert sel.node_ids.tolist() == [0, 1, 2]
    assert sel.hop.tolist() == [0, 1, 2]
    sel = khop_select(g, node_emb, rel_emb, q, [5], [10, 10])
    assert sel.node_ids.tolist() == [5]


def test_zero_budget_ends_expansion_and_duplicate_seeds():
    node_emb = random_embeddings(5, 4, seed=1)
    rel_emb = random_embeddings(1, 4, seed=2)
    q = random_embeddings(1, 4, seed=3)[0]
    g = GraphArrays.from_arrays(5, [0, 1, 2, 3], [1, 2, 3, 4], [0, 0, 0, 0])
    sel = khop_select(g, node_emb, rel_emb, q, [0], [1, 0, 5])
    assert sel.node_ids.tolist() == [0, 1]  # same as LiveGraph: a 0 budget stops the loop
    sel = khop_select(g, node_emb, rel_emb, q, [2, 2, 0], [0])
    assert sel.node_ids.tolist() == [2, 0]


def test_seed_scores_replace_seed_similarity():
    node_emb = random_embeddings(4, 4, seed=1)
    rel_emb = random_embeddings(1, 4, seed=2)
    q = random_embeddings(1, 4, seed=3)[0]
    src, dst, rel = [0, 0, 1], [2, 3, 3], [0, 0, 0]
    g = GraphArrays.from_arrays(4, src, dst, rel)
    given_scores = [0.9, -0.3]
    sel = khop_select(g, node_emb, rel_emb, q, [0, 1], [2], seed_scores=given_scores)
    np.testing.assert_allclose(sel.score[:2], given_scores)
    assert_same(sel, naive_khop(src, dst, rel, node_emb, rel_emb, q, [0, 1], [2], seed_scores=given_scores))


# ---------------------------------------------------------------------------------------------
# The naive twin on random graphs
# ---------------------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(2, 60), density=st.floats(0.5, 6.0),
       budgets=st.lists(st.integers(0, 12), min_size=1, max_size=3), num_seeds=st.integers(1, 4))
def test_matches_naive_on_random_graphs(seed, n, density, budgets, num_seeds):
    rng = np.random.default_rng(seed)
    m = int(n * density)
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    rel = rng.integers(0, 3, m)
    node_emb = random_embeddings(n, 8, seed=seed % 1000)
    rel_emb = random_embeddings(3, 8, seed=seed % 997 + 1)
    q = rng.normal(size=8)
    seeds = rng.integers(0, n, num_seeds).tolist()
    g = GraphArrays.from_arrays(n, src, dst, rel)
    sel = khop_select(g, node_emb, rel_emb, q, seeds, budgets)
    assert_same(sel, naive_khop(src, dst, rel, node_emb, rel_emb, q, seeds, budgets))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(2, 40),
       budgets=st.lists(st.integers(1, 6), min_size=1, max_size=3))
def test_matches_naive_with_many_exact_ties(seed, n, budgets):
    """Coarse dyadic embeddings and a basis query: similarities are exact, so many scores tie
    exactly and the (score desc, id asc) rule decides; both sides must pick the same nodes."""
    rng = np.random.default_rng(seed)
    m = 3 * n
    src, dst, rel = rng.integers(0, n, m), rng.integers(0, n, m), rng.integers(0, 2, m)
    node_emb = (rng.integers(-2, 3, size=(n, 3)) / 4.0).astype(np.float32)
    rel_emb = np.stack([basis(3, 0), basis(3, 1)])  # sim(q, r) in {1, 0}
    q = basis(3, 0)
    seeds = rng.integers(0, n, 2).tolist()
    g = GraphArrays.from_arrays(n, src, dst, rel)
    sel = khop_select(g, node_emb, rel_emb, q, seeds, budgets)
    assert_same(sel, naive_khop(src, dst, rel, node_emb, rel_emb, q, seeds, budgets), tol=0.0)


# ---------------------------------------------------------------------------------------------
# QuerySubgraph output, induced edges, labels, dense top-k
# ---------------------------------------------------------------------------------------------
def test_khop_filter_record_and_induced_edges():
    kg = random_kg("rec", 80, 300, seed=4)
    node_emb = random_embeddings(80, 16, seed=1)
    rel_emb = random_embeddings(4, 16, seed=2)
    q = random_embeddings(1, 16, seed=9)[0]
    g = GraphArrays.from_kg(kg)
    rec = khop_filter(g, node_emb, rel_emb, q, [5, 17], [6, 8], query_id=42)
    sel = khop_select(g, node_emb, rel_emb, q, [5, 17], [6, 8])
    assert rec.query_id == 42
    assert rec.node_ids.dtype == np.int64 and rec.hop.dtype == np.int8 and rec.score.dtype == np.float32
    assert rec.node_ids.tolist() == sel.node_ids.tolist()
    np.testing.assert_allclose(rec.score, sel.score, rtol=1e-6)
    # Induced edges: exactly the stored undirected edges among the nodes, in both directions
    # (a self loop, read in both directions, appears twice).
    inside = set(rec.node_ids.tolist())
    want = []
    for u, v, r in zip(g.edge_u.tolist(), g.edge_v.tolist(), g.edge_rel.tolist()):
        if u in inside and v in inside:
            want += [(u, v, r), (v, u, r)]
    got = [(int(rec.node_ids[s]), int(rec.node_ids[d]), int(r)) for s, d, r in zip(rec.src, rec.dst, rec.rel)]
    assert sorted(got) == sorted(want)


def test_induced_edges_self_loop_both_directions():
    g = GraphArrays.from_arrays(3, [0, 1, 1], [1, 1, 2], [0, 1, 0])
    src, dst, rel = induced_edges(g, np.array([1, 0]))
    assert list(zip(src.tolist(), dst.tolist(), rel.tolist())) == [(0, 0, 1), (0, 0, 1), (0, 1, 0), (1, 0, 0)]


def test_attach_labels():
    g = GraphArrays.from_arrays(6, [0, 1, 2], [1, 2, 3], [0, 0, 0])
    emb = random_embeddings(6, 4, seed=1)
    rec = khop_filter(g, emb, random_embeddings(1, 4), emb[0], [0], [1, 1])
    attach_labels(rec, [2, 5, 5])
    assert rec.labels.dtype == bool and rec.labels.shape == (rec.num_nodes,)
    assert rec.labels.tolist() == [n == 2 for n in rec.node_ids.tolist()]
    assert rec.num_answers == 2


def test_dense_topk_exact_with_ties():
    emb = random_embeddings(6000, 32, seed=11)  # > 4096 rows: the float32-prefilter path
    emb[[100, 7, 1500]] = emb[900]  # exact duplicates of one row -> tied similarities
    q = emb[900] + 0.01 * random_embeddings(1, 32, seed=12)[0]
    ids, sims = dense_topk(emb, q, 10)
    qn = q.astype(np.float64) / np.linalg.norm(q.astype(np.float64))
    full = emb.astype(np.float64) @ qn
    ref = np.lexsort((np.arange(6000), -full))[:10]
    assert ids.tolist() == ref.tolist()
    assert ids[:4].tolist() == [7, 100, 900, 1500]
    np.testing.assert_allclose(sims, full[ref], rtol=0, atol=1e-12)
    assert dense_topk(emb, q, 0)[0].size == 0 and dense_topk(emb, q, 9000)[0].size == 6000
