"""Non-learned baselines: one interface, well-formed rankings, determinism, sane PPR."""
from __future__ import annotations

import numpy as np
import pytest

from seeder_dgl.retrieval.baselines import (
    BeamRetriever,
    DenseRetriever,
    KHopRetriever,
    PCSTRetriever,
    PPRMMRRetriever,
    PPRRetriever,
    Retriever,
    ego_graph,
)
from seeder_dgl.retrieval.memory import GraphArrays, dense_topk, khop_select, unit_query
from tests.helpers.graphs import random_embeddings, random_kg

N, DIM = 400, 24


@pytest.fixture(scope="module")
def world():
    kg = random_kg("base", N, 2400, seed=21, num_relations=5)
    # A hub, so ego graphs hit their bound.
    kg.edge_src[:300] = 0
    graph = GraphArrays.from_kg(kg)
    node_emb = random_embeddings(N, DIM, seed=22)
    rel_emb = random_embeddings(5, DIM, seed=23)
    queries = random_embeddings(6, DIM, seed=24)
    return graph, node_emb, rel_emb, queries


def all_retrievers(graph, node_emb, rel_emb):
    return [
        DenseRetriever(node_emb),
        KHopRetriever(graph, node_emb, rel_emb, budgets=(10, 20)),
        PPRRetriever(graph, node_emb, rel_emb, max_nodes=150),
        PPRMMRRetriever(graph, node_emb, rel_emb, max_nodes=150),
        BeamRetriever(graph, node_emb, rel_emb, beam_width=8),
        PCSTRetriever(graph, node_emb, rel_emb, max_nodes=150),
    ]


@pytest.mark.parametrize("k", [1, 5, 20, 60])
def test_rankings_are_well_formed_and_deterministic(world, k):
    graph, node_emb, rel_emb, queries = world
    for retriever in all_retrievers(graph, node_emb, rel_emb):
        assert isinstance(retriever, Retriever)
        for q in queries:
            out = retriever.retrieve(q, k)
            assert 0 < len(out) <= k, retriever.name
            ids = [i for i, _ in out]
            scores = [s for _, s in out]
            assert len(set(ids)) == len(ids), retriever.name
            assert all(isinstance(i, int) and 0 <= i < N for i in ids)
            assert all(np.isfinite(scores))
            # score descending; equal scores by smaller id
            for (i, s), (j, t) in zip(out, out[1:]):
                assert s > t or (s == t and (i < j or retriever.name == "ppr_mmr")), retriever.name
            assert retriever.retrieve(q, k) == out, retriever.name


def test_dense_is_exact(world):
    _, node_emb, _, queries = world
    for q in queries:
        full = node_emb.astype(np.float64) @ unit_query(q)
        ref = np.lexsort((np.arange(N), -full))[:20]
        out = DenseRetriever(node_emb).retrieve(q, 20)
        assert [i for i, _ in out] == ref.tolist()
        np.testing.assert_allclose([s for _, s in out], full[ref], atol=1e-12)


def test_khop_ranks_its_subgraph_by_score(world):
    graph, node_emb, rel_emb, queries = world
    q = queries[0]
    seeds, sims = dense_topk(node_emb, q, 3)
    sel = khop_select(graph, node_emb, rel_emb, q, seeds, [10, 20], seed_scores=sims)
    out = KHopRetriever(graph, node_emb, rel_emb, budgets=(10, 20)).retrieve(q, 1000)
    assert sorted(i for i, _ in out) == sorted(sel.node_ids.tolist())
    score_of = dict(zip(sel.node_ids.tolist(), sel.score.tolist()))
    assert all(score_of[i] == s for i, s in out)


def test_ego_graph_is_bounded_and_hop_ordered(world):
    graph, node_emb, _, queries = world
    q = unit_query(queries[1])
    seeds = np.array([0, 5, 9])  # 0 is the hub
    ego = ego_graph(graph, node_emb, q, seeds, node_emb[seeds].astype(np.float64) @ q, hops=2, max_nodes=60)
    assert ego.num_nodes == 60
    assert ego.node_ids[:3].tolist() == [0, 5, 9]
    assert np.all(np.diff(ego.hop) >= 0) and len(set(ego.node_ids.tolist())) == 60
    # Hop 1 keeps the most similar neighbours of the seeds.
    hop1 = set()
    for s in seeds:
        hop1 |= set(graph.neighbors(s)[0].tolist())
    hop1 -= set(seeds.tolist())
    hop1 = np.array(sorted(hop1))
    best = hop1[np.lexsort((hop1, -(node_emb[hop1].astype(np.float64) @ q)))][:57]
    assert ego.node_ids[3:].tolist() == best.tolist()
    local = ego.node_ids
    assert all(graph_has_edge(graph, local[s], local[d], r) for s, d, r in zip(ego.src, ego.dst, ego.rel))


def graph_has_edge(graph, u, v, r):
    nbr, rel = graph.neighbors(u)
    return bool(np.any((nbr == v) & (rel == r)))


def test_ppr_distribution(world):
    graph, node_emb, rel_emb, queries = world
    ppr = PPRRetriever(graph, node_emb, rel_emb, max_nodes=150)
    for q in queries:
        ego, pr, combined = ppr.scores(q)
        assert pr.shape == (ego.num_nodes,)
        assert np.all(pr >= 0) and pr.sum() == pytest.approx(1.0, abs=1e-9)
        # the restart mass alone guarantees the seeds at least restart * weight
        assert pr[:3].sum() >= 0.15 - 1e-12
        expected = 0.5 * pr / pr.max() + 0.5 * ego.sim
        np.testing.assert_allclose(combined, expected)
        assert combined.max() <= 1.0 + 1e-12


def test_ppr_matches_dense_solve_on_a_small_ego():
    # Path 0-1-2-3 plus an isolated seed 4 (dangling): compare with a direct linear solve.
    graph = GraphArrays.from_arrays(5, [0, 1, 2], [1, 2, 3], [0, 0, 0])
    emb = np.eye(5, dtype=np.float32)
    q = np.array([1.0, 0.0, 0.0, 0.0, 0.5])
    ppr = PPRRetriever(graph, emb, emb[:1], num_seeds=2, iterations=500, tol=0.0)
    ego, pr, _ = ppr.scores(q)
    assert ego.node_ids.tolist()[:2] == [0, 4]
    n = ego.num_nodes
    a = np.zeros((n, n))
    a[ego.src, ego.dst] = 1.0
    deg = a.sum(1)
    p0 = np.zeros(n)
    p0[:2] = np.array([1.0, 0.5]) / 1.5
    m = np.where(deg[None, :] > 0, a / np.where(deg > 0, deg, 1)[None, :], p0[:, None])  # column-stochastic
    x = np.linalg.solve(np.eye(n) - 0.85 * m, 0.15 * p0)
    np.testing.assert_allclose(pr, x, atol=1e-10)


def test_mmr_picks_from_the_ppr_pool_and_spreads(world):
    graph, node_emb, rel_emb, queries = world
    ppr = PPRRetriever(graph, node_emb, rel_emb, max_nodes=150)
    mmr = PPRMMRRetriever(graph, node_emb, rel_emb, max_nodes=150, pool=40)
    for q in queries:
        ego, _, combined = ppr.scores(q)
        order = np.lexsort((ego.node_ids, -combined))[:40]
        pool = set(ego.node_ids[order].tolist())
        out = mmr.retrieve(q, 100)
        assert len(out) == 20  # pick 20
        assert {i for i, _ in out} <= pool
        assert out[0][0] == int(ego.node_ids[order[0]])  # first pick: the most relevant
        values = [s for _, s in out]
        assert all(a >= b - 1e-12 for a, b in zip(values, values[1:]))


def test_mmr_with_lambda_one_is_the_ppr_order(world):
    graph, node_emb, rel_emb, queries = world
    ppr = PPRRetriever(graph, node_emb, rel_emb, max_nodes=150)
    mmr = PPRMMRRetriever(graph, node_emb, rel_emb, max_nodes=150, lam=1.0)
    for q in queries:
        assert [i for i, _ in mmr.retrieve(q, 20)] == [i for i, _ in ppr.retrieve(q, 20)]


def test_beam_reaches_seeds_and_two_hops(world):
    graph, node_emb, rel_emb, queries = world
    beam = BeamRetriever(graph, node_emb, rel_emb, beam_width=4)
    for q in queries:
        seeds, sims = dense_topk(node_emb, q, 3)
        out = dict(beam.retrieve(q, 10_000))
        for s, sim in zip(seeds.tolist(), sims.tolist()):
            assert out[s] >= sim  # a seed keeps at least its own similarity
        near = set(seeds.tolist())
        for s in seeds:
            near |= set(graph.neighbors(s)[0].tolist())
        assert near <= set(out)  # every neighbour of a seed is reached at hop 1


def test_pcst_tree_nodes_come_first(world):
    graph, node_emb, rel_emb, queries = world
    pcst = PCSTRetriever(graph, node_emb, rel_emb, max_nodes=150)
    for q in queries:
        out = pcst.retrieve(q, 10_000)
        flags = [s > 1.5 for _, s in out]  # tree nodes carry +2
        assert any(flags)
        assert flags == sorted(flags, reverse=True)
        assert len(out) == 150  # the whole ego graph, tree first
