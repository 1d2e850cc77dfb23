"""K-hop-with-filtering on the live graph selects the same nodes with the same scores as the
in-memory reference, through Cypher and through seeder-dgl's procedures (``khop_engine``).

Neo4j's vector similarity functions work in float32 (Lucene), the reference in float64, so Cypher
scores agree to ~1e-7: compared at 1e-6 (QuerySubgraph keeps scores in float32 anyway). The
procedures compute in float64 as the reference does: their own scores agree to ~1e-15. Node
sets must be identical; the graphs are built so that ties are exact (identical vectors give
identical scores on both sides, broken by smaller id).
"""
from __future__ import annotations

import time

import numpy as np
import pytest

from loaders.kg import KnowledgeGraph
from seeder_dgl.retrieval.pipeline import MemoryGraph
from seeder_dgl.graphstore.cypher import query
from seeder_dgl.graphstore.live import LiveGraph
from seeder_dgl.graphstore.writer import GraphWriter, dataset_label as label_for
from seeder_dgl.retrieval.memory import GraphArrays, dense_topk, directed_induced_edges, khop_select
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


def _ingest_random_graph(driver, name: str):
    """The random graph ingested as dataset ``name``: (kg, emb, rel_emb, writer); ``writer.reset()`` drops it."""
    kg, emb = _random_graph(name)
    rel_emb = random_embeddings(len(kg.relation_names), seed=9)
    writer = GraphWriter(driver, name)
    writer.ingest(kg, emb, rel_emb, "test-model", progress=False)
    return kg, emb, rel_emb, writer


def _short_path_graph(name: str):
    """Fewer neighbours than any budget, and partitions left with no candidate at all: a path
    0-1-2-3-4 and two isolated nodes, which dense seeding may pick."""
    n = 7
    kg = KnowledgeGraph(name, [f"n{i}" for i in range(n)], [f"n{i}" for i in range(n)], np.zeros(n, np.int64),
                        ["thing"], np.array([0, 1, 2, 3]), np.array([1, 2, 3, 4]), np.array([0, 1, 0, 1]),
                        ["r0", "r1"])
    return kg, random_embeddings(n, seed=12)


def _assert_same_selection(sub, ref, atol: float = 1e-6) -> None:
    """The same nodes at the same hops with the same scores, in the same order up to exact ties.

    The reference's float64 dot products can differ in the last bit for two identical vectors
    (BLAS rounds a row by its position in the block), which splits a tie that the procedure keeps
    and breaks by id: only nodes whose scores agree within ``atol`` may trade places.
    """
    assert sub.hop.tolist() == ref.hop.tolist()
    got = dict(zip(sub.node_ids.tolist(), sub.score.tolist()))
    assert sorted(got) == sorted(ref.node_ids.tolist())
    np.testing.assert_allclose([got[n] for n in ref.node_ids.tolist()], ref.score, atol=atol)
    for mine, theirs in zip(sub.node_ids.tolist(), ref.node_ids.tolist()):
        assert abs(got[mine] - got[theirs]) <= atol, (mine, theirs)


@pytest.mark.parametrize("build", [_random_graph, _tie_and_hub_graph, _short_path_graph],
                         ids=["random", "ties-and-hub", "short-path"])
def test_khop_equals_reference(neo4j_driver, dataset_label, build, khop_engine):
    """Through Cypher also with each hop split into 1, 2 and 3 concurrent partitions: always the
    same result. The procedure has no partitions, and matches the reference at a third hop too."""
    kg, emb = build(dataset_label)
    rel_emb = random_embeddings(len(kg.relation_names), seed=9)
    writer = GraphWriter(neo4j_driver, dataset_label)
    # Vectors of any length go in; the writer stores them unit length (the Cypher cosine needs it),
    # so the reference on the unit vectors is still the judge. (Not on the tie graph: rescaling
    # would round its identical vectors apart.)
    lengths = np.random.default_rng(1).uniform(0.5, 3.0, size=(len(emb), 1)).astype(np.float32)
    writer.ingest(kg, emb * lengths if build is _random_graph else emb, rel_emb, "test-model", progress=False)
    try:
        lives = [LiveGraph(neo4j_driver, dataset_label, hop_partitions=p, khop=khop_engine)
                 for p in ((1, 2, 3) if khop_engine == "cypher" else (1,))]
        arrays = GraphArrays.from_kg(kg)
        rng = np.random.default_rng(0)
        queries = [random_embeddings(1, seed=100 + i)[0] for i in range(6)]
        queries.append(emb[0] + 0.01 * rng.normal(size=emb.shape[1]))  # seeds on the hub
        for q in queries:
            seeds = lives[0].dense_seeds(q, 3, exact=True)
            if khop_engine == "procedure":
                assert [s for s, _ in seeds] == dense_topk(emb, q, 3)[0].tolist()
            ref = khop_select(arrays, emb, rel_emb, q, [s for s, _ in seeds], [40, 60],
                              seed_scores=[s for _, s in seeds])
            whole = lives[0].khop_filter(q, seeds, [40, 60, 80])
            if khop_engine == "procedure":
                _assert_same_selection(whole, khop_select(arrays, emb, rel_emb, q, [s for s, _ in seeds], [40, 60, 80],
                                                          seed_scores=[s for _, s in seeds]))
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


def test_khop_with_a_relation_prior_equals_reference(neo4j_driver, dataset_label, khop_engine):
    """Per-hop relation terms (a learned relation prior's) replace sim(q, r) the same way live and
    in memory: a relation favoured at hop 1 and another at hop 2 change the selection alike."""
    kg, emb, rel_emb, writer = _ingest_random_graph(neo4j_driver, dataset_label)
    try:
        live = LiveGraph(neo4j_driver, dataset_label, hop_partitions=2, khop=khop_engine)
        arrays = GraphArrays.from_kg(kg)
        rng = np.random.default_rng(5)
        changed = 0
        for i in range(4):
            q = random_embeddings(1, seed=200 + i)[0]
            scores = rng.uniform(0.0, 1.0, size=(2, len(kg.relation_names)))
            seeds = live.dense_seeds(q, 3, exact=True)
            ids, sims = [s for s, _ in seeds], [s for _, s in seeds]
            ref = khop_select(arrays, emb, rel_emb, q, ids, [30, 50], seed_scores=sims, relation_scores=scores)
            _assert_same_selection(live.khop_filter(q, seeds, [30, 50], relation_scores=scores), ref)
            plain = khop_select(arrays, emb, rel_emb, q, ids, [30, 50], seed_scores=sims)
            changed += set(plain.node_ids.tolist()) != set(ref.node_ids.tolist())
        assert changed  # the relation terms did change what was selected
    finally:
        writer.reset()


def test_both_backends_keep_the_khop_scores_unrounded_and_agree(neo4j_driver, dataset_label, khop_engine):
    """``exact_score`` (the float64 scores K-hop ranks by, before the record's float32) is set live
    as in memory, for the same nodes, to ~1e-7 through Cypher (float32 similarities) and ~1e-15
    through the procedures."""
    kg, emb, rel_emb, writer = _ingest_random_graph(neo4j_driver, dataset_label)
    try:
        live = LiveGraph(neo4j_driver, dataset_label, khop=khop_engine)
        memory = MemoryGraph(GraphArrays.from_kg(kg), emb, rel_emb)
        atol = 1e-6 if khop_engine == "cypher" else 1e-12
        for i in range(4):
            q = random_embeddings(1, seed=300 + i)[0]
            seeds = live.dense_seeds(q, 3, exact=True)
            on_live, in_memory = live.khop_filter(q, seeds, [40, 60]), memory.khop_filter(q, seeds, [40, 60])
            for sub in (on_live, in_memory):
                assert sub.exact_score is not None and sub.exact_score.dtype == np.float64
                assert sub.exact_score.shape == sub.score.shape
                np.testing.assert_array_equal(sub.exact_score.astype(np.float32), sub.score)
            exact = dict(zip(in_memory.node_ids.tolist(), in_memory.exact_score.tolist()))
            assert sorted(exact) == sorted(on_live.node_ids.tolist())
            np.testing.assert_allclose(on_live.exact_score, [exact[n] for n in on_live.node_ids.tolist()],
                                       rtol=0, atol=atol)
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


def test_nodes_without_a_sketch_still_give_the_reference_result_and_ingest_adds_them(neo4j_driver, dataset_label,
                                                                                    khop_engine):
    """Nodes written by other tools (or by a version before sketches) have no sketch: K-hop gives
    them the widest bounds and stays exact; running the same ingest again gives them one."""
    from seeder_dgl.graphstore.sketch import sketch_properties
    from seeder_dgl.graphstore.writer import unit_vectors

    kg, emb, rel_emb, writer = _ingest_random_graph(neo4j_driver, dataset_label)
    try:
        removed = neo4j_driver.execute_query(
            f"MATCH (n:{label_for(dataset_label)}) WHERE n.id % 3 = 0 REMOVE n.sketch, n.sketch_error RETURN count(n) AS c"
        ).records[0]["c"]
        assert removed == 500
        live, arrays = LiveGraph(neo4j_driver, dataset_label, khop=khop_engine), GraphArrays.from_kg(kg)
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


def test_a_hop_through_a_wide_hub_stays_within_the_transaction_memory_cap(neo4j_driver, dataset_label,
                                                                          khop_engine):
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
        live = LiveGraph(neo4j_driver, dataset_label, hop_partitions=1, khop=khop_engine)
        q = random_embeddings(1, seed=23)[0]
        seeds = [(0, float(emb[0] @ q))]
        sub = live.khop_filter(q, seeds, [200], with_edges=False)
        ref = khop_select(GraphArrays.from_kg(kg), emb, rel_emb, q, [0], [200], seed_scores=[seeds[0][1]])
        assert sub.node_ids.tolist() == ref.node_ids.tolist()
        np.testing.assert_allclose(sub.score, ref.score, atol=1e-6)
    finally:
        writer.reset()


def test_the_procedures_compute_the_references_float64_numbers(neo4j_driver, dataset_label, seeder_procedures):
    """seeder.khop and seeder.exactSeeds against the reference on the vectors as stored: the same
    float64 arithmetic, so similarities and scores agree to rounding (1e-12), far below the
    float32 agreement of Cypher, and node order is the reference's at every hop."""
    kg, emb = _random_graph(dataset_label)
    rel_emb = random_embeddings(len(kg.relation_names), seed=9)
    writer = GraphWriter(neo4j_driver, dataset_label)
    writer.ingest(kg, emb, rel_emb, "test-model", progress=False)  # unit rows: stored bit for bit
    try:
        live = LiveGraph(neo4j_driver, dataset_label, khop="procedure")
        arrays = GraphArrays.from_kg(kg)
        for i in range(4):
            q = random_embeddings(1, seed=300 + i)[0] * 2.5  # not unit: both sides normalise in float64
            ids, sims = dense_topk(emb, q, 5)
            seeds = live.dense_seeds(q, 5, exact=True)
            assert [s for s, _ in seeds] == ids.tolist()
            np.testing.assert_allclose([s for _, s in seeds], sims, rtol=0, atol=1e-12)
            ref = khop_select(arrays, emb, rel_emb, q, ids, [30, 50, 70], seed_scores=sims)
            row = neo4j_driver.execute_query(
                query("procedure/khop"), label=live.label, embedding=live.query_vector(q), budgets=[30, 50, 70],
                with_edges=False, config=live.schema.procedure_config(), name=dataset_label,
                seeds=[{"id": int(s), "similarity": float(v)} for s, v in zip(ids, sims)],
                relation_similarity=[live.relation_similarity(q)] * 3).records[0]
            picked = slice(len(ids), None)
            assert row["ids"] == ref.node_ids[picked].tolist() and row["hops"] == ref.hop[picked].tolist()
            np.testing.assert_allclose(row["similarities"], ref.similarity[picked], rtol=0, atol=1e-12)
            np.testing.assert_allclose(row["scores"], ref.score[picked], rtol=0, atol=1e-12)
    finally:
        writer.reset()


def test_neighbours_of_another_label_are_neither_selected_nor_in_the_way(neo4j_driver, dataset_label, khop_engine):
    """Nodes of another graph linked to the dataset's, with sketches and embeddings that would
    outscore every real neighbour: K-hop ignores them, so they cannot push the threshold that
    decides whose embedding is read either."""
    from seeder_dgl.graphstore.sketch import sketch_properties

    kg, emb, rel_emb, writer = _ingest_random_graph(neo4j_driver, dataset_label)
    foreign = f"{dataset_label}Other"
    try:
        live = LiveGraph(neo4j_driver, dataset_label, khop=khop_engine)
        arrays = GraphArrays.from_kg(kg)
        q = random_embeddings(1, seed=400)[0]
        seeds = live.dense_seeds(q, 3, exact=True)
        hop1 = live.khop_filter(q, seeds, [10], with_edges=False).node_ids.tolist()
        stored = sketch_properties(q[None, :])[0]
        neo4j_driver.execute_query(
            f"UNWIND $ids AS id MATCH (v:{label_for(dataset_label)} {{id: id}}) "
            f"UNWIND range(1, 20) AS i CREATE (v)-[:{live.info.relation_types[0]}]->"
            f"(:{foreign} {{id: 100000 + i, embedding: $embedding, sketch: $sketch, sketch_error: $error}})",
            ids=hop1, embedding=q.tolist(), sketch=stored["sketch"], error=stored["sketch_error"])
        ref = khop_select(arrays, emb, rel_emb, q, [s for s, _ in seeds], [10, 15, 20],
                          seed_scores=[s for _, s in seeds])
        sub = live.khop_filter(q, seeds, [10, 15, 20])
        assert sub.node_ids.tolist() == ref.node_ids.tolist()
        np.testing.assert_allclose(sub.score, ref.score, atol=1e-6)
    finally:
        neo4j_driver.execute_query(f"MATCH (n:{foreign}) DETACH DELETE n")
        writer.reset()


def test_the_procedures_keep_sketches_per_version_and_an_upsert_renews_it(neo4j_driver, dataset_label,
                                                                         seeder_procedures):
    """seeder.khop keeps the sketches it reads under the sketch_version its caller passes (the
    dataset record's). Held at one version, a node whose embedding changed since keeps its old
    sketch: its bound still says it is far from the question, so it is not selected. The upsert
    that changed it gave the record a new version, and K-hop through LiveGraph reads the new
    sketch and selects the node, as the reference does on the new embeddings."""
    from seeder_dgl.graphstore.upsert import NodeRow, upsert

    kg, emb, rel_emb, writer = _ingest_random_graph(neo4j_driver, dataset_label)
    try:
        live = LiveGraph(neo4j_driver, dataset_label, khop="procedure")
        q = random_embeddings(1, seed=500)[0]
        seeds = live.dense_seeds(q, 3, exact=True)
        budgets = [10, 10]
        first = live.khop_filter(q, seeds, budgets, with_edges=False)
        seed_ids = {s for s, _ in seeds}
        hop1 = set(first.node_ids[first.hop == 1].tolist())
        arrays = GraphArrays.from_kg(kg)
        neighbours = lambda nodes: {int(x) for a, b in zip(kg.edge_src.tolist(), kg.edge_dst.tolist()) for x in (a, b)  # noqa: E731
                                    if (a in nodes) != (b in nodes) and x not in nodes}
        # a node two hops out, the one least like the question: its old sketch rules it out
        candidates = sorted(neighbours(hop1) - neighbours(seed_ids) - set(first.node_ids.tolist()),
                            key=lambda i: float(emb[i] @ q))
        target = candidates[0]

        def held(version: str) -> list[int]:
            row = neo4j_driver.execute_query(
                "CALL seeder.khop($label, $embedding, $seeds, $budgets, $relations, false, $config) YIELD ids "
                "RETURN ids", label=live.label, embedding=live.query_vector(q), budgets=budgets,
                seeds=[{"id": s, "similarity": v} for s, v in seeds], relations=[live.relation_similarity(q)] * 2,
                config={**live.schema.procedure_config(), "sketch_version": version}).records[0]
            return row["ids"]

        assert target not in held("held")  # reads and keeps every bounded neighbour's sketch
        version = neo4j_driver.execute_query("MATCH (m:SeederDataset {name: $name}) RETURN m.sketch_version AS v",
                                             name=dataset_label).records[0]["v"]
        kind = kg.node_type_names[kg.node_type[target]]
        upsert(neo4j_driver, dataset_label, [NodeRow(target, kg.node_names[target], kind, kg.node_texts[target],
                                                     q.tolist())], [],
               encode=lambda texts: None)
        renewed = neo4j_driver.execute_query("MATCH (m:SeederDataset {name: $name}) RETURN m.sketch_version AS v",
                                             name=dataset_label).records[0]["v"]
        assert version and renewed and renewed != version

        new_emb = emb.copy()
        new_emb[target] = q / np.linalg.norm(q)
        ref = khop_select(arrays, new_emb, rel_emb, q, [s for s, _ in seeds], budgets,
                          seed_scores=[v for _, v in seeds])
        assert target in ref.node_ids.tolist()
        assert target not in held("held")  # the kept, stale sketch
        assert live.khop_filter(q, seeds, budgets, with_edges=False).node_ids.tolist() == ref.node_ids.tolist()
        assert target in held("another version")
    finally:
        writer.reset()


@pytest.mark.parametrize("walk", ["store", "copy"])
@pytest.mark.parametrize("hub_loops", [2, 0])
def test_the_procedure_returns_every_relationship_among_the_selected_nodes_once(neo4j_driver, dataset_label,
                                                                                  seeder_procedures, hub_loops, walk):
    """The relationships seeder.khop returns with its nodes are those of the graph among them, each
    once in both directions, self-loops included (on a hub and elsewhere), as the Cypher path reads
    them: walking the store, and walking the server's in-memory copy of the relationships."""
    rng = np.random.default_rng(31)
    n = 600
    hub_edges = np.arange(1, 400)  # node 0: the hub, with hub_loops self-loops
    src = np.concatenate([np.zeros(399 + hub_loops, np.int64), rng.integers(1, n, 1500), [7, 9]])
    dst = np.concatenate([hub_edges, np.zeros(hub_loops, np.int64), rng.integers(1, n, 1500), [7, 9]])
    rel = np.concatenate([rng.integers(0, 3, 399), np.arange(hub_loops), rng.integers(0, 3, 1500), [2, 1]])
    kg = KnowledgeGraph(dataset_label, [f"n{i}" for i in range(n)], [f"n{i}" for i in range(n)],
                        np.zeros(n, np.int64), ["thing"], src, dst, rel, ["r0", "r1", "r2"])
    emb = random_embeddings(n, seed=32)
    writer = GraphWriter(neo4j_driver, dataset_label)
    writer.ingest(kg, emb, random_embeddings(3, seed=33), "test-model", progress=False)
    try:
        options = {"adjacency": False} if walk == "store" else {"adjacency_wait": True}
        procedure = LiveGraph(neo4j_driver, dataset_label, khop="procedure", procedure_options=options)
        cypher = LiveGraph(neo4j_driver, dataset_label, khop="cypher")
        arrays = GraphArrays.from_kg(kg)
        for i, seeds in enumerate(([(0, 1.0)], [(0, 1.0), (7, 0.5)], [(9, 0.9), (3, 0.2)])):
            q = random_embeddings(1, seed=34 + i)[0]
            sub = procedure.khop_filter(q, seeds, [60, 80])
            assert procedure.last_walked == walk
            assert 0 in sub.node_ids.tolist()
            triples = sorted(zip(sub.src.tolist(), sub.dst.tolist(), sub.rel.tolist()))
            expected = sorted(zip(*(a.tolist() for a in cypher.induced_edges(sub.node_ids))))
            assert triples == expected
            # Which way each edge's relationship is stored: the procedure, Cypher and the in-memory
            # arrays of the same triples agree, edge for edge (a self loop once each way).
            directed = sorted(zip(sub.src.tolist(), sub.dst.tolist(), sub.rel.tolist(), sub.direction.tolist()))
            assert directed == sorted(zip(*(a.tolist() for a in cypher.directed_induced_edges(sub.node_ids))))
            assert directed == sorted(zip(*(a.tolist() for a in directed_induced_edges(arrays, sub.node_ids))))
            local = {int(v): j for j, v in enumerate(sub.node_ids)}
            hub = local[0]
            assert sum(1 for s, d, _ in triples if s == d == hub) == 2 * hub_loops  # both directions
            if i == 1:
                assert sum(1 for s, d, _ in triples if s == d == local[7]) == 2
    finally:
        writer.reset()


def test_exact_seeding_sees_nodes_written_outside_seeder_dgl(neo4j_driver, dataset_label, seeder_procedures):
    """seeder.exactSeeds keeps the dataset's sketches side by side under the record's
    sketch_version. A node created or deleted by a write of the user's own does not renew that
    version, but it changes the label's node count, and the next seeding reads the graph again:
    the new node, the question's own vector, is the first seed, and once deleted it is gone. An
    upsert's new embedding (a new version) is seen the same way."""
    from seeder_dgl.graphstore.upsert import NodeRow, upsert

    kg, emb, rel_emb, writer = _ingest_random_graph(neo4j_driver, dataset_label)
    label = label_for(dataset_label)
    try:
        live = LiveGraph(neo4j_driver, dataset_label, khop="procedure")
        q = random_embeddings(1, seed=600)[0]
        before = live.dense_seeds(q, 4, exact=True)
        assert [s for s, _ in before] == dense_topk(emb, q, 4)[0].tolist()

        unit = (q / np.linalg.norm(q)).astype(np.float32)
        neo4j_driver.execute_query(f"CREATE (:{label} {{id: 99999, embedding: $embedding}})",
                                   embedding=unit.tolist())
        added = live.dense_seeds(q, 4, exact=True)
        assert added[0][0] == 99999 and abs(added[0][1] - 1.0) < 1e-6
        assert [s for s, _ in added[1:]] == [s for s, _ in before[:3]]

        neo4j_driver.execute_query(f"MATCH (n:{label} {{id: 99999}}) DELETE n")
        assert live.dense_seeds(q, 4, exact=True) == before

        # the least similar node takes the question's vector through an upsert: a new version
        target = int(np.argmin(emb @ q))
        kind = kg.node_type_names[kg.node_type[target]]
        upsert(neo4j_driver, dataset_label, [NodeRow(target, kg.node_names[target], kind, kg.node_texts[target],
                                                     q.tolist())], [], encode=lambda texts: None)
        assert live.dense_seeds(q, 4, exact=True)[0][0] == target
    finally:
        writer.reset()


@pytest.mark.parametrize("switches", [{"seed_index": False}, {"simd": False}, {}],
                         ids=["store", "index-scalar", "index-simd"])
def test_every_exact_seeding_path_in_the_procedure_gives_the_reference_seeds(neo4j_driver, dataset_label,
                                                                             seeder_procedures, switches):
    """seeder.exactSeeds reads the nodes from the store, or bounds them from its in-memory copy of
    the sketches, summed in scalar code or in SIMD lanes: the same seeds and float64 similarities
    as the in-memory scan every way."""
    kg, emb = _random_graph(dataset_label)
    writer = GraphWriter(neo4j_driver, dataset_label)
    writer.ingest(kg, emb, random_embeddings(len(kg.relation_names), seed=9), "test-model", progress=False)
    try:
        live = LiveGraph(neo4j_driver, dataset_label, khop="procedure")
        version = neo4j_driver.execute_query("MATCH (m:SeederDataset {name: $name}) RETURN m.sketch_version AS v",
                                             name=dataset_label).records[0]["v"]
        config = {**live.schema.procedure_config(), "sketch_version": version, **switches}
        for i in range(5):
            q = emb[1 + 7 * i] + 0.3 * random_embeddings(1, seed=700 + i)[0]  # near a node, as a question is
            records = neo4j_driver.execute_query(
                "CALL seeder.exactSeeds($label, $embedding, 12, $config) YIELD id, similarity RETURN id, similarity",
                label=live.label, embedding=live.query_vector(q), config=config).records
            ids, sims = dense_topk(emb, q, 12)
            assert [r["id"] for r in records] == ids.tolist()
            np.testing.assert_allclose([r["similarity"] for r in records], sims, rtol=0, atol=1e-12)
    finally:
        writer.reset()


@pytest.mark.parametrize("switches", [{"seed_index": False, "adjacency": False},
                                      {"simd": False, "adjacency": False, "seed_index_wait": True},
                                      {"adjacency": False, "seed_index_wait": True},
                                      {"adjacency_wait": True, "seed_index_wait": True, "node_copy": False},
                                      {"adjacency_wait": True, "seed_index": False, "node_copy": False},
                                      {"adjacency_wait": True, "seed_index_wait": True, "node_copy_wait": True}],
                         ids=["store", "index-scalar", "index-simd", "copy", "copy-store-sketches", "copy-nodes"])
def test_every_khop_path_in_the_procedure_gives_the_reference_selection(neo4j_driver, dataset_label,
                                                                        seeder_procedures, switches):
    """seeder.khop walks the relationships in the store or in its in-memory copy of them, and bounds
    each neighbour from its sketch as stored (and cached) or from the in-memory copy of the
    dataset's sketches that exact seeding keeps, summed in scalar code or in SIMD lanes, and on the
    copy scores the survivors from the stored embeddings or from its in-memory copy of them. The
    bounds only choose whose embedding is read, both walks meet the same neighbours and both copies
    of an embedding sum the same way, so every way gives the reference's nodes, hops, order and
    float64 scores."""
    kg, emb, rel_emb, writer = _ingest_random_graph(neo4j_driver, dataset_label)
    try:
        live = LiveGraph(neo4j_driver, dataset_label, khop="procedure")
        arrays = GraphArrays.from_kg(kg)
        for i in range(4):
            q = emb[3 + 11 * i] + 0.4 * random_embeddings(1, seed=800 + i)[0]
            ids, sims = dense_topk(emb, q, 4)
            ref = khop_select(arrays, emb, rel_emb, q, ids, [25, 60], seed_scores=sims)
            row = neo4j_driver.execute_query(
                query("procedure/khop"), label=live.label, embedding=live.query_vector(q), budgets=[25, 60],
                with_edges=False, config={**live.schema.procedure_config(), **switches}, name=dataset_label,
                seeds=[{"id": int(s), "similarity": float(v)} for s, v in zip(ids, sims)],
                relation_similarity=[live.relation_similarity(q)] * 2).records[0]
            picked = slice(len(ids), None)
            assert row["walked"] == ("copy" if switches.get("adjacency_wait") else "store")
            assert row["bounds"] == ("store" if switches.get("seed_index") is False else "index")
            assert row["scored"] == ("copy" if switches.get("node_copy_wait") else "store")
            assert row["ids"] == ref.node_ids[picked].tolist() and row["hops"] == ref.hop[picked].tolist()
            np.testing.assert_allclose(row["scores"], ref.score[picked], rtol=0, atol=1e-12)
    finally:
        writer.reset()


def test_khop_does_not_wait_for_the_seed_index_it_bounds_from(neo4j_driver, dataset_label, seeder_procedures):
    """A K-hop that finds no current in-memory copy of the dataset's sketches (a new sketch version)
    bounds its neighbours from their own sketches and has the copy built in the background, instead
    of waiting for it (MAG scale: ~30 s); later calls bound from the copy. The same nodes, hops and
    scores either way."""
    kg, emb, rel_emb, writer = _ingest_random_graph(neo4j_driver, dataset_label)
    try:
        live = LiveGraph(neo4j_driver, dataset_label, khop="procedure")
        q = emb[5] + 0.4 * random_embeddings(1, seed=870)[0]
        ids, sims = dense_topk(emb, q, 4)

        def khop():
            return neo4j_driver.execute_query(
                query("procedure/khop"), label=live.label, embedding=live.query_vector(q), budgets=[25, 60],
                with_edges=False, config={**live.schema.procedure_config(), "adjacency": False}, name=dataset_label,
                seeds=[{"id": int(s), "similarity": float(v)} for s, v in zip(ids, sims)],
                relation_similarity=[live.relation_similarity(q)] * 2).records[0]

        first = khop()
        assert first["bounds"] == "store"
        row, deadline = first, time.monotonic() + 60
        while row["bounds"] != "index" and time.monotonic() < deadline:
            time.sleep(0.05)
            row = khop()
        assert row["bounds"] == "index"
        assert (row["ids"], row["hops"], row["scores"]) == (first["ids"], first["hops"], first["scores"])
    finally:
        writer.reset()


def test_khop_selects_a_neighbour_written_outside_seeder_dgl(neo4j_driver, dataset_label, seeder_procedures):
    """A node created by the user's own Cypher, without a sketch and under the same sketch version,
    linked to a seed and carrying the question's vector: the in-memory sketches are read again (the
    label's node count changed), the node, having no sketch, is scored exactly, and it is the first
    node of hop 1. Once deleted, K-hop gives what it gave before."""
    kg, emb, rel_emb, writer = _ingest_random_graph(neo4j_driver, dataset_label)
    label = label_for(dataset_label)
    try:
        live = LiveGraph(neo4j_driver, dataset_label, khop="procedure")
        q = random_embeddings(1, seed=900)[0]
        seeds = live.dense_seeds(q, 3, exact=True)
        before = live.khop_filter(q, seeds, [10, 20], with_edges=False).node_ids.tolist()
        unit = (q / np.linalg.norm(q)).astype(np.float32)
        neo4j_driver.execute_query(
            f"MATCH (s:{label} {{id: $seed}}) CREATE (s)-[:{live.info.relation_types[0]}]->"
            f"(:{label} {{id: 99999, embedding: $embedding}})", seed=seeds[-1][0], embedding=unit.tolist())
        sub = live.khop_filter(q, seeds, [10, 20], with_edges=False)
        assert sub.node_ids.tolist()[len(seeds)] == 99999 and sub.hop.tolist()[len(seeds)] == 1
        neo4j_driver.execute_query(f"MATCH (n:{label} {{id: 99999}}) DETACH DELETE n")
        assert live.khop_filter(q, seeds, [10, 20], with_edges=False).node_ids.tolist() == before
    finally:
        writer.reset()


def test_khop_on_the_copy_of_the_relationships_sees_every_write_at_once(neo4j_driver, dataset_label,
                                                                        seeder_procedures):
    """The server's in-memory copy of a dataset's relationships is walked only while no
    relationship, node or label has been written since it was read. After each write of the user's
    own Cypher (a new node linked to a seed, its relationships deleted, a label removed and put
    back), the next call walks the store and sees the write; a call that waits for a new copy
    walks it and returns the same nodes, scores and relationships."""
    kg, emb, rel_emb, writer = _ingest_random_graph(neo4j_driver, dataset_label)
    label = label_for(dataset_label)
    marker = f"{dataset_label}Moved"
    try:
        copy = LiveGraph(neo4j_driver, dataset_label, khop="procedure", procedure_options={"adjacency_wait": True})
        store = LiveGraph(neo4j_driver, dataset_label, khop="procedure", procedure_options={"adjacency": False})
        default = LiveGraph(neo4j_driver, dataset_label, khop="procedure")
        q = random_embeddings(1, seed=950)[0]
        seeds = copy.dense_seeds(q, 3, exact=True)

        def walks() -> tuple:
            """K-hop by the default settings (right after a write: the store), then on a new copy,
            then through the store: all three the same."""
            got = []
            for graph, expected in ((default, "store"), (copy, "copy"), (store, "store")):
                sub = graph.khop_filter(q, seeds, [10, 20])
                assert graph.last_walked == expected
                got.append((sub.node_ids.tolist(), sub.hop.tolist(), sub.exact_score.tolist(),
                            sorted(zip(sub.src.tolist(), sub.dst.tolist(), sub.rel.tolist()))))
            assert got[0] == got[1] == got[2]
            return got[0]

        def write(statement: str, **params) -> None:
            neo4j_driver.execute_query(statement, **params)

        copy.khop_filter(q, seeds, [10, 20])
        assert copy.last_walked == "copy"
        write("MATCH (n) WHERE false SET n.x = 1")  # no write at all: the copy stays valid
        assert default.khop_filter(q, seeds, [10, 20]) is not None and default.last_walked == "copy"

        unit = (q / np.linalg.norm(q)).astype(np.float32)
        write(f"MATCH (s:{label} {{id: $seed}}) CREATE (s)-[:{copy.info.relation_types[0]}]->"
              f"(:{label} {{id: 99999, embedding: $embedding}})", seed=seeds[0][0], embedding=unit.tolist())
        ids, hops, _, _ = walks()
        assert ids[len(seeds)] == 99999 and hops[len(seeds)] == 1

        write(f"MATCH (:{label} {{id: 99999}})-[r]-() DELETE r")
        ids, hops, _, _ = walks()
        assert 99999 not in ids
        before = ids

        first_hop = next(i for i, h in zip(ids, hops) if h == 1)
        write(f"MATCH (n:{label} {{id: $id}}) SET n:{marker} REMOVE n:{label}", id=first_hop)
        ids, _, _, _ = walks()
        assert first_hop not in ids

        write(f"MATCH (n:{marker}) SET n:{label} REMOVE n:{marker}")
        write(f"MATCH (n:{label} {{id: 99999}}) DELETE n")
        assert walks()[0] == before
    finally:
        neo4j_driver.execute_query(f"MATCH (n:{marker}) DETACH DELETE n")
        writer.reset()


def test_khop_scores_from_the_copy_of_the_nodes_only_while_their_properties_stand(neo4j_driver, dataset_label,
                                                                                 seeder_procedures):
    """On the copy of the relationships, survivors are scored, and features read, from the server's
    copy of the nodes' ids, embeddings, types and names only while none of those properties has
    been written since it was read. The user's own Cypher gives a node of hop 1 the question's
    vector (a list of doubles, which an ingest never writes) and renames a node: the next call scores
    from the store and sees both, a call that waits for a new copy gives the same nodes, scores and
    features (the double row read from the store), and a write of another property leaves the copy
    valid."""
    kg, emb, rel_emb, writer = _ingest_random_graph(neo4j_driver, dataset_label)
    label = label_for(dataset_label)
    try:
        waiting = LiveGraph(neo4j_driver, dataset_label, khop="procedure",
                            procedure_options={"adjacency_wait": True, "node_copy_wait": True})
        default = LiveGraph(neo4j_driver, dataset_label, khop="procedure",
                            procedure_options={"adjacency_wait": True})
        store = LiveGraph(neo4j_driver, dataset_label, khop="procedure", procedure_options={"adjacency": False})
        q = random_embeddings(1, seed=960)[0]
        seeds = store.dense_seeds(q, 3, exact=True)

        def expand(graph: LiveGraph, scored: str) -> tuple:
            sub = graph.khop_filter(q, seeds, [10, 20], with_features=True)
            assert graph.last_scored == scored
            features, types, names = sub.features
            return sub.node_ids.tolist(), sub.hop.tolist(), sub.exact_score.tolist(), features.tolist(), names

        before = expand(store, "store")
        assert expand(waiting, "copy") == before and expand(default, "copy") == before
        # A node hop 1 picked: its sketch, which the write leaves as it was, still lets it through
        # the bounds (these writes bypass seeder-dgl, which would renew the sketches).
        neighbour = before[0][len(seeds)]
        renamed = before[0][len(seeds) + 1]  # another of hop 1: still picked
        unit = q / np.linalg.norm(q)
        neo4j_driver.execute_query(f"MATCH (n:{label} {{id: $id}}) SET n.embedding = $embedding",
                                   id=neighbour, embedding=unit.tolist())
        neo4j_driver.execute_query(f"MATCH (n:{label} {{id: $id}}) SET n.name = 'renamed by the user'", id=renamed)

        after = expand(default, "store")
        assert after == expand(store, "store") == expand(waiting, "copy")
        ids, hops, scores, features, names = after
        at = ids.index(neighbour)  # with the question's own vector: kept at hop 1, its score higher
        assert hops[at] == 1 and scores[at] > before[2][len(seeds)]
        assert features[at] == unit.astype(np.float32).tolist()
        assert names[ids.index(renamed)] == "renamed by the user"
        neo4j_driver.execute_query(f"MATCH (n:{label} {{id: $id}}) SET n.note = 'not read by K-hop'", id=renamed)
        assert expand(default, "copy") == after
    finally:
        writer.reset()


def test_the_copies_of_every_dataset_share_one_heap_budget_and_stale_ones_are_dropped(neo4j_driver, dataset_label,
                                                                                     seeder_procedures):
    """``seeder.copies()`` lists the copies K-hop keeps, with the heap they hold, under one budget
    for every dataset (a quarter of the server's heap). A write leaves a dataset's copies listed as
    stale; once another copy is kept they are dropped, so a dataset no longer queried does not hold
    its memory."""
    first, second = dataset_label, dataset_label + "b"
    _, _, _, writer_a = _ingest_random_graph(neo4j_driver, first)
    _, _, _, writer_b = _ingest_random_graph(neo4j_driver, second)
    label_a, label_b = label_for(first), label_for(second)
    options = {"adjacency_wait": True, "node_copy_wait": True}
    q = random_embeddings(1, seed=961)[0]

    def expand(name: str) -> None:
        graph = LiveGraph(neo4j_driver, name, khop="procedure", procedure_options=options)
        graph.khop_filter(q, graph.dense_seeds(q, 3, exact=True), [10, 20], with_features=True)
        assert graph.last_scored == "copy"

    def copies() -> dict:
        rows = neo4j_driver.execute_query("CALL seeder.copies() YIELD kind, label, bytes, current, budget "
                                          "RETURN kind, label, bytes, current, budget").records
        assert sum(r["bytes"] for r in rows) <= min(r["budget"] for r in rows)
        return {(r["label"], r["kind"]): (r["bytes"], r["current"]) for r in rows if r["label"] in (label_a, label_b)}

    try:
        expand(first)
        expand(second)
        held = copies()
        assert set(held) == {(label, kind) for label in (label_a, label_b) for kind in ("relationships", "nodes")}
        assert all(bytes_ > 0 and current for bytes_, current in held.values())
        # 1,500 nodes of 16 dimensions: the nodes' copy holds at least their floats
        assert held[(label_a, "nodes")][0] >= 1500 * 16 * 4

        neo4j_driver.execute_query(f"MATCH (n:{label_b}) WITH n LIMIT 1 SET n.name = 'written'")
        held = copies()
        assert held[(label_b, "nodes")][1] is False and held[(label_b, "relationships")][1] is True
        neo4j_driver.execute_query(f"MATCH (n:{label_a}) WITH n LIMIT 1 SET n.name = 'written'")
        expand(first)  # a new copy of the first dataset's nodes is kept: the second's stale one goes
        held = copies()
        assert (label_b, "nodes") not in held and held[(label_b, "relationships")][1] is True
        assert held[(label_a, "nodes")][1] is True
    finally:
        writer_a.reset()
        writer_b.reset()


def _preselected_rows(emb: np.ndarray, q: np.ndarray, keep: int) -> np.ndarray:
    """The rows seeder.exactSeeds's preselection keeps (SeedIndex.preselect), computed here from the
    same sketches: sign bits of the unit sketches against their mean; the query's signs by Hamming
    distance keep the nearest 10 * keep rows and every row tied with the last; of those, the signs as
    +1/-1 against the query rounded to 16 levels keep the best ``keep``, ties again included."""
    from seeder_dgl.graphstore.sketch import embedding_sketch

    codes, _ = embedding_sketch(emb)
    codes = codes.astype(np.float64)
    unit = codes * (1.0 / np.sqrt((codes * codes).sum(1)))[:, None]
    bits = unit > unit.mean(0)
    q = q / np.linalg.norm(q)
    peak = np.abs(q).max()
    level = np.clip(np.rint((q + peak) / (2 * peak / 15)), 0, 15)
    distance = (bits != (q > 0)).sum(1)
    near = distance <= np.sort(distance)[10 * keep - 1]
    score = np.where(near, 2 * (bits * level).sum(1) - 15 * bits.sum(1), np.iinfo(np.int64).min)
    return np.flatnonzero(score >= np.sort(score)[::-1][keep - 1])


@pytest.mark.parametrize("dim", [96, 384], ids=["two-words", "six-words"])
@pytest.mark.parametrize("guess", [True, False], ids=["guessed", "counted-first"])
def test_seeding_among_preselected_candidates_is_exact_over_the_preselection(neo4j_driver, dataset_label,
                                                                             seeder_procedures, guess, dim):
    """With config ``candidates`` (datasets of millions of nodes), seeder.exactSeeds scores exactly
    only the rows a 1-bit scan of its index preselects: the seeds are the exact top-k among the rows
    this test's own implementation of that preselection keeps (96 dimensions: two 64-bit words a
    row, the second half full, summed in a loop; 384: six, summed written out), with float64
    similarities, whether the scan guessed which rows to
    estimate twice or (``preselect_guess: false``, the path a guess found short takes) counted every
    distance first; as many candidates as nodes, or none asked, is the full exact scan."""
    kg, emb = random_kg(dataset_label, 1500, 6000, seed=21), random_embeddings(1500, dim=dim, seed=21)
    noise = 0.8 if dim == 96 else 1.5  # the nearest node stays first; the next ones are left to chance
    queries = [emb[3 + 11 * i] + noise * random_embeddings(1, dim=dim, seed=900 + i)[0] for i in range(6)]
    writer = GraphWriter(neo4j_driver, dataset_label)
    writer.ingest(kg, emb, random_embeddings(len(kg.relation_names), dim=dim, seed=22), "test-model",
                  progress=False)
    try:
        live = LiveGraph(neo4j_driver, dataset_label, khop="procedure")
        version = neo4j_driver.execute_query("MATCH (m:SeederDataset {name: $name}) RETURN m.sketch_version AS v",
                                             name=dataset_label).records[0]["v"]
        config = {**live.schema.procedure_config(), "sketch_version": version, "preselect_guess": guess}

        def seeds(q, k, **options):
            records = neo4j_driver.execute_query(
                "CALL seeder.exactSeeds($label, $embedding, $k, $config) YIELD id, similarity RETURN id, similarity",
                label=live.label, embedding=live.query_vector(q), k=k, config={**config, **options}).records
            return [r["id"] for r in records], [r["similarity"] for r in records]

        narrowed = 0
        for q in queries:
            rows = _preselected_rows(emb, q, 40)
            assert 40 <= len(rows) < 1500
            ids, sims = dense_topk(emb[rows], q, 5)
            got_ids, got_sims = seeds(q, 5, candidates=40)
            assert got_ids == rows[ids].tolist()
            np.testing.assert_allclose(got_sims, sims, rtol=0, atol=1e-12)
            full = dense_topk(emb, q, 5)[0].tolist()
            narrowed += got_ids != full
            assert seeds(q, 5, candidates=1500)[0] == full and seeds(q, 5)[0] == full
        assert narrowed > 0  # 40 of 1,500 rows: the preselection did leave some exact seeds out
        with pytest.raises(Exception, match="config.candidates must be a whole number"):
            seeds(emb[0], 5, candidates=-1)
    finally:
        writer.reset()
