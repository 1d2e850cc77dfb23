"""Retrieval on the live graph: seeding, K-hop (in Cypher and in the procedures), live updates,
READ access mode, clear errors."""
from __future__ import annotations

import numpy as np
import pytest
from neo4j import READ_ACCESS, RoutingControl
from neo4j.exceptions import ClientError

from seeder_dgl.graphstore.live import DatasetGone, LiveGraph, LiveGraphError
from seeder_dgl.graphstore.upsert import EdgeRow, NodeRow, UpsertError, upsert
from seeder_dgl.graphstore.sketch import sketch_properties
from seeder_dgl.graphstore.writer import GraphWriter, dataset_label as label_for, unit_vectors
from tests.helpers.graphs import random_embeddings, random_kg


class RecordingDriver:
    """The test server's driver, noting the access mode of every session and query opened through it."""

    def __init__(self, driver):
        self.driver, self.modes = driver, []

    def session(self, **config):
        self.modes.append(config.get("default_access_mode"))
        return self.driver.session(**config)

    def execute_query(self, *args, **kwargs):
        self.modes.append(kwargs.get("routing_"))
        return self.driver.execute_query(*args, **kwargs)


@pytest.fixture
def small_graph(neo4j_driver, dataset_label):
    kg = random_kg(dataset_label, 400, 1600, seed=11)
    emb, rel = random_embeddings(400, seed=11), random_embeddings(4, seed=12)
    writer = GraphWriter(neo4j_driver, dataset_label)
    writer.ingest(kg, emb, rel, "test-model", progress=False)
    yield kg, emb, rel
    writer.drop()


def test_exact_seeding_matches_numpy(neo4j_driver, dataset_label, small_graph, khop_engine):
    kg, emb, _ = small_graph
    graph = LiveGraph(neo4j_driver, dataset_label, khop=khop_engine)
    graph.check_ready()
    q = random_embeddings(1, seed=99)[0]
    exact = graph.dense_seeds(q, 10, exact=True)
    assert [i for i, _ in exact] == list(np.argsort(-(emb @ q), kind="stable")[:10])
    indexed = graph.dense_seeds(q, 10)
    assert len({i for i, _ in indexed} & {i for i, _ in exact}) >= 8  # HNSW recall on a tiny graph
    assert graph.dense_seeds(q, 0) == []


def test_exact_seeds_and_khop_in_one_statement_equal_the_two_calls(neo4j_driver, dataset_label, small_graph,
                                                                    khop_engine):
    """exact_seeds_khop_filter (one statement through the procedures, two calls through Cypher)
    gives the seeds of dense_seeds(exact=True) and the subgraph khop_filter grows from them: same
    nodes, hops, float64 scores, relationships and features, with sim(q, r) and with a prior's scores."""
    graph = LiveGraph(neo4j_driver, dataset_label, khop=khop_engine)
    relations = len(graph.info.relation_types)
    for n in (5, 6):
        q = random_embeddings(1, seed=n)[0]
        for scores in (None, np.random.default_rng(n).random((2, relations))):
            seeds, sub = graph.exact_seeds_khop_filter(q, 3, [10, 20], relation_scores=scores, with_features=True)
            expected_seeds = graph.dense_seeds(q, 3, exact=True)
            expected = graph.khop_filter(q, expected_seeds, [10, 20], relation_scores=scores, with_features=True)
            assert seeds == expected_seeds and len(seeds) == 3
            assert sub.node_ids.tolist() == expected.node_ids.tolist() and sub.num_nodes == 33
            assert sub.hop.tolist() == expected.hop.tolist()
            np.testing.assert_array_equal(sub.exact_score, expected.exact_score)
            assert (sub.src.tolist(), sub.dst.tolist(), sub.rel.tolist()) == (
                expected.src.tolist(), expected.dst.tolist(), expected.rel.tolist())
            if khop_engine == "procedure":
                assert np.array_equal(sub.features[0], expected.features[0])
                assert sub.features[1:] == expected.features[1:]
            else:
                assert sub.features is None and expected.features is None
    assert graph.exact_seeds_khop_filter(q, 0, [10, 20])[0] == []


def test_khop_subgraph_is_bounded_and_induced(neo4j_driver, dataset_label, small_graph, khop_engine):
    graph = LiveGraph(neo4j_driver, dataset_label, khop=khop_engine)
    q = random_embeddings(1, seed=5)[0]
    sub = graph.khop_filter(q, graph.dense_seeds(q, 3), [10, 20])
    assert sub.num_nodes == 33 and len(set(sub.node_ids.tolist())) == 33
    assert list(sub.hop) == [0] * 3 + [1] * 10 + [2] * 20
    hop1 = sub.score[3:13]
    assert np.all(np.diff(hop1) <= 1e-9)  # ranked best first
    assert sub.src.shape == sub.dst.shape == sub.rel.shape and sub.src.max() < 33
    pairs = set(zip(sub.src.tolist(), sub.dst.tolist()))
    assert all((d, s) in pairs for s, d in pairs)  # both directions


def test_upserted_node_on_answer_path_is_retrieved(neo4j_driver, dataset_label, small_graph, khop_engine):
    kg, emb, _ = small_graph
    graph = LiveGraph(neo4j_driver, dataset_label, khop=khop_engine)
    q = random_embeddings(1, seed=21)[0]
    seeds = graph.dense_seeds(q, 3)
    before = graph.khop_filter(q, seeds, [5, 5])
    new_id = kg.num_nodes + 7
    assert new_id not in before.node_ids
    # A new node linked to the top seed whose text embedding is close to the question (given at
    # twice unit length: direction is what counts).
    new_vec = (2.0 * (q + 0.05 * random_embeddings(1, seed=3)[0])).tolist()
    result = upsert(neo4j_driver, dataset_label,
                    [NodeRow(new_id, "new answer", "type/0", "new answer", new_vec)],
                    [EdgeRow(seeds[0][0], new_id, "brand new relation")],
                    encode=lambda texts: random_embeddings(len(texts), seed=8))
    assert result["new_relations"] == ["brand new relation"] and result["nodes"] == kg.num_nodes + 1
    after = LiveGraph(neo4j_driver, dataset_label, khop=khop_engine).khop_filter(q, graph.dense_seeds(q, 3), [5, 5])
    assert new_id in after.node_ids
    assert after.hop[list(after.node_ids).index(new_id)] in (0, 1)
    # Its embedding was given at length != 1 and is stored as the unit vector in its direction.
    stored = graph.node_features([new_id])[0][0].astype(np.float64)
    given = np.asarray(new_vec, dtype=np.float64)
    assert abs(np.linalg.norm(given) - 1.0) > 1e-3 and abs(np.linalg.norm(stored) - 1.0) < 1e-6
    np.testing.assert_allclose(stored, given / np.linalg.norm(given), atol=1e-6)
    # Its K-hop sketch was written with it, from the stored unit vector.
    sketch = neo4j_driver.execute_query(f"MATCH (n:{label_for(dataset_label)} {{id: $id}}) RETURN n.sketch AS s, "
                                        "n.sketch_error AS e", id=new_id).records[0]
    expected = sketch_properties(unit_vectors(given.astype(np.float32)))[0]
    assert (bytes(sketch["s"]), sketch["e"]) == (expected["sketch"], expected["sketch_error"])
    # Running the same upsert again changes nothing.
    again = upsert(neo4j_driver, dataset_label, [NodeRow(new_id, "new answer", "type/0", "new answer", new_vec)],
                   [EdgeRow(seeds[0][0], new_id, "brand new relation")], encode=lambda t: None)
    assert (again["nodes"], again["relationships"]) == (result["nodes"], result["relationships"])


def test_upsert_edge_to_unknown_node_changes_nothing(neo4j_driver, dataset_label, small_graph):
    kg, _, _ = small_graph
    with pytest.raises(UpsertError, match="not in"):
        upsert(neo4j_driver, dataset_label, [NodeRow(5000, "x", "type/0", "x", random_embeddings(1)[0].tolist())],
               [EdgeRow(5000, 987654, "relation 0")], encode=lambda t: None)
    graph = LiveGraph(neo4j_driver, dataset_label)
    assert graph.node_features([1])[0].shape == (1, 16)
    with pytest.raises(LiveGraphError, match="disappeared"):
        graph.node_features([5000])  # the whole upsert was rolled back


def _labels(driver, dataset, node_id) -> set[str]:
    rows = driver.execute_query(f"MATCH (n:{label_for(dataset)} {{id: $id}}) RETURN labels(n) AS l, n.name AS name, "
                                "n.key AS key", id=node_id).records
    return (set(rows[0]["l"]) - {label_for(dataset)}, rows[0]["name"], rows[0]["key"]) if rows else None


def test_upsert_names_nodes_by_the_ids_of_the_users_node_table(neo4j_driver, dataset_label):
    """A dataset ingested from a node table with ids 100..139 (and one past 2^53): an upsert names
    nodes by those ids. Id 1 is a new node, not seeder-dgl's node 1; id 120 is the user's node 120,
    whose type changes cleanly (one type label); the big id stays exact."""
    from loaders.files import graph_from_rows

    big = 2**53 + 1  # a float64 would read it as 2^53
    rows = [{"id": 100 + i, "name": f"person {i}", "type": "person"} for i in range(40)]
    rows.append({"id": big, "name": "big id", "type": "person"})
    edges = [{"source": 100 + i, "relation": "knows", "target": 100 + (i + 1) % 40} for i in range(40)]
    kg = graph_from_rows(rows, edges + [{"source": big, "relation": "knows", "target": 100}], dataset_label,
                         "nodes", "edges").kg
    writer = GraphWriter(neo4j_driver, dataset_label)
    writer.ingest(kg, random_embeddings(kg.num_nodes, seed=4), random_embeddings(1, seed=5), "test-model",
                  progress=False)
    encode = lambda texts: random_embeddings(len(texts), seed=9)  # noqa: E731
    try:
        graph = LiveGraph(neo4j_driver, dataset_label)
        internal_120 = kg.node_keys.index("120")
        result = upsert(neo4j_driver, dataset_label,
                        [NodeRow(1, "newcomer", "person", "newcomer"), NodeRow(120, "Acme", "company", "Acme")],
                        [EdgeRow(1, big, "knows"), EdgeRow("120", 1, "works with")], encode)
        assert result["nodes"] == kg.num_nodes + 1  # one new node; 120 was changed in place
        assert _labels(neo4j_driver, dataset_label, 1) == ({"person"}, "person 1", "101")  # untouched
        assert _labels(neo4j_driver, dataset_label, internal_120) == ({"company"}, "Acme", "120")
        new = kg.num_nodes  # numbered after every node
        assert _labels(neo4j_driver, dataset_label, new) == ({"person"}, "newcomer", "1")
        types, names, _, keys = graph.describe_with_keys([new, internal_120, kg.node_keys.index(str(big))])
        assert names == ["newcomer", "Acme", "big id"] and keys == ["1", "120", str(big)]
        assert types == ["person", "company", "person"]
        asked = [new, internal_120, kg.node_keys.index(str(big)), 3]
        edges_now = {(h, r, t) for _, h, r, _, t in graph.edges(asked)}
        assert ("newcomer", "knows", "big id") in edges_now and ("Acme", "works_with", "newcomer") in edges_now
        # What a live query returns about its answer, in one round trip: the same as the two reads.
        assert graph.describe_with_edges(asked) == (graph.describe_with_keys(asked), graph.edges(asked))
        assert graph.describe_with_edges([]) == (([], [], [], []), [])
        with pytest.raises(LiveGraphError, match="disappeared"):
            graph.describe_with_edges([new, 10**6])
        # The same upsert again changes nothing; an edge to an id the dataset lacks changes nothing.
        again = upsert(neo4j_driver, dataset_label, [NodeRow(1, "newcomer", "person", "newcomer")],
                       [EdgeRow(1, big, "knows")], encode)
        assert (again["nodes"], again["relationships"]) == (result["nodes"], result["relationships"])
        with pytest.raises(UpsertError, match=r"node ids \[99\] that are not in"):
            upsert(neo4j_driver, dataset_label, [NodeRow("x1", "x", "person", "x")], [EdgeRow("x1", 99, "knows")],
                   encode)
        assert LiveGraph(neo4j_driver, dataset_label).info.num_nodes == kg.num_nodes + 1
    finally:
        writer.drop()


def test_any_upserts_keep_one_node_per_user_id_with_its_last_name_and_one_type_label(neo4j_driver, dataset_label):
    """Property: whatever rows a series of upserts brings (ids as numbers past 2^53 or as text, 7
    and '7' the same id, types changing), the dataset holds one node per id the user ever gave, each
    with the name and the single type label of its last write, and one relationship per pair."""
    from hypothesis import HealthCheck, given, settings, strategies as st

    from loaders.files import graph_from_rows
    from loaders.kg import to_identifier

    kg = graph_from_rows([{"id": f"n{i}", "name": f"node {i}", "type": "person"} for i in range(5)],
                         [{"source": "n0", "relation": "knows", "target": "n1"}], dataset_label, "nodes", "edges").kg
    writer = GraphWriter(neo4j_driver, dataset_label)
    writer.ingest(kg, random_embeddings(5, seed=1), random_embeddings(1, seed=2), "test-model", progress=False)
    model = {f"n{i}": (f"node {i}", "person") for i in range(5)}
    pairs = {frozenset(("n0", "n1"))}
    ids = st.one_of(st.integers(0, 40), st.integers(2**53, 2**53 + 3), st.sampled_from(["n0", "n3", "7", "x y"]))
    rows = st.lists(st.tuples(ids, st.sampled_from(["a", "b", "c"]), st.sampled_from(["person", "company", "a place"])),
                    min_size=1, max_size=6, unique_by=lambda r: str(r[0]))

    @settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(rows, st.data())
    def one_upsert(batch, data):
        keys = [str(i) for i, _, _ in batch]
        edges = data.draw(st.lists(st.tuples(st.sampled_from(keys), st.sampled_from(sorted(set(model) | set(keys)))),
                                   max_size=3))
        upsert(neo4j_driver, dataset_label, [NodeRow(i, f"{name} {i}", kind, f"{name} {i}") for i, name, kind in batch],
               [EdgeRow(a, b, "knows") for a, b in edges if a != b], encode=lambda t: random_embeddings(len(t), seed=3))
        model.update({str(i): (f"{name} {i}", kind) for i, name, kind in batch})
        pairs.update(frozenset(e) for e in edges if e[0] != e[1])
        label = label_for(dataset_label)
        stored = neo4j_driver.execute_query(f"MATCH (n:{label}) RETURN n.key AS key, n.name AS name, labels(n) AS labels, "
                                            "n.id AS id").records
        assert sorted(r["key"] for r in stored) == sorted(model)  # one node per id, none lost
        assert len({r["id"] for r in stored}) == len(stored)
        for r in stored:
            name, kind = model[r["key"]]
            assert (r["name"], set(r["labels"]) - {label}) == (name, {to_identifier(kind)})
        links = neo4j_driver.execute_query(f"MATCH (a:{label})-[r]-(b:{label}) WHERE elementId(a) < elementId(b) "
                                           "RETURN a.key AS a, b.key AS b").records
        assert sorted(sorted((r["a"], r["b"])) for r in links) == sorted(sorted(p) for p in pairs)

    try:
        one_upsert()
    finally:
        writer.drop()


def test_upsert_changes_a_type_cleanly_and_refuses_ids_a_dataset_cannot_have(neo4j_driver, dataset_label,
                                                                           small_graph):
    kg, _, _ = small_graph
    node = 3
    before = _labels(neo4j_driver, dataset_label, node)[0]
    assert len(before) == 1
    upsert(neo4j_driver, dataset_label, [NodeRow(node, "renamed", "a new type", "renamed")], [],
           encode=lambda t: random_embeddings(len(t), seed=2))
    assert _labels(neo4j_driver, dataset_label, node)[:2] == ({"a_new_type"}, "renamed")
    for bad in ("abc", 2**31, -1):
        with pytest.raises(UpsertError, match="numbers its nodes 0..n-1 itself"):
            upsert(neo4j_driver, dataset_label, [NodeRow(bad, "x", "type/0", "x")], [],
                   encode=lambda t: random_embeddings(len(t), seed=2))
    assert LiveGraph(neo4j_driver, dataset_label).info.num_nodes == kg.num_nodes


def test_upsert_labels_a_type_as_ingest_did_and_a_new_type_apart_from_the_others(neo4j_driver, dataset_label):
    """'a place' and 'a_place' clean to one label, so ingest numbers the second (a_place_2): an upsert
    of an 'a_place' node uses that label, a new type that cleans to it gets one of its own, and so
    does a new relation name that cleans to a relation type the dataset has."""
    from loaders.files import graph_from_rows

    kg = graph_from_rows([{"id": "p", "name": "p", "type": "a place"}, {"id": "q", "name": "q", "type": "a_place"}],
                         [{"source": "p", "relation": "near by", "target": "q"}], dataset_label, "nodes", "edges").kg
    writer = GraphWriter(neo4j_driver, dataset_label)
    writer.ingest(kg, random_embeddings(2, seed=1), random_embeddings(1, seed=2), "test-model", progress=False)
    encode = lambda texts: random_embeddings(len(texts), seed=3)  # noqa: E731
    try:
        q = kg.node_keys.index("q")
        assert _labels(neo4j_driver, dataset_label, q)[0] == {"a_place_2"}
        upsert(neo4j_driver, dataset_label, [NodeRow("r", "r", "a_place", "r"), NodeRow("s", "s", "a-place", "s"),
                                             NodeRow("p", "p", "a_place", "p")],
               [EdgeRow("r", "s", "near-by")], encode)
        graph = LiveGraph(neo4j_driver, dataset_label)
        r, s = graph.info.num_nodes - 2, graph.info.num_nodes - 1
        assert _labels(neo4j_driver, dataset_label, r)[0] == {"a_place_2"}
        assert _labels(neo4j_driver, dataset_label, s)[0] == {"a_place_3"}
        assert _labels(neo4j_driver, dataset_label, kg.node_keys.index("p"))[0] == {"a_place_2"}  # moved cleanly
        assert graph.info.relation_types == ["NEAR_BY", "NEAR_BY_2"]
        assert {(h, t) for h, _, t in graph.triples([r, s])} == {("r", "s")}
        # A second upsert reads the labels the first one gave.
        upsert(neo4j_driver, dataset_label, [NodeRow("t", "t", "a-place", "t")], [], encode)
        assert _labels(neo4j_driver, dataset_label, graph.info.num_nodes)[0] == {"a_place_3"}
    finally:
        writer.drop()


def test_concurrent_upserts_keep_each_others_new_relation_types(neo4j_driver, dataset_label, small_graph):
    """Two upserts that each bring a relation type the dataset has not seen, at the same moment:
    the record must list both (each extends the vocabulary under a lock on the record)."""
    import threading

    rng = np.random.default_rng(0)
    early = LiveGraph(neo4j_driver, dataset_label)  # opened before: as a server's retriever is

    def encode(texts):
        return rng.normal(size=(len(texts), 16)).astype(np.float32)

    assert not early.refresh()
    for trial in range(3):
        go, errors = threading.Barrier(2), []

        def one(relation, source, target):
            go.wait()
            try:
                upsert(neo4j_driver, dataset_label, [], [EdgeRow(source, target, relation)], encode)
            except Exception as exc:  # reported below: a thread's exception would otherwise be lost
                errors.append(exc)

        threads = [threading.Thread(target=one, args=(f"new x {trial}", 0, 5)),
                   threading.Thread(target=one, args=(f"new y {trial}", 1, 6))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        graph = LiveGraph(neo4j_driver, dataset_label)
        assert {f"new x {trial}", f"new y {trial}"} <= set(graph.info.relation_names)
        assert len(graph.info.relation_names) == len(graph.info.relation_types) == 4 + 2 * (trial + 1)
        assert graph.info.relation_embeddings.shape == (4 + 2 * (trial + 1), 16)
        assert early.refresh() and early.info.relation_types == graph.info.relation_types
        _, _, rel = early.induced_edges(np.asarray([0, 1, 5, 6]))
        new_ids = {early.info.relation_types.index(t) for t in graph.info.relation_types[-2:]}
        assert new_ids <= set(rel.tolist())  # the new relationships are known and returned


def test_unknown_dataset_and_wrong_dimension_are_one_line_errors(neo4j_driver, dataset_label, small_graph):
    with pytest.raises(LiveGraphError, match="is not in Neo4j .* run `seeder-dgl ingest nope_dataset`"):
        LiveGraph(neo4j_driver, "nope_dataset")
    graph = LiveGraph(neo4j_driver, dataset_label)
    with pytest.raises(LiveGraphError, match="has 8 dimensions but"):
        graph.dense_seeds(np.ones(8, np.float32), 3)


def test_running_out_of_transaction_memory_is_a_one_line_error_that_says_what_to_do(neo4j_driver):
    """The test server caps each transaction at conftest.TEST_TX_MEMORY; a statement that collects
    more fails there, and the error names the cause and the remedy."""
    from neo4j.exceptions import Neo4jError

    from seeder_dgl.graphstore.connection import describe_neo4j_error

    with pytest.raises(Neo4jError) as caught:
        neo4j_driver.execute_query("UNWIND range(1, $n) AS i WITH collect(i) AS xs RETURN size(xs)", n=50_000_000)
    line = describe_neo4j_error(caught.value, "K-hop expansion, hop 2")
    assert "\n" not in line
    assert line.startswith("K-hop expansion, hop 2: Neo4j ran out of transaction memory")
    assert "SEEDER_NEO4J_TX_MEMORY" in line and "128.0 MiB" in line


def test_node_features_are_the_same_through_the_procedure_and_cypher(neo4j_driver, dataset_label, small_graph,
                                                                      seeder_procedures):
    """seeder.nodeFeatures sends float32 bytes where the Cypher statement sends float lists: the
    same float32 numbers, types, names and order, and the same error for a node that is gone. One
    node's embedding is stored as a float64 list, so the procedure rounds it as numpy does."""
    kg, emb, _ = small_graph
    with neo4j_driver.session() as session:
        session.run(f"MATCH (n:{dataset_label} {{id: 3}}) SET n.embedding = $e",
                    e=(emb[3].astype(np.float64) + 1e-9).tolist()).consume()
    ids = np.random.default_rng(19).permutation(kg.num_nodes)[:150].tolist() + [3]
    cypher, procedure = (LiveGraph(neo4j_driver, dataset_label, khop=k) for k in ("cypher", "procedure"))
    assert (cypher.khop_engine, procedure.khop_engine) == ("cypher", "procedure")
    (c_emb, c_types, c_names), (p_emb, p_types, p_names) = cypher.node_features(ids), procedure.node_features(ids)
    assert c_emb.dtype == p_emb.dtype == np.float32 and c_emb.shape == p_emb.shape == (len(ids), 16)
    assert np.array_equal(c_emb, p_emb) and p_emb.flags.writeable
    assert np.array_equal(p_emb[:-1], emb[ids[:-1]])  # stored as float32 at ingest: unchanged
    assert (c_types, c_names) == (p_types, p_names) and p_names == [f"node {i}" for i in ids]
    assert procedure.node_features([])[0].shape == cypher.node_features([])[0].shape == (0, 16)
    errors = []
    for graph in (cypher, procedure):
        with pytest.raises(LiveGraphError, match="disappeared") as caught:
            graph.node_features([ids[0], 5000, ids[1]])
        errors.append(str(caught.value))
    assert errors[0] == errors[1] and "\n" not in errors[0] and "[5000]" in errors[0]


@pytest.mark.parametrize("walk", ["store", "copy", "copy-nodes"])
def test_khop_reads_the_features_of_its_nodes_in_the_same_call(neo4j_driver, dataset_label, small_graph,
                                                               seeder_procedures, walk):
    """With ``with_features``, seeder.khop returns the embeddings, types and names of the subgraph's
    nodes, read with their scores (walking the store or its copy of the relationships, and on the
    copy from the store or from the server's copy of the nodes): row for row what node_features
    gives, a node stored as a float64 list rounded the same way. Without it, and through Cypher,
    there are none and the policy asks node_features."""
    _, emb, _ = small_graph
    with neo4j_driver.session() as session:
        session.run(f"MATCH (n:{dataset_label} {{id: 3}}) SET n.embedding = $e",
                    e=(emb[3].astype(np.float64) + 1e-9).tolist()).consume()
    options = {"store": {"adjacency": False}, "copy": {"adjacency_wait": True, "node_copy": False},
               "copy-nodes": {"adjacency_wait": True, "node_copy_wait": True}}[walk]
    graph = LiveGraph(neo4j_driver, dataset_label, khop="procedure", procedure_options=options)
    q = random_embeddings(1, seed=21)[0]
    seeds = graph.dense_seeds(q, 3, exact=True) + [(3, 0.1)]
    sub = graph.khop_filter(q, seeds, [20, 30], with_features=True)
    assert graph.last_walked == walk.removesuffix("-nodes") and sub.num_nodes > len(seeds)
    assert graph.last_scored == ("copy" if walk == "copy-nodes" else "store")
    features, types, names = sub.features
    expected, expected_types, expected_names = graph.node_features(sub.node_ids)
    assert features.dtype == np.float32 and features.shape == (sub.num_nodes, 16) and features.flags.writeable
    assert np.array_equal(features, expected) and (types, names) == (expected_types, expected_names)
    assert graph.khop_filter(q, seeds, [20, 30]).features is None
    cypher = LiveGraph(neo4j_driver, dataset_label, khop="cypher")
    assert cypher.khop_filter(q, seeds, [20, 30], with_features=True).features is None


def test_retrieval_runs_in_read_access_mode(neo4j_driver, dataset_label, small_graph, khop_engine):
    """Every statement of a retrieval goes out as a read (a cluster may route it to a reader, and
    the server refuses it any write), and retrieval answers as through a plain driver."""
    recording = RecordingDriver(neo4j_driver)
    graph = LiveGraph(recording, dataset_label, khop=khop_engine)
    graph.check_ready()
    q = random_embeddings(1, seed=31)[0]
    seeds = graph.dense_seeds(q, 3)
    sub = graph.khop_filter(q, seeds, [10, 20])
    graph.dense_seeds(q, 3, exact=True), graph.node_features(sub.node_ids), graph.triples(sub.node_ids)
    graph.fulltext_hits("node 7", q)
    plain = LiveGraph(neo4j_driver, dataset_label, khop=khop_engine)
    assert sub.node_ids.tolist() == plain.khop_filter(q, seeds, [10, 20]).node_ids.tolist() and sub.num_nodes == 33
    assert set(recording.modes) == {READ_ACCESS, RoutingControl.READ}  # sessions, and the record's query
    with pytest.raises(ClientError, match="read access mode"):
        with neo4j_driver.session(default_access_mode=READ_ACCESS) as session:
            session.run("CREATE (:ReadModeProbe)").consume()


def test_a_long_lived_retriever_takes_in_upserted_relation_types_read_along_with_khop(
        neo4j_driver, dataset_label, small_graph, khop_engine, monkeypatch):
    """A Retriever opened before an upsert that brings a new relation type follows it on its next
    call: the new type's name is the question itself (sim(q, r) = 1), so with one node to add at
    hop 1 K-hop must pick the node behind it. Through the procedures, K-hop's own statement reads
    the record's count of types, so no call spends a round trip of its own on it (the call that
    finds a new type runs again with it); through Cypher each call asks."""
    from seeder_dgl.api import Retriever
    from tests.e2e.test_extract import FixedEncoder

    kg, emb, _ = small_graph
    monkeypatch.setenv("SEEDER_KHOP", khop_engine)
    with Retriever(dataset_label, method="khop", seeds=1, budgets=(1,), seeding="dense", exact_seeds=True,
                   driver=neo4j_driver, encoder=FixedEncoder({"q": emb[0]})) as api:
        statements = []
        run = api.graph._run
        monkeypatch.setattr(api.graph, "_run",
                            lambda statement, *a, **kw: statements.append(statement) or run(statement, *a, **kw))
        before = api.retrieve("q", k=10)
        seed = next(n.id for n in before.nodes if n.seed)
        neighbours = {int(d) for s, d in zip(kg.edge_src, kg.edge_dst) if s == seed} | {int(s) for s, d in zip(kg.edge_src, kg.edge_dst)
                                                                               if d == seed}
        far = next(i for i in np.argsort(emb @ emb[0]) if int(i) not in neighbours | {seed})
        upsert(neo4j_driver, dataset_label, [], [EdgeRow(seed, int(far), "mentored by")],
               lambda texts: np.repeat(emb[:1], len(texts), axis=0))
        after = api.retrieve("q", k=10)
        assert [n.id for n in after.nodes if not n.seed] == [int(far)]
        assert any(r == "mentored_by" and {h, t} == {seed, int(far)} for h, _, r, t, _ in after._edges)
        assert "MENTORED_BY" in api.graph.info.relation_types
        assert statements.count("dataset/relation_count") == (0 if khop_engine == "procedure" else 2)
        GraphWriter(neo4j_driver, dataset_label).drop()  # while the Retriever is open: it says so
        with pytest.raises(DatasetGone, match="was dropped: ingest it again"):
            api.retrieve("q", k=10)
