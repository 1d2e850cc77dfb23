"""Retrieval methods on the in-memory backend: one interface, well-formed rankings, determinism,
sane PPR, seeds from the settings' seeding, and the neighbourhoods the backend gives them."""
from __future__ import annotations

import numpy as np
import pytest

from seeder_dgl.errors import SeederError
from seeder_dgl.retrieval.pipeline import MemoryGraph, RetrievalSettings
from seeder_dgl.retrieval.neighbourhood import memory_best_neighbours, memory_ego_graph
from seeder_dgl.retrieval.base import GraphRetriever
from seeder_dgl.retrieval.baselines import (
    BeamRetriever,
    DenseRetriever,
    KHopRetriever,
    PCSTRetriever,
    PPRMMRRetriever,
    PPRRetriever,
)
from seeder_dgl.retrieval.methods import BASELINES, RETRIEVERS, make_retriever
from seeder_dgl.retrieval.memory import (
    GraphArrays,
    dense_topk,
    khop_filter,
    khop_select,
    max_by_group,
    node_similarity,
    rank_by_score,
    rank_desc,
    relation_similarity,
    unit_query,
)
from tests.helpers.graphs import NameIndex, random_embeddings, random_kg

N, DIM = 400, 24
DENSE3 = RetrievalSettings(seeds=3, budgets=(10, 20))


@pytest.fixture(scope="module")
def world():
    kg = random_kg("base", N, 2400, seed=21, num_relations=5)
    # A hub, so ego graphs hit their bound.
    kg.edge_src[:300] = 0
    graph = MemoryGraph(GraphArrays.from_kg(kg), random_embeddings(N, DIM, seed=22), random_embeddings(5, DIM, seed=23),
                        np.asarray(kg.node_type), list(kg.node_type_names))
    queries = random_embeddings(6, DIM, seed=24)
    return graph, queries


def all_retrievers(graph, settings=DENSE3):
    return [
        DenseRetriever(graph, settings),
        KHopRetriever(graph, settings),
        PPRRetriever(graph, settings, max_nodes=150),
        PPRMMRRetriever(graph, settings, max_nodes=150),
        BeamRetriever(graph, settings, beam_width=8),
        PCSTRetriever(graph, settings, max_nodes=150),
    ]


def ranking(retriever, q, k, question="q"):
    return retriever.search(question, q, k).ranking


@pytest.mark.parametrize("k", [1, 5, 20, 60])
def test_rankings_are_well_formed_and_deterministic(world, k):
    graph, queries = world
    for retriever in all_retrievers(graph):
        assert isinstance(retriever, GraphRetriever)
        for q in queries:
            found = retriever.search("q", q, k)
            out = found.ranking
            assert 0 < len(out) <= min(k, found.considered), retriever.name
            ids = [i for i, _ in out]
            scores = [s for _, s in out]
            assert len(set(ids)) == len(ids), retriever.name
            assert all(isinstance(i, int) and 0 <= i < N for i in ids)
            assert all(np.isfinite(scores))
            # score descending; equal scores by smaller id
            for (i, s), (j, t) in zip(out, out[1:]):
                assert s > t or (s == t and (i < j or retriever.name == "ppr_mmr")), retriever.name
            assert ranking(retriever, q, k) == out, retriever.name
            if retriever.name != "dense":  # every graph method starts from the settings' seeds
                assert [i for i, _ in found.seeds] == dense_topk(graph.node_emb, q, 3)[0].tolist()


def test_the_registry_builds_every_method_and_refuses_bad_input(world):
    graph, queries = world
    assert list(RETRIEVERS) == [*BASELINES, "seeder"]
    for name in BASELINES:
        assert make_retriever(name, graph, DENSE3).name == name
    with pytest.raises(SeederError, match="unknown method 'bm25': choose one of dense, khop"):
        make_retriever("bm25", graph, DENSE3)
    with pytest.raises(SeederError, match="needs a trained policy"):
        make_retriever("seeder", graph, DENSE3)
    for bad in (0, -3, "many"):
        with pytest.raises(SeederError) as err:
            KHopRetriever(graph, DENSE3).search("q", queries[0], bad)
        assert "\n" not in str(err.value)
    with pytest.raises(SeederError, match="full-text seeding needs the live graph"):
        KHopRetriever(graph, RetrievalSettings(seeding="fulltext")).search("q", queries[0], 5)
    info = PPRMMRRetriever(graph, DENSE3).describe()
    assert info["class"] == "PPRMMRRetriever" and info["seeds"] == 3 and info["lam"] == pytest.approx(0.78)
    assert KHopRetriever(graph, DENSE3).describe()["budgets"] == [10, 20]


def test_dense_is_exact(world):
    graph, queries = world
    for q in queries:
        full = graph.node_emb.astype(np.float64) @ unit_query(q)
        ref = np.lexsort((np.arange(N), -full))[:20]
        out = ranking(DenseRetriever(graph, DENSE3), q, 20)
        assert [i for i, _ in out] == ref.tolist()
        np.testing.assert_allclose([s for _, s in out], full[ref], atol=1e-12)


def test_khop_ranks_its_subgraph_by_score(world):
    graph, queries = world
    q = queries[0]
    seeds, sims = dense_topk(graph.node_emb, q, 3)
    sel = khop_select(graph.arrays, graph.node_emb, graph.rel_emb, q, seeds, [10, 20], seed_scores=sims)
    out = ranking(KHopRetriever(graph, DENSE3), q, 1000)
    assert sorted(i for i, _ in out) == sorted(sel.node_ids.tolist())
    score_of = dict(zip(sel.node_ids.tolist(), sel.score.tolist()))
    assert all(score_of[i] == s for i, s in out)  # float64: float32 rounding never decides an order
    assert out == rank_by_score(sel.node_ids, sel.score, 1000)
    # A backend that keeps only the record's float32 scores (the live graph) ranks by those.
    sub = graph.khop_filter(q, list(zip(seeds.tolist(), sims.tolist())), [10, 20])
    np.testing.assert_array_equal(sub.score, sel.score.astype(np.float32))
    assert sub.exact_score is not None and sub.exact_score.tolist() == sel.score.tolist()


def test_ego_graph_is_bounded_and_hop_ordered(world):
    graph, queries = world
    q = unit_query(queries[1])
    seeds = np.array([0, 5, 9])  # 0 is the hub
    seeded = list(zip(seeds.tolist(), (graph.node_emb[seeds].astype(np.float64) @ q).tolist()))
    ego = graph.ego_graph(queries[1], seeded, hops=2, max_nodes=60)
    assert ego.num_nodes == 60
    assert ego.node_ids[:3].tolist() == [0, 5, 9]
    assert np.all(np.diff(ego.hop) >= 0) and len(set(ego.node_ids.tolist())) == 60
    # Hop 1 keeps the most similar neighbours of the seeds.
    hop1 = set()
    for s in seeds:
        hop1 |= set(graph.arrays.neighbors(s)[0].tolist())
    hop1 -= set(seeds.tolist())
    hop1 = np.array(sorted(hop1))
    best = hop1[np.lexsort((hop1, -(graph.node_emb[hop1].astype(np.float64) @ q)))][:57]
    assert ego.node_ids[3:].tolist() == best.tolist()
    local = ego.node_ids
    assert all(graph_has_edge(graph.arrays, local[s], local[d], r) for s, d, r in zip(ego.src, ego.dst, ego.rel))
    np.testing.assert_allclose(ego.relation_sim, relation_similarity(graph.rel_emb, q))
    same = memory_ego_graph(graph.arrays, graph.node_emb, graph.rel_emb, queries[1], seeded, 2, 60)
    assert same.node_ids.tolist() == ego.node_ids.tolist()


def graph_has_edge(graph, u, v, r):
    nbr, rel = graph.neighbors(u)
    return bool(np.any((nbr == v) & (rel == r)))


def test_best_neighbours_rank_every_candidate_of_the_frontier(world):
    graph, queries = world
    q = queries[2]
    frontier = [(0, 0.4), (7, -0.1), (12, 0.25)]
    exclude = [0, 7, 12, 3]
    found = graph.best_neighbours(q, frontier, exclude, 15, node_weight=0.35, relation_weight=0.15)
    # By hand: every neighbour outside `exclude`, its best transition, then the top 15.
    best: dict[int, float] = {}
    rel_sim = relation_similarity(graph.rel_emb, unit_query(q))
    for v, w in frontier:
        for u, r in zip(*graph.arrays.neighbors(v)):
            if int(u) not in exclude:
                best[int(u)] = max(best.get(int(u), -np.inf), w + 0.15 * rel_sim[r])
    ids = np.asarray(sorted(best))
    score = np.asarray([best[i] for i in ids]) + 0.35 * node_similarity(graph.node_emb, ids, unit_query(q))
    top = rank_desc(score, ids, 15)
    assert found.ids.tolist() == ids[top].tolist()
    np.testing.assert_allclose(found.score, score[top], atol=1e-12)
    assert len(memory_best_neighbours(graph.arrays, graph.node_emb, graph.rel_emb, q, [], [], 5)) == 0


def test_ppr_distribution(world):
    graph, queries = world
    ppr = PPRRetriever(graph, DENSE3, max_nodes=150)
    for q in queries:
        seeds, ego, pr, combined = ppr.scores("q", q)
        assert len(seeds) == 3 and ego.node_ids[:3].tolist() == [i for i, _ in seeds]
        assert pr.shape == (ego.num_nodes,)
        assert np.all(pr >= 0) and pr.sum() == pytest.approx(1.0, abs=1e-9)
        # the restart mass alone guarantees the seeds at least restart * weight
        assert pr[:3].sum() >= 0.15 - 1e-12
        expected = 0.5 * pr / pr.max() + 0.5 * ego.sim
        np.testing.assert_allclose(combined, expected)
        assert combined.max() <= 1.0 + 1e-12


def test_ppr_matches_dense_solve_on_a_small_ego():
    # Path 0-1-2-3 plus an isolated seed 4 (dangling): compare with a direct linear solve.
    emb = np.eye(5, dtype=np.float32)
    graph = MemoryGraph(GraphArrays.from_arrays(5, [0, 1, 2], [1, 2, 3], [0, 0, 0]), emb, emb[:1])
    q = np.array([1.0, 0.0, 0.0, 0.0, 0.5])
    ppr = PPRRetriever(graph, RetrievalSettings(seeds=2), iterations=500, tol=0.0)
    _, ego, pr, _ = ppr.scores("q", q)
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
    graph, queries = world
    ppr = PPRRetriever(graph, DENSE3, max_nodes=150)
    mmr = PPRMMRRetriever(graph, DENSE3, max_nodes=150, pool=40)
    for q in queries:
        _, ego, _, combined = ppr.scores("q", q)
        order = np.lexsort((ego.node_ids, -combined))[:40]
        pool = set(ego.node_ids[order].tolist())
        out = ranking(mmr, q, 100)
        assert len(out) == 20  # pick 20
        assert {i for i, _ in out} <= pool
        assert out[0][0] == int(ego.node_ids[order[0]])  # first pick: the most relevant
        values = [s for _, s in out]
        assert all(a >= b - 1e-12 for a, b in zip(values, values[1:]))


def test_mmr_with_lambda_one_is_the_ppr_order(world):
    graph, queries = world
    ppr = PPRRetriever(graph, DENSE3, max_nodes=150)
    mmr = PPRMMRRetriever(graph, DENSE3, max_nodes=150, lam=1.0)
    for q in queries:
        assert [i for i, _ in ranking(mmr, q, 20)] == [i for i, _ in ranking(ppr, q, 20)]


def reference_beam(graph: MemoryGraph, q, k, width=20, w_path=0.5, w_node=0.35, w_rel=0.15, penalty=0.02):
    """Beam search that scores every candidate of every hop (what the classes did before they
    asked the backend for each hop's best candidates only)."""
    qu = unit_query(q)
    rel_sim = relation_similarity(graph.rel_emb, qu)
    beam, beam_score = dense_topk(graph.node_emb, q, 3)
    expanded = np.zeros(graph.arrays.num_nodes, dtype=bool)
    expanded[beam] = True
    reached, reached_score = [beam], [beam_score]
    for _ in range(2):
        pos, nbr, rel = graph.arrays.gather(beam)
        fresh = ~expanded[nbr]
        pos, nbr, rel = pos[fresh], nbr[fresh], rel[fresh]
        if nbr.size == 0:
            break
        cand, best = max_by_group(nbr, w_path * beam_score[pos] + w_rel * rel_sim[rel])
        score = best + w_node * node_similarity(graph.node_emb, cand, qu) - penalty
        reached.append(cand)
        reached_score.append(score)
        keep = rank_desc(score, cand, width)
        beam, beam_score = cand[keep], score[keep]
        expanded[beam] = True
    ids, scores = max_by_group(np.concatenate(reached), np.concatenate(reached_score))
    return rank_by_score(ids, scores, k)


@pytest.mark.parametrize("k", [1, 10, 50, 150])
def test_beam_equals_scoring_every_candidate(world, k):
    graph, queries = world
    beam = BeamRetriever(graph, DENSE3)
    for q in queries:
        assert ranking(beam, q, k) == reference_beam(graph, q, k)


def test_beam_reaches_seeds_and_two_hops(world):
    graph, queries = world
    beam = BeamRetriever(graph, DENSE3, beam_width=4)
    for q in queries:
        seeds, sims = dense_topk(graph.node_emb, q, 3)
        out = dict(ranking(beam, q, 10_000))
        for s, sim in zip(seeds.tolist(), sims.tolist()):
            assert out[s] >= sim  # a seed keeps at least its own similarity
        near = set(seeds.tolist())
        for s in seeds:
            near |= set(graph.arrays.neighbors(s)[0].tolist())
        assert near <= set(out)  # every neighbour of a seed is reached at hop 1


def test_pcst_tree_nodes_come_first(world):
    graph, queries = world
    pcst = PCSTRetriever(graph, DENSE3, max_nodes=150)
    for q in queries:
        out = ranking(pcst, q, 10_000)
        flags = [s > 1.5 for _, s in out]  # tree nodes carry +2
        assert any(flags)
        assert flags == sorted(flags, reverse=True)
        assert len(out) == 150  # the whole ego graph, tree first


def test_text_seeding_reaches_every_graph_method_and_names_are_read_once(world):
    """A profile's full-text seeds come from the backend's seeding, whichever method asks."""
    graph, queries = world
    q = queries[0]
    dense_first = dense_topk(graph.node_emb, q, 1)[0][0]
    chosen = next(i for i in range(N) if i != dense_first and graph.arrays.neighbors(i)[0].size)
    index = NameIndex(graph, {"who is chosen": chosen})
    linked = MemoryGraph(graph.arrays, graph.node_emb, graph.rel_emb, live=index)
    settings = RetrievalSettings(seeds=1, budgets=(10, 20), seeding="fulltext")
    linked.link_names(["who is chosen"], q[None, :])
    assert index.calls == 1
    for retriever in all_retrievers(linked, settings)[1:]:
        found = retriever.search("who is chosen", q, 50)
        assert [i for i, _ in found.seeds] == [chosen], retriever.name
        if retriever.name in ("khop", "ppr"):  # the subgraph holds its seed; PPR restarts there
            assert chosen in [i for i, _ in found.ranking], retriever.name
    assert index.calls == 1  # every method read the names kept by link_names
    expected = khop_filter(graph.arrays, graph.node_emb, graph.rel_emb, q, [chosen], [10, 20],
                           seed_scores=[float(graph.node_emb[chosen].astype(np.float64) @ unit_query(q))])
    got = KHopRetriever(linked, settings).search("who is chosen", q, 1000).ranking
    assert sorted(i for i, _ in got) == sorted(expected.node_ids.tolist())
    KHopRetriever(linked, settings).search("who is chosen", q * 2.0, 5)  # another embedding: asked again
    assert index.calls == 2
