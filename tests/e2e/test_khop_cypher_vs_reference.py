"""K-hop-with-filtering in Cypher selects the same nodes with the same scores as the in-memory reference.

Neo4j's vector.similarity.cosine works in float32 (Lucene), the reference in float64, so scores
agree to ~1e-7: compared at 1e-6. Node sets must be identical; the graphs are built so that
ties are exact (identical vectors give identical scores on both sides, broken by smaller id).
"""
from __future__ import annotations

import numpy as np
import pytest

from loaders.kg import KnowledgeGraph
from seeder_dgl.graphstore.live import LiveGraph
from seeder_dgl.graphstore.writer import GraphWriter, dataset_label as label_for
from seeder_dgl.retrieval.memory import GraphArrays, khop_select
from tests.helpers.graphs import random_embeddings, random_kg


def _tie_and_hub_graph(name: str) -> tuple[KnowledgeGraph, np.ndarray]:
    """Node 0 is a hub with 3,000 leaves; leaves come in groups sharing one vector (exact ties);
    a chain hangs off some leaves for a second hop."""
    rng = np.random.default_rng(3)
    leaves = np.arange(1, 3001)
    chain = np.arange(3001, 3401)
    n = 3401
    src = np.concatenate([np.zeros(3000, np.int64), leaves[:400]])
    dst = np.concatenate([leaves, chain])
    rel = np.concatenate([rng.integers(0, 3, 3000), rng.integers(0, 3, 400)])
    base = random_embeddings(60, seed=4)
    emb = np.concatenate([random_embeddings(1, seed=5), base[leaves % 50], base[50 + (chain % 10)]])
    kg = KnowledgeGraph(name, [f"n{i}" for i in range(n)], [f"n{i}" for i in range(n)], np.zeros(n, np.int64),
                        ["thing"], src, dst, rel, ["r0", "r1", "r2"])
    return kg, emb


def _random_graph(name: str):
    kg = random_kg(name, 1500, 9000, seed=8)
    return kg, random_embeddings(1500, seed=8)


def _short_path_graph(name: str):
    """Fewer neighbours than any budget, and partitions left with no candidate at all: a path
    0-1-2-3-4 and two isolated nodes, which dense seeding may pick."""
    n = 7
    kg = KnowledgeGraph(name, [f"n{i}" for i in range(n)], [f"n{i}" for i in range(n)], np.zeros(n, np.int64),
                        ["thing"], np.array([0, 1, 2, 3]), np.array([1, 2, 3, 4]), np.array([0, 1, 0, 1]),
                        ["r0", "r1"])
    return kg, random_embeddings(n, seed=12)


@pytest.mark.parametrize("build", [_random_graph, _tie_and_hub_graph, _short_path_graph],
                         ids=["random", "ties-and-hub", "short-path"])
def test_cypher_khop_equals_reference(neo4j_driver, dataset_label, build):
    """Also with each hop split into 1, 2 and 3 concurrent partitions: always the same result."""
    kg, emb = build(dataset_label)
    rel_emb = random_embeddings(len(kg.relation_names), seed=9)
    writer = GraphWriter(neo4j_driver, dataset_label)
    # Vectors of any length go in; the writer stores them unit length (the Cypher cosine needs it),
    # so the reference on the unit vectors is still the judge. (Not on the tie graph: rescaling
    # would round its identical vectors apart.)
    lengths = np.random.default_rng(1).uniform(0.5, 3.0, size=(len(emb), 1)).astype(np.float32)
    writer.ingest(kg, emb * lengths if build is _random_graph else emb, rel_emb, "test-model", progress=False)
    try:
        lives = [LiveGraph(neo4j_driver, dataset_label, hop_partitions=p) for p in (1, 2, 3)]
        arrays = GraphArrays.from_kg(kg)
        rng = np.random.default_rng(0)
        queries = [random_embeddings(1, seed=100 + i)[0] for i in range(6)]
        queries.append(emb[0] + 0.01 * rng.normal(size=emb.shape[1]))  # seeds on the hub
        for q in queries:
            seeds = lives[0].dense_seeds(q, 3, exact=True)
            ref = khop_select(arrays, emb, rel_emb, q, [s for s, _ in seeds], [40, 60],
                              seed_scores=[s for _, s in seeds])
            whole = lives[0].khop_filter(q, seeds, [40, 60, 80])
            for live in lives:
                sub = live.khop_filter(q, seeds, [40, 60])
                assert sub.node_ids.tolist() == ref.node_ids.tolist(), live.hop_partitions
                assert sub.hop.tolist() == ref.hop.tolist()
                np.testing.assert_allclose(sub.score, ref.score, atol=1e-6)
                # A third hop: partitions against one query (the reference's float64 sums can
                # split ties that Neo4j's float32 scores keep, so it is not the judge there).
                deeper = live.khop_filter(q, seeds, [40, 60, 80])
                assert deeper.node_ids.tolist() == whole.node_ids.tolist(), live.hop_partitions
                np.testing.assert_array_equal(deeper.score, whole.score)
    finally:
        writer.reset()


def test_hop_partitions_setting(monkeypatch):
    from seeder_dgl.errors import SeederError
    from seeder_dgl.graphstore.live import default_hop_partitions

    monkeypatch.setenv("SEEDER_HOP_PARTITIONS", "3")
    assert default_hop_partitions() == 3
    for bad in ("0", "two"):
        monkeypatch.setenv("SEEDER_HOP_PARTITIONS", bad)
        with pytest.raises(SeederError, match="SEEDER_HOP_PARTITIONS"):
            default_hop_partitions()
    monkeypatch.delenv("SEEDER_HOP_PARTITIONS")
    assert default_hop_partitions() == 2


def test_nodes_without_a_sketch_still_give_the_reference_result_and_ingest_adds_them(neo4j_driver,
                                                                                    dataset_label):
    """Nodes written by other tools (or by a version before sketches) have no sketch: K-hop gives
    them the widest bounds and stays exact; running the same ingest again gives them one."""
    from seeder_dgl.graphstore.sketch import sketch_properties
    from seeder_dgl.graphstore.writer import unit_vectors

    kg, emb = _random_graph(dataset_label)
    rel_emb = random_embeddings(len(kg.relation_names), seed=9)
    writer = GraphWriter(neo4j_driver, dataset_label)
    writer.ingest(kg, emb, rel_emb, "test-model", progress=False)
    try:
        removed = neo4j_driver.execute_query(
            f"MATCH (n:{label_for(dataset_label)}) WHERE n.id % 3 = 0 REMOVE n.sketch, n.sketch_error RETURN count(n) AS c"
        ).records[0]["c"]
        assert removed == 500
        live, arrays = LiveGraph(neo4j_driver, dataset_label), GraphArrays.from_kg(kg)
        for i in range(4):
            q = random_embeddings(1, seed=200 + i)[0]
            seeds = live.dense_seeds(q, 3, exact=True)
            ref = khop_select(arrays, emb, rel_emb, q, [s for s, _ in seeds], [40, 60],
                              seed_scores=[s for _, s in seeds])
            assert live.khop_filter(q, seeds, [40, 60]).node_ids.tolist() == ref.node_ids.tolist()

        again = writer.ingest(kg, emb, rel_emb, "test-model", progress=False)
        assert again.skipped and again.extra["sketched"] == 500
        stored = neo4j_driver.execute_query(
            f"MATCH (n:{label_for(dataset_label)}) RETURN n.id AS id, n.sketch AS sketch, n.sketch_error AS error ORDER BY id"
        ).records
        expected = sketch_properties(unit_vectors(emb))
        assert [(bytes(r["sketch"]), r["error"]) for r in stored] == \
            [(p["sketch"], p["sketch_error"]) for p in expected]
        assert writer.ingest(kg, emb, rel_emb, "test-model", progress=False).extra["sketched"] == 0
    finally:
        writer.reset()


def test_a_hop_through_a_wide_hub_stays_within_the_transaction_memory_cap(neo4j_driver, dataset_label):
    """A hop from a hub with 28,000 neighbours, under the test server's per-transaction cap
    (conftest.TEST_TX_MEMORY = 128m). The statement keeps the candidates once: a version whose
    bounded Top held the lists of all candidates in every kept row went over the cap here."""
    leaves = 28_000
    n = leaves + 1
    kg = KnowledgeGraph(dataset_label, [f"n{i}" for i in range(n)], [f"n{i}" for i in range(n)],
                        np.zeros(n, np.int64), ["thing"], np.zeros(leaves, np.int64), np.arange(1, n),
                        np.arange(leaves) % 3, ["r0", "r1", "r2"])
    emb = random_embeddings(n, seed=21)
    rel_emb = random_embeddings(3, seed=22)
    writer = GraphWriter(neo4j_driver, dataset_label)
    writer.ingest(kg, emb, rel_emb, "test-model", progress=False)
    try:
        live = LiveGraph(neo4j_driver, dataset_label, hop_partitions=1)
        q = random_embeddings(1, seed=23)[0]
        seeds = [(0, float(emb[0] @ q))]
        sub = live.khop_filter(q, seeds, [200], with_edges=False)
        ref = khop_select(GraphArrays.from_kg(kg), emb, rel_emb, q, [0], [200], seed_scores=[seeds[0][1]])
        assert sub.node_ids.tolist() == ref.node_ids.tolist()
        np.testing.assert_allclose(sub.score, ref.score, atol=1e-6)
    finally:
        writer.reset()
